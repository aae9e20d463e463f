//! Transform tests: VJP/JVP against central finite differences in f64, compositions, vmap
//! against loops, threads.
mod common;

use common::{assert_close, check_grads, vals, Lcg};
use cotangent::{self as ct, Array, DType};

#[test]
fn unary_grads() {
    let mut rng = Lcg(1);
    let x = rng.array(&[3, 4], 0.2, 0.9);
    macro_rules! check {
        ($($op:ident),*) => {$(check_grads(stringify!($op), |x: &[Array]| x[0].$op(), &[x.clone()]);)*};
    }
    check!(
        negative, abs, exp, expm1, log, log1p, log2, sqrt, rsqrt, square, reciprocal, sin, cos, tan, tanh, sinh, cosh,
        arcsin, arccos, arctan, sigmoid, erf, erfinv
    );
}

#[test]
fn binary_grads_with_broadcast() {
    let mut rng = Lcg(2);
    let a = rng.array(&[3, 1, 4], 0.5, 1.5);
    let b = rng.array(&[2, 1], 0.5, 1.5);
    macro_rules! check {
        ($($op:ident),*) => {$(check_grads(stringify!($op), |x: &[Array]| x[0].$op(&x[1]), &[a.clone(), b.clone()]);)*};
    }
    check!(add, subtract, multiply, divide, power, maximum, minimum, arctan2, logaddexp, remainder);
    check_grads("select", |x: &[Array]| ct::select(&x[0].greater(&x[1]), &x[0], &x[1]), &[a.clone(), b.clone()]);
}

/// At a tie `maximum` and `minimum` split the gradient evenly between their arguments (JAX's
/// rule); where one argument wins it takes all; NaN sends nothing to either. Checked for the
/// VJP (both arguments, one broadcast), the JVP and the relu pattern `maximum(x, 0)`, in f64,
/// f32 and bf16.
#[test]
fn extremum_grads_split_ties() {
    let x = [-1.0f64, 0.0, 2.0, 3.0, f64::NAN];
    let y = [0.0f64, 0.0, 1.0, 3.0, 1.0];
    // (op, share of x, share of y)
    let cases: [(&str, [f64; 5], [f64; 5]); 2] = [
        ("maximum", [0.0, 0.5, 1.0, 0.5, 0.0], [1.0, 0.5, 0.0, 0.5, 0.0]),
        ("minimum", [1.0, 0.5, 0.0, 0.5, 0.0], [0.0, 0.5, 1.0, 0.5, 0.0]),
    ];
    for dtype in [DType::F64, DType::F32, DType::BF16] {
        let (xa, ya) = (Array::from_slice(&x, &[5]).astype(dtype), Array::from_slice(&y, &[5]).astype(dtype));
        for (op, want_x, want_y) in cases {
            let f = move |a: &[Array]| vec![if op == "maximum" { a[0].maximum(&a[1]) } else { a[0].minimum(&a[1]) }];
            let cot = ct::full(&[5], 2.0, dtype);
            let (_, g) = ct::vjp(f, &[xa.clone(), ya.clone()], &[cot]).unwrap();
            let twice = |w: [f64; 5]| w.map(|v| 2.0 * v).to_vec();
            assert_eq!(vals(&g[0].astype(DType::F64)), twice(want_x), "{op} d/dx {dtype}");
            assert_eq!(vals(&g[1].astype(DType::F64)), twice(want_y), "{op} d/dy {dtype}");
            let tangent = ct::full(&[5], 4.0, dtype);
            let (_, t) = ct::jvp(f, &[xa.clone(), ya.clone()], &[tangent, ct::zeros(&[5], dtype)]).unwrap();
            assert_eq!(vals(&t[0].astype(DType::F64)), want_x.map(|v| 4.0 * v).to_vec(), "{op} jvp {dtype}");
        }
    }
    // relu: the scalar 0 broadcasts; its gradient is summed
    let relu = |a: &[Array]| a[0].maximum(&a[1]).sum_all();
    let g = ct::grad_argnums(relu, &[0, 1])(&[Array::from_slice(&x[..4], &[4]), Array::scalar(0.0f64)]).unwrap();
    assert_eq!(vals(&g[0]), vec![0.0, 0.5, 1.0, 1.0]);
    assert_eq!(vals(&g[1]), vec![1.5]);
}

#[test]
fn reduce_and_shape_grads() {
    let mut rng = Lcg(3);
    let x = rng.array(&[2, 3, 4], 0.5, 1.5);
    check_grads("sum", |x: &[Array]| x[0].sum(&[-1, 0], true), &[x.clone()]);
    check_grads("prod", |x: &[Array]| x[0].prod(&[1], false), &[x.clone()]);
    check_grads("max", |x: &[Array]| x[0].max(&[2], false), &[x.clone()]);
    check_grads("min", |x: &[Array]| x[0].min(&[0, 2], true), &[x.clone()]);
    check_grads("mean", |x: &[Array]| x[0].mean(&[1], false), &[x.clone()]);
    check_grads("reshape", |x: &[Array]| x[0].reshape(&[4, -1]).exp(), &[x.clone()]);
    check_grads("transpose", |x: &[Array]| x[0].transpose(&[2, 0, 1]).sin(), &[x.clone()]);
    check_grads("broadcast", |x: &[Array]| x[0].sum(&[0], true).broadcast_to(&[5, 2, 3, 4]).cos(), &[x.clone()]);
    // through a cast the cotangent is cast back (f32 rounding makes finite differences useless here)
    let (_, g) =
        ct::vjp(|x: &[Array]| x[0].astype(DType::F32), &[x.clone()], &[ct::full(&[2, 3, 4], 0.25, DType::F32)])
            .unwrap();
    assert_eq!(g[0].dtype(), DType::F64);
    assert_eq!(vals(&g[0]), vec![0.25; 24]);
}

#[test]
fn grad_of_grad_and_hvp() {
    // f(x) = sum(x^3 + sin(x)) -> f'' = 6x - sin(x)
    let f = |x: &[Array]| (x[0].power(3.0) + x[0].sin()).sum_all();
    let x = Array::from_slice(&[0.5f64, -1.0, 2.0], &[3]);
    let d2 = ct::grad(move |x: &[Array]| ct::grad(f)(x).map(|g| g[0].sum_all()));
    let want: Vec<f64> = vals(&x).iter().map(|v| 6.0 * v - v.sin()).collect();
    assert_close(&vals(&d2(&[x.clone()]).unwrap()[0]), &want, 1e-12, "grad grad");
    let v = Array::from_slice(&[1.0f64, 2.0, 3.0], &[3]);
    let hv = ct::hvp(f, &[x.clone()], &[v.clone()]).unwrap();
    let want: Vec<f64> = vals(&x).iter().zip(vals(&v)).map(|(x, v)| (6.0 * x - x.sin()) * v).collect();
    assert_close(&vals(&hv[0]), &want, 1e-12, "hvp");
    let h = ct::hessian(f)(&[x.clone()]).unwrap();
    assert_eq!(h.shape(), &[3, 3]);
    let hv = vals(&h);
    for i in 0..3 {
        for j in 0..3 {
            let want = if i == j { 6.0 * vals(&x)[i] - vals(&x)[i].sin() } else { 0.0 };
            assert!((hv[i * 3 + j] - want).abs() < 1e-12);
        }
    }
}

#[test]
fn vmap_matches_loop() {
    let mut rng = Lcg(4);
    let xs = rng.array(&[3, 5, 4], -1.0, 1.0);
    let y = rng.array(&[4], -1.0, 1.0);
    let f = |x: &[Array]| vec![(&x[0] * &x[1]).exp().sum(&[-1], false), x[0].max_all()];
    for in_ax in [0isize, 1, 2] {
        let batched = ct::vmap(f, &[Some(in_ax), None], &[Some(0), Some(-1)]);
        let xm = xs.moveaxis(0, in_ax);
        let outs = batched(&[xm, y.clone()]).unwrap();
        assert_eq!(outs[0].shape(), &[3, 5]);
        assert_eq!(outs[1].shape(), &[3]);
        for b in 0..3 {
            let xb = Array::from_vec(vals(&xs)[b * 20..(b + 1) * 20].to_vec(), &[5, 4]);
            let r = f(&[xb, y.clone()]);
            assert_close(&vals(&outs[0])[b * 5..(b + 1) * 5], &vals(&r[0]), 1e-12, "vmap out 0");
            assert_close(&vals(&outs[1])[b..b + 1], &vals(&r[1]), 1e-12, "vmap out 1");
        }
    }
    // nested vmap and an unbatched output broadcast
    let g = ct::vmap(
        ct::vmap(|x: &[Array]| vec![x[0].square(), Array::scalar(1.0f64)], &[Some(0)], &[Some(0)]),
        &[Some(1)],
        &[Some(0)],
    );
    let x = rng.array(&[2, 3], -1.0, 1.0);
    let o = g(&[x.clone()]).unwrap();
    assert_eq!(o[0].shape(), &[3, 2]);
    assert_close(&vals(&o[0]), &vals(&x.t().square()), 1e-15, "nested");
    assert_eq!(vals(&o[1]), vec![1.0; 6]);
}

#[test]
fn vmap_of_grad_and_grad_of_vmap() {
    let mut rng = Lcg(5);
    let xs = rng.array(&[4, 3], -1.0, 1.0);
    let f = |x: &[Array]| x[0].sin().sum_all();
    let per_example = ct::vmap(ct::grad(f), &[Some(0)], &[Some(0)]);
    let g = per_example(&[xs.clone()]).unwrap();
    assert_close(&vals(&g[0]), &vals(&xs.cos()), 1e-14, "vmap grad");
    let gv = ct::grad(move |x: &[Array]| ct::vmap(f, &[Some(0)], &[Some(0)])(x).map(|o| o[0].sum_all()));
    assert_close(&vals(&gv(&[xs.clone()]).unwrap()[0]), &vals(&xs.cos()), 1e-14, "grad vmap");
}

#[test]
fn errors_are_clear() {
    let x = Array::from_slice(&[1.0f64, 2.0], &[2]);
    let e = ct::grad(|x: &[Array]| x[0].exp())(&[x.clone()]).unwrap_err();
    assert!(e.to_string().contains("scalar"), "{e}");
    let e = ct::vjp(|x: &[Array]| x[0].exp(), &[x.clone()], &[Array::scalar(1.0f64)]).unwrap_err();
    assert!(e.to_string().contains("shape"), "{e}");
    let e = ct::jvp(|x: &[Array]| x[0].exp(), &[x.clone()], &[]).unwrap_err();
    assert!(e.to_string().contains("tangents"), "{e}");
}

#[test]
fn stop_gradient_and_constants() {
    let x = Array::scalar(3.0f64);
    let g = ct::grad(|x: &[Array]| &x[0] * ct::stop_gradient(&x[0]))(&[x.clone()]).unwrap();
    assert_eq!(g[0].item::<f64>().unwrap(), 3.0);
}

#[test]
fn long_chain_grad() {
    let f = |x: &[Array]| {
        let mut y = x[0].clone();
        for _ in 0..100_000 {
            y = &y * 1.0000001 + 0.0;
        }
        y.sum_all()
    };
    let g = ct::grad(f)(&[Array::from_slice(&[1.0f64], &[1])]).unwrap();
    let want = 1.0000001f64.powi(100_000);
    assert!((g[0].to_vec::<f64>().unwrap()[0] - want).abs() < 1e-9);
}

#[test]
fn threads_share_transformed_functions() {
    let f = |x: &[Array]| (x[0].tanh() * &x[1]).sum_all();
    let g = ct::grad(f);
    let v = ct::vmap(g.clone(), &[Some(0), Some(0)], &[Some(0)]);
    let inputs: Vec<(Array, Array)> = (0..8)
        .map(|i| {
            let mut r = Lcg(100 + i);
            (r.array(&[5, 3], -1.0, 1.0), r.array(&[5, 3], -1.0, 1.0))
        })
        .collect();
    let single: Vec<(Vec<f64>, Vec<f64>)> = inputs
        .iter()
        .map(|(a, b)| (vals(&g(&[a.clone(), b.clone()]).unwrap()[0]), vals(&v(&[a.clone(), b.clone()]).unwrap()[0])))
        .collect();
    std::thread::scope(|s| {
        for t in 0..8 {
            let (g, v, inputs, single) = (g.clone(), v.clone(), &inputs, &single);
            s.spawn(move || {
                for k in 0..200 {
                    let i = (t + k) % 8;
                    let (a, b) = &inputs[i];
                    assert_eq!(vals(&g(&[a.clone(), b.clone()]).unwrap()[0]), single[i].0);
                    assert_eq!(vals(&v(&[a.clone(), b.clone()]).unwrap()[0]), single[i].1);
                }
            });
        }
    });
}
