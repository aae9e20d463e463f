//! Custom functions, `depends` and `checkpoint`: the user's rules are really used (shown with
//! deliberately different rules), missing rules fall back exactly, rules compose with every
//! transform (grad∘grad, Hessians, vmap∘grad, grad∘vmap), bad rules give errors naming the
//! function and the rule, and built functions can be shared by many threads.
mod common;

use common::{assert_close, vals, Lcg};
use cotangent::{self as ct, Array, DType};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

/// The plain function used by the VJP tests: two inputs, two outputs.
fn two_out(x: &[Array]) -> Vec<Array> {
    vec![x[0].sin() * &x[1], x[0].exp() + &x[1]]
}

#[test]
fn vjp_with_outputs_gets_the_forward_outputs_and_matches_autodiff() {
    let forward_calls = Arc::new(AtomicUsize::new(0));
    let rule_calls = Arc::new(AtomicUsize::new(0));
    let (fc, rc) = (forward_calls.clone(), rule_calls.clone());
    let f = ct::custom_function(move |x: &[Array]| {
        fc.fetch_add(1, Ordering::SeqCst);
        two_out(x)
    })
    .vjp(move |p, c, o| {
        rc.fetch_add(1, Ordering::SeqCst);
        // the outputs handed to the rule are the forward's outputs
        assert_eq!(o.len(), 2);
        let want = two_out(p);
        assert_eq!(vals(&o[0]), vals(&want[0]), "outputs[0] given to the vjp rule");
        assert_eq!(vals(&o[1]), vals(&want[1]), "outputs[1] given to the vjp rule");
        // d/dx = c0 cos(x) y + c1 e^x (e^x read from the output: o1 - y), d/dy = c0 sin(x) + c1
        let ex = &o[1] - &p[1];
        vec![&c[0] * p[0].cos() * &p[1] + &c[1] * ex, &c[0] * p[0].sin() + &c[1]]
    })
    .name("two_out")
    .build();
    let mut rng = Lcg(1);
    let x = rng.array(&[3, 4], -1.0, 1.0);
    let y = rng.array(&[3, 4], -1.0, 1.0);
    let c0 = rng.array(&[3, 4], -1.0, 1.0);
    let c1 = rng.array(&[3, 4], -1.0, 1.0);
    let (outs, g) = ct::vjp(f.clone(), &[x.clone(), y.clone()], &[c0.clone(), c1.clone()]).unwrap();
    let (pouts, pg) = ct::vjp(two_out, &[x.clone(), y.clone()], &[c0.clone(), c1.clone()]).unwrap();
    for i in 0..2 {
        assert_eq!(vals(&outs[i]), vals(&pouts[i]), "output {i}");
        assert_close(&vals(&g[i]), &vals(&pg[i]), 1e-12, &format!("cotangent {i}"));
    }
    assert_eq!(rule_calls.load(Ordering::SeqCst), 1, "the vjp rule runs once per vjp");
    // with a vjp rule the forward runs once per call: the rule reuses its outputs
    assert_eq!(forward_calls.load(Ordering::SeqCst), 1, "the forward must not be re-run for the backward pass");

    // only one output receiving a cotangent: the other gets zeros
    let g = ct::grad(move |x: &[Array]| Ok::<_, ct::Error>(f(x)?[1].sum_all()))(&[x.clone(), y.clone()]).unwrap();
    assert_close(&vals(&g[0]), &vals(&x.exp()), 1e-12, "grad through output 1 only (x)");
    assert_eq!(vals(&g[1]), vec![1.0; 12], "grad through output 1 only (y)");
}

#[test]
fn vjp_without_outputs_matches_autodiff() {
    let rule_calls = Arc::new(AtomicUsize::new(0));
    let rc = rule_calls.clone();
    let f = ct::custom_function(two_out)
        .vjp_no_outputs(move |p, c| {
            rc.fetch_add(1, Ordering::SeqCst);
            assert_eq!(p.len(), 2);
            assert_eq!(c.len(), 2);
            vec![&c[0] * p[0].cos() * &p[1] + &c[1] * p[0].exp(), &c[0] * p[0].sin() + &c[1]]
        })
        .build();
    let mut rng = Lcg(2);
    let x = rng.array(&[5], -2.0, 2.0);
    let y = rng.array(&[5], -2.0, 2.0);
    let c0 = rng.array(&[5], -1.0, 1.0);
    let c1 = rng.array(&[5], -1.0, 1.0);
    let (outs, g) = ct::vjp(f, &[x.clone(), y.clone()], &[c0.clone(), c1.clone()]).unwrap();
    let (pouts, pg) = ct::vjp(two_out, &[x, y], &[c0, c1]).unwrap();
    for i in 0..2 {
        assert_eq!(vals(&outs[i]), vals(&pouts[i]));
        assert_close(&vals(&g[i]), &vals(&pg[i]), 1e-12, &format!("cotangent {i}"));
    }
    assert_eq!(rule_calls.load(Ordering::SeqCst), 1);
}

#[test]
fn straight_through_round_uses_the_custom_rule() {
    let ste = ct::custom_function(|x: &[Array]| x[0].round()).vjp(|_p, c, _o| vec![c[0].clone()]).name("ste").build();
    let x = Array::from_slice(&[0.3f64, 1.7, -2.2, 2.5], &[4]);
    let y = ste(std::slice::from_ref(&x)).unwrap();
    assert_eq!(vals(&y[0]), vec![0.0, 2.0, -2.0, 2.0]);
    let w = Array::from_slice(&[1.0f64, -2.0, 3.0, 0.5], &[4]);
    let w2 = w.clone();
    let g = ct::grad(move |x: &[Array]| Ok::<_, ct::Error>((&ste(x)?[0] * &w2).sum_all()))(std::slice::from_ref(&x))
        .unwrap();
    assert_eq!(vals(&g[0]), vals(&w), "straight-through: cotangent passes unchanged");
    // plain round has gradient zero: the custom rule is what made the difference
    let plain = ct::grad(move |x: &[Array]| (x[0].round() * &w).sum_all())(&[x]).unwrap();
    assert_eq!(vals(&plain[0]), vec![0.0; 4]);
}

/// softplus whose VJP is written with ops on the forward output: d/dx = 1 - e^{-y}.
fn softplus_custom() -> impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync + Clone + 'static {
    ct::custom_function(|x: &[Array]| (x[0].exp() + 1.0).log())
        .vjp(|_p, c, o| vec![&c[0] * (1.0 - (-&o[0]).exp())])
        .name("softplus")
        .build()
}

/// x^3 with a VJP written with ops on the primal: 3x^2.
fn cube_custom() -> impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync + Clone + 'static {
    ct::custom_function(|x: &[Array]| x[0].power(3.0)).vjp_no_outputs(|p, c| vec![&c[0] * p[0].square() * 3.0]).build()
}

#[test]
fn higher_order_through_custom_vjp_against_closed_forms() {
    let (sp, cube) = (softplus_custom(), cube_custom());
    // L(x) = (sum softplus(x))^2 + sum x^3
    // grad: 2 S s + 3x^2 (s = sigmoid(x), S = sum softplus)
    // Hessian: 2 s s^T + diag(2 S s (1 - s) + 6 x)
    let loss = move |x: &[Array]| -> ct::Result<Array> { Ok(sp(x)?[0].sum_all().square() + cube(x)?[0].sum_all()) };
    let xs = [0.3f64, -1.2, 0.8, 2.0];
    let x = Array::from_slice(&xs, &[4]);
    let s: Vec<f64> = xs.iter().map(|&v| sigmoid(v)).collect();
    let big_s: f64 = xs.iter().map(|&v| (1.0 + v.exp()).ln()).sum();
    let hess = |i: usize, j: usize| {
        2.0 * s[i] * s[j] + if i == j { 2.0 * big_s * s[i] * (1.0 - s[i]) + 6.0 * xs[i] } else { 0.0 }
    };

    let g = ct::grad(loss.clone())(std::slice::from_ref(&x)).unwrap();
    let want: Vec<f64> = (0..4).map(|i| 2.0 * big_s * s[i] + 3.0 * xs[i] * xs[i]).collect();
    assert_close(&vals(&g[0]), &want, 1e-12, "grad");

    // grad∘grad: gradient of sum(grad L) = row sums of the Hessian
    let l2 = loss.clone();
    let gg = ct::grad(move |x: &[Array]| ct::grad(l2.clone())(x).map(|g| g[0].sum_all()));
    let want: Vec<f64> = (0..4).map(|i| (0..4).map(|j| hess(i, j)).sum()).collect();
    assert_close(&vals(&gg(std::slice::from_ref(&x)).unwrap()[0]), &want, 1e-12, "grad grad");

    let v = [1.0f64, -0.5, 2.0, 0.25];
    let hv = ct::hvp(loss.clone(), std::slice::from_ref(&x), &[Array::from_slice(&v, &[4])]).unwrap();
    let want: Vec<f64> = (0..4).map(|i| (0..4).map(|j| hess(i, j) * v[j]).sum()).collect();
    assert_close(&vals(&hv[0]), &want, 1e-12, "hvp");

    let h = ct::hessian(loss)(&[x]).unwrap();
    assert_eq!(h.shape(), &[4, 4]);
    let want: Vec<f64> = (0..16).map(|k| hess(k / 4, k % 4)).collect();
    assert_close(&vals(&h), &want, 1e-12, "hessian");

    // third derivative of the cube through its custom vjp: 6
    let c = cube_custom();
    let d3 = ct::grad(move |x: &[Array]| {
        let c = c.clone();
        ct::grad(move |x: &[Array]| {
            let c = c.clone();
            ct::grad(move |x: &[Array]| Ok::<_, ct::Error>(c(x)?[0].sum_all()))(x).map(|g| g[0].sum_all())
        })(x)
        .map(|g| g[0].sum_all())
    });
    assert_close(&vals(&d3(&[Array::from_slice(&[0.5f64, -3.0], &[2])]).unwrap()[0]), &[6.0, 6.0], 1e-12, "d3");
}

#[test]
fn vmap_of_grad_of_custom_equals_a_loop() {
    let sp = softplus_custom();
    let per_example = move |a: &[Array]| Ok::<_, ct::Error>((&sp(&a[..1])?[0] * &a[1]).sum_all());
    let g = ct::grad(per_example);
    let mut rng = Lcg(3);
    let xs = rng.array(&[6, 5], -2.0, 2.0);
    let w = rng.array(&[5], -1.0, 1.0);
    // batch axis 1 for x, w shared
    let batched = ct::vmap(g.clone(), &[Some(1), None], &[Some(0)]);
    let out = batched(&[xs.t(), w.clone()]).unwrap();
    assert_eq!(out[0].shape(), &[6, 5]);
    assert_eq!(out[1].shape(), &[6, 5]);
    let xv = vals(&xs);
    for b in 0..6 {
        let xb = Array::from_vec(xv[b * 5..(b + 1) * 5].to_vec(), &[5]);
        let gb = g(&[xb, w.clone()]).unwrap();
        assert_close(&vals(&out[0])[b * 5..(b + 1) * 5], &vals(&gb[0]), 1e-14, "vmap grad x");
        assert_close(&vals(&out[1])[b * 5..(b + 1) * 5], &vals(&gb[1]), 1e-14, "vmap grad w");
    }
}

/// sin with a deliberately wrong VJP (cotangent times 2) and JVP (tangent times 5), to tell
/// when the rules are used.
fn marked_sin() -> impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync + Clone + 'static {
    ct::custom_function(|x: &[Array]| x[0].sin())
        .vjp(|_p, c, _o| vec![&c[0] * 2.0])
        .jvp(|_p, t| vec![&t[0] * 5.0])
        .name("marked_sin")
        .build()
}

#[test]
fn grad_of_vmap_of_custom_uses_the_custom_rule() {
    let f = marked_sin();
    let xs = Lcg(4).array(&[3, 4], -1.0, 1.0);
    let gv = ct::grad(move |x: &[Array]| ct::vmap(f.clone(), &[Some(1)], &[Some(0)])(x).map(|o| o[0].sum_all()));
    assert_eq!(vals(&gv(std::slice::from_ref(&xs)).unwrap()[0]), vec![2.0; 12]);
    // and the forward values are the forward's
    let f = marked_sin();
    let y = ct::vmap(f, &[Some(1)], &[Some(1)])(std::slice::from_ref(&xs)).unwrap();
    assert_eq!(vals(&y[0]), vals(&xs.sin()));
    // jvp of vmap uses the (batched) jvp rule
    let f = marked_sin();
    let t = Lcg(5).array(&[3, 4], -1.0, 1.0);
    let (_, jt) = ct::jvp(ct::vmap(f, &[Some(0)], &[Some(0)]), &[xs], std::slice::from_ref(&t)).unwrap();
    assert_eq!(vals(&jt[0]), vals(&(&t * 5.0)));
}

#[test]
fn jvp_rule_is_used_and_missing_jvp_falls_back_exactly() {
    let mut rng = Lcg(6);
    let x = rng.array(&[7], -2.0, 2.0);
    let y = rng.array(&[7], -2.0, 2.0);
    let t = rng.array(&[7], -1.0, 1.0);
    let u = rng.array(&[7], -1.0, 1.0);
    // a rule: used as given
    let (_, jt) = ct::jvp(marked_sin(), std::slice::from_ref(&x), std::slice::from_ref(&t)).unwrap();
    assert_eq!(vals(&jt[0]), vals(&(&t * 5.0)), "the jvp rule is used");
    // no jvp rule (but a deliberately different vjp rule): jvp of the forward, bit for bit
    let f = ct::custom_function(two_out).vjp(|_p, c, _o| vec![&c[0] * 0.0, &c[1] * 0.0]).build();
    let (o, jt) = ct::jvp(f, &[x.clone(), y.clone()], &[t.clone(), u.clone()]).unwrap();
    let (po, pt) = ct::jvp(two_out, &[x.clone(), y.clone()], &[t.clone(), u.clone()]).unwrap();
    for i in 0..2 {
        assert_eq!(vals(&o[i]), vals(&po[i]), "output {i}");
        assert_eq!(vals(&jt[i]), vals(&pt[i]), "fallback tangent {i}");
    }
    // a tangent for one input only: the other is constant
    let f = ct::custom_function(two_out).build();
    let y2 = y.clone();
    let (_, jt) =
        ct::jvp(move |a: &[Array]| f(&[a[0].clone(), y2.clone()]), std::slice::from_ref(&x), std::slice::from_ref(&t))
            .unwrap();
    assert_close(&vals(&jt[0]), &vals(&(x.cos() * &y * &t)), 1e-14, "one tangent, output 0");
    assert_close(&vals(&jt[1]), &vals(&(x.exp() * &t)), 1e-14, "one tangent, output 1");
}

#[test]
fn missing_vjp_rule_falls_back_exactly() {
    let forward_calls = Arc::new(AtomicUsize::new(0));
    let fc = forward_calls.clone();
    // a deliberately different jvp rule: the vjp fallback must not use it
    let f = ct::custom_function(move |x: &[Array]| {
        fc.fetch_add(1, Ordering::SeqCst);
        two_out(x)
    })
    .jvp(|_p, t| vec![&t[0] * 0.0, &t[1] * 0.0])
    .build();
    let mut rng = Lcg(7);
    let x = rng.array(&[2, 3], -2.0, 2.0);
    let y = rng.array(&[2, 3], -2.0, 2.0);
    let c0 = rng.array(&[2, 3], -1.0, 1.0);
    let c1 = rng.array(&[2, 3], -1.0, 1.0);
    let (o, g) = ct::vjp(f.clone(), &[x.clone(), y.clone()], &[c0.clone(), c1.clone()]).unwrap();
    let (po, pg) = ct::vjp(two_out, &[x.clone(), y.clone()], &[c0, c1]).unwrap();
    for i in 0..2 {
        assert_eq!(vals(&o[i]), vals(&po[i]), "output {i}");
        assert_eq!(vals(&g[i]), vals(&pg[i]), "fallback cotangent {i}");
    }
    // documented: the fallback re-traces the forward for the backward pass
    assert_eq!(forward_calls.load(Ordering::SeqCst), 2);
    // second order through the fallback (no rules at all) equals second order of the plain
    // function (the custom jvp rule above would, rightly, be used for the forward's tangents)
    let f = ct::custom_function(two_out).build();
    let loss = |x: &[Array]| two_out(x)[0].sum_all() * two_out(x)[1].sum_all();
    let closs = move |x: &[Array]| -> ct::Result<Array> {
        let o = f(x)?;
        Ok(o[0].sum_all() * o[1].sum_all())
    };
    let v = [rng.array(&[2, 3], -1.0, 1.0), rng.array(&[2, 3], -1.0, 1.0)];
    let a = ct::hvp(closs, &[x.clone(), y.clone()], &v).unwrap();
    let b = ct::hvp(loss, &[x, y], &v).unwrap();
    for i in 0..2 {
        assert_close(&vals(&a[i]), &vals(&b[i]), 1e-13, &format!("hvp through the fallback, input {i}"));
    }
}

#[test]
fn custom_vmap_rule_is_used() {
    let seen_axes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = seen_axes.clone();
    // the rule is deliberately different from vmapping the forward: it adds 100
    let f = ct::custom_function(|x: &[Array]| &x[0].sin() * &x[1])
        .vmap(move |inputs, axes| {
            seen.lock().unwrap().push(axes.to_vec());
            let x = inputs[0].moveaxis(axes[0].unwrap() as isize, 0);
            Ok((vec![x.sin() * &inputs[1] + 100.0], vec![Some(0)]))
        })
        .name("sin_times")
        .build();
    let mut rng = Lcg(8);
    let xs = rng.array(&[4, 3], -1.0, 1.0); // batch of 3 along axis 1
    let w = rng.array(&[4], -1.0, 1.0);
    let out = ct::vmap(f.clone(), &[Some(1), None], &[Some(0)])(&[xs.clone(), w.clone()]).unwrap();
    assert_eq!(*seen_axes.lock().unwrap(), vec![vec![Some(1), None]], "the rule sees the batch axes");
    assert_close(&vals(&out[0]), &vals(&(xs.t().sin() * &w + 100.0)), 1e-15, "vmap rule output");
    // unbatched call: the forward, not the rule
    let y = f(&[xs.t(), w.clone()]).unwrap();
    assert_close(&vals(&y[0]), &vals(&(xs.t().sin() * &w)), 1e-15, "plain call");
    assert_eq!(seen_axes.lock().unwrap().len(), 1);
}

/// The error of `grad(sum(f(x)))` at x = [1, 2] in f64.
fn grad_error(f: impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync + 'static) -> String {
    let g = ct::grad(move |x: &[Array]| Ok::<_, ct::Error>(f(x)?[0].sum_all()));
    g(&[Array::from_slice(&[1.0f64, 2.0], &[2])]).unwrap_err().to_string()
}

fn jvp_error(f: impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync + 'static) -> String {
    let x = Array::from_slice(&[1.0f64, 2.0], &[2]);
    ct::jvp(f, std::slice::from_ref(&x), &[ct::ones_like(&x)]).unwrap_err().to_string()
}

fn vmap_error(f: impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync + 'static) -> String {
    ct::vmap(f, &[Some(0)], &[Some(0)])(&[Array::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2])])
        .unwrap_err()
        .to_string()
}

fn assert_names(msg: &str, name: &str, rule: &str, also: &str) {
    assert!(msg.contains(name), "error should name the custom function `{name}`: {msg}");
    assert!(msg.contains(rule), "error should name the `{rule}` rule: {msg}");
    assert!(msg.contains(also), "error should mention `{also}`: {msg}");
}

#[test]
fn bad_rules_are_errors_naming_the_function_and_rule() {
    let exp = |x: &[Array]| x[0].exp();
    // vjp: count, shape, dtype
    let e =
        grad_error(ct::custom_function(exp).vjp(|_p, c, _o| vec![c[0].clone(), c[0].clone()]).name("vjp_n").build());
    assert_names(&e, "vjp_n", "vjp", "2 arrays");
    let e = grad_error(ct::custom_function(exp).vjp(|_p, c, _o| vec![c[0].sum_all()]).name("vjp_shape").build());
    assert_names(&e, "vjp_shape", "vjp", "shape");
    let e = grad_error(
        ct::custom_function(exp).vjp_no_outputs(|_p, c| vec![c[0].astype(DType::F32)]).name("vjp_dtype").build(),
    );
    assert_names(&e, "vjp_dtype", "vjp", "float32");
    let e = grad_error(ct::custom_function(exp).vjp(|_p, _c, _o| Vec::new()).name("vjp_empty").build());
    assert_names(&e, "vjp_empty", "vjp", "0 arrays");
    // a rule may fail itself; its error comes back unchanged
    let e = grad_error(
        ct::custom_function(exp)
            .vjp(|_p, _c, _o| -> ct::Result<Vec<Array>> { Err(ct::Error::Other("rule says no".into())) })
            .build(),
    );
    assert!(e.contains("rule says no"), "{e}");
    // jvp: count, shape, dtype
    let e = jvp_error(ct::custom_function(exp).jvp(|_p, t| vec![t[0].clone(), t[0].clone()]).name("jvp_n").build());
    assert_names(&e, "jvp_n", "jvp", "2 arrays");
    let e = jvp_error(ct::custom_function(exp).jvp(|_p, t| vec![t[0].reshape(&[1, 2])]).name("jvp_shape").build());
    assert_names(&e, "jvp_shape", "jvp", "shape");
    let e = jvp_error(ct::custom_function(exp).jvp(|_p, t| vec![t[0].astype(DType::F32)]).name("jvp_dtype").build());
    assert_names(&e, "jvp_dtype", "jvp", "float32");
    // vmap: count, shape, dtype
    let e = vmap_error(
        ct::custom_function(exp)
            .vmap(|x, a| Ok((vec![x[0].exp(), x[0].exp()], vec![a[0], a[0]])))
            .name("vmap_n")
            .build(),
    );
    assert_names(&e, "vmap_n", "vmap", "2 outputs");
    let e = vmap_error(
        ct::custom_function(exp).vmap(|x, _a| Ok((vec![x[0].sum_all()], vec![None]))).name("vmap_shape").build(),
    );
    assert_names(&e, "vmap_shape", "vmap", "shape");
    let e = vmap_error(
        ct::custom_function(exp)
            .vmap(|x, a| Ok((vec![x[0].exp().astype(DType::F32)], vec![a[0]])))
            .name("vmap_dtype")
            .build(),
    );
    assert_names(&e, "vmap_dtype", "vmap", "float32");
    // the forward returning nothing
    let e = ct::custom_function(|_x: &[Array]| Vec::<Array>::new()).name("empty").build()(&[Array::scalar(1.0f64)])
        .unwrap_err()
        .to_string();
    assert_names(&e, "empty", "forward", "no outputs");
}

#[test]
fn depends_semantics() {
    let mut rng = Lcg(9);
    let x = rng.array(&[2, 3], -1.0, 1.0);
    let y = rng.array(&[3], -1.0, 1.0);
    let z = rng.array(&[4], -1.0, 1.0);
    // values pass through; the dependency is computed first
    let dep = z.exp();
    let out = ct::depends(&[x.clone(), y.clone()], std::slice::from_ref(&dep));
    assert_eq!(out.len(), 2);
    assert!(!dep.is_evaluated());
    assert_eq!(vals(&out[0]), vals(&x));
    assert!(dep.is_evaluated(), "evaluating depends computes its dependencies");
    assert_eq!(vals(&out[1]), vals(&y));
    assert_eq!(out[0].shape(), x.shape());
    // vjp: cotangents pass to the inputs, zeros to the dependencies
    let f = |a: &[Array]| ct::depends(&a[..2], &a[2..]);
    let c0 = rng.array(&[2, 3], -1.0, 1.0);
    let c1 = rng.array(&[3], -1.0, 1.0);
    let (o, g) = ct::vjp(f, &[x.clone(), y.clone(), z.clone()], &[c0.clone(), c1.clone()]).unwrap();
    assert_eq!(vals(&o[0]), vals(&x));
    assert_eq!(vals(&g[0]), vals(&c0));
    assert_eq!(vals(&g[1]), vals(&c1));
    assert_eq!(vals(&g[2]), vec![0.0; 4]);
    // inside a larger function the dependency's own use still gets its gradient
    let h = |a: &[Array]| (&ct::depends(&a[..1], &a[1..2])[0] * 2.0).sum_all() + a[1].square().sum_all();
    let g = ct::grad(h)(&[x.clone(), z.clone()]).unwrap();
    assert_eq!(vals(&g[0]), vec![2.0; 6]);
    assert_eq!(vals(&g[1]), vals(&(&z * 2.0)));
    // jvp: tangents of the inputs pass through (the dependencies' tangents do not leak)
    let (t0, t1, t2) = (rng.array(&[2, 3], -1.0, 1.0), rng.array(&[3], -1.0, 1.0), rng.array(&[4], -1.0, 1.0));
    let (_, jt) = ct::jvp(f, &[x.clone(), y.clone(), z.clone()], &[t0.clone(), t1.clone(), t2]).unwrap();
    assert_eq!(vals(&jt[0]), vals(&t0));
    assert_eq!(vals(&jt[1]), vals(&t1));
    // vmap: batch axes pass through
    let xb = rng.array(&[2, 5, 3], -1.0, 1.0); // batch along axis 1
    let zb = rng.array(&[5, 4], -1.0, 1.0); // batch along axis 0
    let vf = ct::vmap(|a: &[Array]| ct::depends(&a[..2], &a[2..]), &[Some(1), None, Some(0)], &[Some(0), Some(0)]);
    let o = vf(&[xb.clone(), y.clone(), zb]).unwrap();
    assert_eq!(o[0].shape(), &[5, 2, 3]);
    assert_eq!(vals(&o[0]), vals(&xb.moveaxis(1, 0)));
    assert_eq!(o[1].shape(), &[5, 3]);
    assert_eq!(vals(&o[1]), vals(&y.expand_dims(&[0]).broadcast_to(&[5, 3])));
}

/// A two-input, two-output block for the checkpoint tests.
fn block(x: &[Array]) -> Vec<Array> {
    let h = (&x[0] * &x[1]).tanh();
    vec![(h.exp() * &x[0]).sin(), h.square().sum(&[-1], false)]
}

#[test]
fn checkpoint_same_values_and_gradients() {
    let cb = ct::checkpoint(block);
    let mut rng = Lcg(10);
    let x = rng.array(&[3, 4], -1.0, 1.0);
    let w = rng.array(&[3, 4], -1.0, 1.0);
    let o = cb(&[x.clone(), w.clone()]).unwrap();
    let po = block(&[x.clone(), w.clone()]);
    for i in 0..2 {
        assert_eq!(vals(&o[i]), vals(&po[i]), "checkpoint output {i}");
    }
    let c = [rng.array(&[3, 4], -1.0, 1.0), rng.array(&[3], -1.0, 1.0)];
    let (_, a) = ct::vjp(cb.clone(), &[x.clone(), w.clone()], &c).unwrap();
    let (_, b) = ct::vjp(block, &[x.clone(), w.clone()], &c).unwrap();
    for i in 0..2 {
        assert_close(&vals(&a[i]), &vals(&b[i]), 1e-12, &format!("checkpoint vjp {i}"));
    }
    // a chain of checkpointed blocks, second order, and vmap
    let cb2 = cb.clone();
    let chain = move |a: &[Array]| -> ct::Result<Array> {
        let mut x = a[0].clone();
        for _ in 0..3 {
            x = cb2(&[x, a[1].clone()])?.remove(0);
        }
        Ok(x.sum_all())
    };
    let plain_chain = |a: &[Array]| {
        let mut x = a[0].clone();
        for _ in 0..3 {
            x = block(&[x, a[1].clone()]).remove(0);
        }
        x.sum_all()
    };
    let a = ct::grad(chain.clone())(&[x.clone(), w.clone()]).unwrap();
    let b = ct::grad(plain_chain)(&[x.clone(), w.clone()]).unwrap();
    for i in 0..2 {
        assert_close(&vals(&a[i]), &vals(&b[i]), 1e-12, &format!("chain grad {i}"));
    }
    let v = [rng.array(&[3, 4], -1.0, 1.0), rng.array(&[3, 4], -1.0, 1.0)];
    let a = ct::hvp(chain, &[x.clone(), w.clone()], &v).unwrap();
    let b = ct::hvp(plain_chain, &[x.clone(), w.clone()], &v).unwrap();
    for i in 0..2 {
        assert_close(&vals(&a[i]), &vals(&b[i]), 1e-12, &format!("chain hvp {i}"));
    }
    let cb3 = cb.clone();
    let per_row = ct::vmap(
        ct::grad(move |a: &[Array]| Ok::<_, ct::Error>(cb3(a)?[1].sum_all())),
        &[Some(0), Some(0)],
        &[Some(0)],
    );
    let a = per_row(&[x.clone(), w.clone()]).unwrap();
    let b = ct::grad(|a: &[Array]| block(a)[1].sum_all())(&[x, w]).unwrap();
    for i in 0..2 {
        assert_close(&vals(&a[i]), &vals(&b[i]), 1e-12, &format!("vmap grad checkpoint {i}"));
    }
}

#[test]
fn sixteen_threads_share_custom_grad_and_checkpoint() {
    let sp = softplus_custom();
    let sp2 = sp.clone();
    let g = ct::grad(move |a: &[Array]| Ok::<_, ct::Error>((&sp2(&a[..1])?[0] * &a[1]).sum_all()));
    let cb = ct::checkpoint(block);
    let cb2 = cb.clone();
    let cg = ct::grad(move |a: &[Array]| Ok::<_, ct::Error>(cb2(a)?[0].sum_all() + cb2(a)?[1].sum_all()));
    let inputs: Vec<(Array, Array)> = (0..64)
        .map(|i| {
            let mut r = Lcg(1000 + i);
            (r.array(&[4, 5], -2.0, 2.0), r.array(&[4, 5], -1.0, 1.0))
        })
        .collect();
    type Results = (Vec<u64>, Vec<u64>, Vec<u64>, Vec<u64>);
    let bits = |a: &Array| a.to_vec::<f64>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<u64>>();
    let run = |sp: &dyn Fn(&[Array]) -> ct::Result<Vec<Array>>,
               g: &dyn Fn(&[Array]) -> ct::Result<Vec<Array>>,
               cb: &dyn Fn(&[Array]) -> ct::Result<Vec<Array>>,
               cg: &dyn Fn(&[Array]) -> ct::Result<Vec<Array>>,
               (x, w): &(Array, Array)|
     -> Results {
        let args = [x.clone(), w.clone()];
        let gx = g(&args).unwrap();
        let cgx = cg(&args).unwrap();
        let mut gb = bits(&gx[0]);
        gb.extend(bits(&gx[1]));
        let mut cgb = bits(&cgx[0]);
        cgb.extend(bits(&cgx[1]));
        (bits(&sp(&args[..1]).unwrap()[0]), gb, bits(&cb(&args).unwrap()[0]), cgb)
    };
    let single: Vec<Results> = inputs.iter().map(|xw| run(&sp, &g, &cb, &cg, xw)).collect();
    std::thread::scope(|s| {
        for t in 0..16 {
            let (sp, g, cb, cg) = (sp.clone(), g.clone(), cb.clone(), cg.clone());
            let (inputs, single, run) = (&inputs, &single, &run);
            s.spawn(move || {
                for k in 0..500 {
                    let i = (t * 7 + k) % inputs.len();
                    assert!(run(&sp, &g, &cb, &cg, &inputs[i]) == single[i], "thread {t}, call {k}, input {i}");
                }
            });
        }
    });
}

/// A recurrence long enough that its graph is rebuilt lazily (more than the inline limit of
/// nodes): `h = tanh(h * w + x_t)` over the 60 rows of `x`, inputs `[h0 [4], x [60,4], w [4]]`,
/// outputs `[h_final, sum of h over steps]`.
fn long_recurrence(a: &[Array]) -> Vec<Array> {
    let (mut h, x, w) = (a[0].clone(), &a[1], &a[2]);
    let mut acc = ct::zeros_like(&h);
    for t in 0..x.dim(0) as isize {
        h = (&h * w + x.slice_axis(0, Some(t), Some(t + 1), 1).squeeze(&[0])).tanh();
        acc = acc + &h;
    }
    vec![h, acc]
}

/// `long_recurrence` as a custom function whose 3-argument VJP recomputes it on
/// `depends(primals, outputs)` (the chunk-recompute pattern); both its forward and its rule
/// build hundreds of nodes, so both run lazily.
fn long_custom() -> impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync + Clone + 'static {
    ct::custom_function(long_recurrence)
        .vjp(|p, c, o| ct::vjp(long_recurrence, &ct::depends(p, o), c).map(|(_, g)| g))
        .name("long")
        .build()
}

/// Two chained calls of `f` (two chunks), reduced to a scalar with both outputs.
fn two_chunks(f: impl Fn(&[Array]) -> ct::Result<Vec<Array>>, a: &[Array]) -> ct::Result<Array> {
    let first = f(&[a[0].clone(), a[1].slice_axis(0, Some(0), Some(60), 1), a[2].clone()])?;
    let second = f(&[first[0].clone(), a[1].slice_axis(0, Some(60), Some(120), 1), a[2].clone()])?;
    Ok((&second[0] * 2.0 + &first[1] + second[1].sin()).sum_all())
}

#[test]
fn large_forwards_and_rules_run_lazily_with_exact_results_under_every_transform() {
    let mut rng = Lcg(17);
    let a = vec![rng.array(&[4], -0.5, 0.5), rng.array(&[120, 4], -0.5, 0.5), rng.array(&[4], 0.5, 1.0)];
    let custom = long_custom();
    let lazy = move |x: &[Array]| two_chunks(&custom, x);
    let plain = |x: &[Array]| two_chunks(|y: &[Array]| Ok(long_recurrence(y)), x);

    // values: the same kernels on the same values, so equal to the last bit; gradients: equal up
    // to the order in which w's per-step cotangents are summed (per chunk, then across chunks)
    assert_eq!(vals(&lazy(&a).unwrap()), vals(&plain(&a).unwrap()), "forward");
    let (gl, gp) = (ct::grad(lazy.clone())(&a).unwrap(), ct::grad(plain)(&a).unwrap());
    for (i, (l, p)) in gl.iter().zip(&gp).enumerate() {
        assert_close(&vals(l), &vals(p), 1e-13, &format!("gradient {i}"));
    }

    // second order through the lazy rule: Hessian-vector products, forward-over-reverse and
    // reverse-over-reverse, against the plain function's
    let v: Vec<Array> = a.iter().map(|x| rng.array(x.shape(), -1.0, 1.0)).collect();
    let hl = ct::hvp(lazy.clone(), &a, &v).unwrap();
    let hp = ct::hvp(plain, &a, &v).unwrap();
    for (i, (l, p)) in hl.iter().zip(&hp).enumerate() {
        assert_close(&vals(l), &vals(p), 1e-12, &format!("hvp {i}"));
    }
    let v2 = v.clone();
    let gdotv = move |x: &[Array]| -> ct::Result<Array> {
        let g = ct::grad(lazy.clone())(x)?;
        Ok(g.iter().zip(&v2).map(|(g, v)| (g * v).sum_all()).reduce(|s, t| s + t).unwrap())
    };
    let rr = ct::grad(gdotv)(&a).unwrap();
    for (i, (l, p)) in rr.iter().zip(&hp).enumerate() {
        assert_close(&vals(l), &vals(p), 1e-12, &format!("grad of grad·v {i}"));
    }

    // vmap of grad over a batch of x sequences equals a loop
    let xs = rng.array(&[3, 120, 4], -0.5, 0.5);
    let custom = long_custom();
    let g = ct::grad_argnums(move |x: &[Array]| two_chunks(&custom, x), &[1]);
    let batched =
        ct::vmap(g.clone(), &[None, Some(0), None], &[Some(0)])(&[a[0].clone(), xs.clone(), a[2].clone()]).unwrap();
    for b in 0..3 {
        let xb = xs.slice_axis(0, Some(b), Some(b + 1), 1).squeeze(&[0]);
        let one = g(&[a[0].clone(), xb, a[2].clone()]).unwrap();
        let row = batched[0].slice_axis(0, Some(b), Some(b + 1), 1).squeeze(&[0]);
        assert_close(&vals(&row), &vals(&one[0]), 1e-12, &format!("vmap(grad) batch {b}"));
    }
}

#[test]
fn a_large_rule_returning_the_wrong_arrays_is_an_error_when_differentiating() {
    let bad = ct::custom_function(long_recurrence)
        .vjp(|p, c, o| ct::vjp(long_recurrence, &ct::depends(p, o), c).map(|(_, g)| g[..2].to_vec()))
        .name("long_bad")
        .build();
    let mut rng = Lcg(3);
    let a = vec![rng.array(&[4], -0.5, 0.5), rng.array(&[60, 4], -0.5, 0.5), rng.array(&[4], 0.5, 1.0)];
    let g = ct::grad(move |x: &[Array]| Ok::<_, ct::Error>(bad(x)?[0].sum_all()));
    let e = g(&a).unwrap_err().to_string();
    assert_names(&e, "long_bad", "vjp", "2 arrays");
}

#[test]
fn vmap_through_depends_on_batched_values_keeps_unbatched_inputs_computable() {
    // `w` is unbatched but passes through a `depends` node on the batched `x`: the ops after it
    // must be rebuilt on the batched graph's nodes, not left pointing into the vmap trace
    let f = |a: &[Array]| {
        let w = ct::depends(&[a[1].clone()], &[&a[0] * 2.0]).remove(0);
        (w.exp() * 3.0) + &a[0]
    };
    let xs = Array::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    let w = Array::from_slice(&[0.5f64, -0.5], &[2]);
    let y = ct::vmap(f, &[Some(0), None], &[Some(0)])(&[xs.clone(), w.clone()]).unwrap();
    let want: Vec<f64> = (0..6).map(|i| 3.0 * [0.5f64, -0.5][i % 2].exp() + (i + 1) as f64).collect();
    assert_close(&vals(&y[0]), &want, 1e-15, "vmap through depends");
}

/// Whether a custom function's forward is kept or rebuilt lazily depends only on the nodes its
/// own call builds, not on nodes other threads create meanwhile: with another thread building
/// graphs flat out, a small rule still runs exactly once per vjp.
#[test]
fn laziness_does_not_depend_on_other_threads() {
    use std::sync::atomic::AtomicBool;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let f = ct::custom_function(|x: &[Array]| vec![x[0].sin()])
        .vjp(move |p, ct_, _o| {
            c.fetch_add(1, Ordering::SeqCst);
            // slow enough that the other thread creates thousands of nodes meanwhile
            std::thread::sleep(std::time::Duration::from_millis(2));
            vec![&ct_[0] * p[0].cos()]
        })
        .build();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let x = Array::from_slice(&[1.0f32], &[1]);
            while !stop.load(Ordering::Relaxed) {
                let mut y = x.clone();
                for _ in 0..1000 {
                    y = y.exp();
                }
                drop(y);
            }
        })
    };
    let x = Array::from_slice(&[0.3f64, -0.7], &[2]);
    for _ in 0..20 {
        let (_, g) = ct::vjp(f.clone(), &[x.clone()], &[Array::from_slice(&[1.0f64, 1.0], &[2])]).unwrap();
        let got = g[0].to_vec::<f64>().unwrap();
        assert!((got[0] - 0.3f64.cos()).abs() < 1e-12 && (got[1] - 0.7f64.cos()).abs() < 1e-12);
    }
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 20, "the vjp rule ran more than once per vjp");
}

/// A built custom function, boxed.
type BoxedFn = Box<dyn Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync>;

/// `message` is `the {rule} of custom function `{name}` (built at {this file}:{line}:COLUMN) {rest}`.
fn assert_rule_sentence(message: &str, rule: &str, name: &str, line: u32, rest: &str) {
    let head = format!("the {rule} of custom function `{name}` (built at {}:{line}:", file!());
    assert!(message.starts_with(&head), "expected a message starting {head:?}: {message}");
    let after = &message[head.len()..];
    let column_end = after.find(')').expect("the location closes");
    assert!(after[..column_end].parse::<u32>().is_ok(), "a column number: {message}");
    assert_eq!(&after[column_end + 2..], rest, "{message}");
}

#[test]
fn rule_errors_are_sentences_that_name_the_line_that_built_the_function() {
    let x = Array::from_slice(&[1.0f64, 2.0], &[2]);
    let y = Array::from_slice(&[3.0f64, 4.0], &[2]);
    let grad_of = |f: BoxedFn| {
        let g = ct::grad(move |a: &[Array]| Ok::<_, ct::Error>(f(a)?[0].sum_all()));
        g(&[x.clone(), y.clone()]).unwrap_err().to_string()
    };
    let mul = |a: &[Array]| &a[0] * &a[1];

    let line = line!() + 1;
    let f = ct::custom_function(mul).vjp(|_p, c, _o| vec![c[0].clone()]).name("mul").build();
    assert_rule_sentence(
        &grad_of(Box::new(f)),
        "vjp rule",
        "mul",
        line,
        "returned 1 array, but the function has 2 inputs (one cotangent per input is expected)",
    );
    let line = line!() + 1;
    let f = ct::custom_function(mul).vjp_no_outputs(|_p, _c| Vec::<Array>::new()).name("none").build();
    assert_rule_sentence(
        &grad_of(Box::new(f)),
        "vjp rule",
        "none",
        line,
        "returned 0 arrays, but the function has 2 inputs (one cotangent per input is expected)",
    );
    let line = line!() + 1;
    let f = ct::custom_function(mul).vjp(|_p, c, _o| vec![c[0].clone(), c[0].sum_all()]).name("shape").build();
    assert_rule_sentence(
        &grad_of(Box::new(f)),
        "vjp rule",
        "shape",
        line,
        "returned a cotangent of shape [] and dtype float64 for input 1, which has shape [2] and dtype float64",
    );

    // jvp: one output
    let line = line!() + 1;
    let f = ct::custom_function(|a: &[Array]| a[0].exp()).jvp(|_p, t| vec![t[0].clone(), t[0].clone()]).build();
    let e = ct::jvp(f, std::slice::from_ref(&x), &[ct::ones_like(&x)]).unwrap_err().to_string();
    assert_rule_sentence(
        &e,
        "jvp rule",
        "custom_function",
        line,
        "returned 2 arrays, but the function has 1 output (one tangent per output is expected)",
    );
    let line = line!() + 1;
    let f = ct::custom_function(|a: &[Array]| a[0].exp()).jvp(|_p, t| vec![t[0].astype(DType::F32)]).name("j").build();
    let e = ct::jvp(f, std::slice::from_ref(&x), &[ct::ones_like(&x)]).unwrap_err().to_string();
    assert_rule_sentence(
        &e,
        "jvp rule",
        "j",
        line,
        "returned a tangent of shape [2] and dtype float32 for output 0, which has shape [2] and dtype float64",
    );

    // vmap: counts with their plurals
    let line = line!() + 1;
    let f = ct::custom_function(|a: &[Array]| a[0].exp())
        .vmap(|a, ax| Ok((vec![a[0].exp(), a[0].exp()], vec![ax[0]])))
        .name("v")
        .build();
    let e = ct::vmap(f, &[Some(0)], &[Some(0)])(&[ct::ones(&[3, 2], DType::F64)]).unwrap_err().to_string();
    assert_rule_sentence(
        &e,
        "vmap rule",
        "v",
        line,
        "returned 2 outputs and 1 batch axis, but the function has 1 output (one array and one batch axis per output \
         are expected)",
    );

    // the forward
    let line = line!() + 1;
    let f = ct::custom_function(|_a: &[Array]| Vec::<Array>::new()).name("empty").build();
    assert_rule_sentence(
        &f(&[x.clone()]).unwrap_err().to_string(),
        "forward",
        "empty",
        line,
        "returned no outputs, but a custom function needs at least one",
    );

    // the error keeps its parts apart
    let line = line!() + 1;
    let f = ct::custom_function(mul).vjp(|_p, c, _o| vec![c[0].clone()]).name("parts").build();
    let g = ct::grad(move |a: &[Array]| Ok::<_, ct::Error>(f(a)?[0].sum_all()));
    match g(&[x.clone(), y.clone()]).unwrap_err() {
        ct::Error::CustomRule { name, location, rule, .. } => {
            assert_eq!((name.as_str(), rule), ("parts", "vjp"));
            assert!(location.starts_with(&format!("{}:{line}:", file!())), "{location}");
        }
        e => panic!("expected a custom-rule error, got {e}"),
    }
}
