use cotangent::{self as ct, Array};

#[test]
fn custom_vjp_sees_outputs_and_composes() {
    let softplus = ct::custom_function(|x: &[Array]| (x[0].exp() + 1.0).log())
        .vjp(|_p, c, o| vec![&c[0] * (1.0 - (-&o[0]).exp())])
        .build();
    let s2 = softplus.clone();
    let g = ct::grad(move |x: &[Array]| Ok::<_, ct::Error>(s2(x)?[0].sum_all()));
    let x = Array::from_slice(&[-1.0f64, 0.0, 2.0], &[3]);
    let got = g(&[x.clone()]).unwrap()[0].to_vec::<f64>().unwrap();
    let want: Vec<f64> = [-1.0f64, 0.0, 2.0].iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() < 1e-12);
    }
    // second derivative through the custom vjp: sigmoid' = s(1-s)
    let s3 = softplus.clone();
    let gg = ct::grad(move |x: &[Array]| {
        let s4 = s3.clone();
        ct::grad(move |x: &[Array]| Ok::<_, ct::Error>(s4(x)?[0].sum_all()))(x).map(|g| g[0].sum_all())
    });
    let got = gg(&[x.clone()]).unwrap()[0].to_vec::<f64>().unwrap();
    for (a, s) in got.iter().zip(&want) {
        assert!((a - s * (1.0 - s)).abs() < 1e-12, "{a} vs {}", s * (1.0 - s));
    }
    // vmap of grad and grad of vmap
    let s5 = softplus.clone();
    let vg = ct::vmap(ct::grad(move |x: &[Array]| Ok::<_, ct::Error>(s5(x)?[0].sum_all())), &[Some(0)], &[Some(0)]);
    let got = vg(&[x.clone()]).unwrap()[0].to_vec::<f64>().unwrap();
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() < 1e-12);
    }
    let s6 = softplus.clone();
    let gv = ct::grad(move |x: &[Array]| ct::vmap(s6.clone(), &[Some(0)], &[Some(0)])(x).map(|o| o[0].sum_all()));
    let got = gv(&[x.clone()]).unwrap()[0].to_vec::<f64>().unwrap();
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() < 1e-12);
    }
}

#[test]
fn wrong_rule_is_an_error() {
    let bad = ct::custom_function(|x: &[Array]| x[0].exp())
        .vjp(|_p, c, _o| vec![c[0].clone(), c[0].clone()])
        .name("bad")
        .build();
    let e =
        ct::grad(move |x: &[Array]| Ok::<_, ct::Error>(bad(x)?[0].sum_all()))(&[Array::scalar(1.0f64)]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("bad") && msg.contains("vjp"), "{msg}");
}

#[test]
fn checkpoint_same_grads() {
    let f = |x: &[Array]| (x[0].tanh() * &x[1]).exp().sum_all();
    let cf = ct::checkpoint(f);
    let x = Array::from_slice(&[0.1f64, -0.4, 0.3], &[3]);
    let y = Array::from_slice(&[1.0f64, 2.0, -1.0], &[3]);
    let a = ct::grad(f)(&[x.clone(), y.clone()]).unwrap();
    let b = ct::grad(move |x: &[Array]| Ok::<_, ct::Error>(cf(x)?.remove(0)))(&[x, y]).unwrap();
    for (p, q) in a.iter().zip(&b) {
        assert_eq!(p.to_vec::<f64>().unwrap(), q.to_vec::<f64>().unwrap());
    }
}
