//! Eager fusion: an element-wise op built from operands it alone holds folds them into one fused
//! node (on CUDA by default; here switched on for the CPU with the `test-hooks` override, which
//! exercises the same graph rewriting). Results must be bit-identical to separate ops, operands
//! someone else holds must stay separate, and transforms must see the ops they would see
//! without it.
//!
//! The checks run one after another in a single test: a recording logs the ops that reach the
//! backends from every thread.
use cotangent::backend::eager_fusion;
use cotangent::backend::recording::record;
use cotangent::{self as ct, Array};

fn random(shape: &[usize], seed: u64) -> Array {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    Array::from_vec(v, shape)
}

/// The variant names of the ops evaluating `x` runs (its inputs are evaluated first).
fn launches(x: &Array) -> Vec<String> {
    let (r, log) = record(|| ct::eval(std::slice::from_ref(x)));
    r.expect("eval");
    log.into_iter().map(|(_, name)| name).collect()
}

fn bits(x: &Array) -> Vec<u32> {
    x.to_vec::<f32>().expect("values").iter().map(|v| v.to_bits()).collect()
}

fn an_sgd_update_is_one_fused_op_with_the_same_bits() {
    let (p, g) = (random(&[64, 33], 1), random(&[64, 33], 2));
    ct::eval(&[p.clone(), g.clone()]).expect("eval");
    let plain = eager_fusion::with(false, || &p - &g * 0.01);
    let fused = eager_fusion::with(true, || &p - &g * 0.01);
    assert_eq!(launches(&plain), ["Binary", "Binary"]);
    assert_eq!(launches(&fused), ["Fused"]);
    assert_eq!(bits(&plain), bits(&fused));
    // against an independent reference: f32 arithmetic in the same order
    let (pv, gv) = (p.to_vec::<f32>().unwrap(), g.to_vec::<f32>().unwrap());
    let want: Vec<u32> = pv.iter().zip(&gv).map(|(p, g)| (p - g * 0.01f32).to_bits()).collect();
    assert_eq!(bits(&fused), want);
}

fn the_cpu_does_not_fuse_eagerly_by_default() {
    // on the CPU a small group costs more than the separate ops: eager fusion is for CUDA
    let (p, g) = (random(&[4, 3], 10), random(&[4, 3], 11));
    ct::eval(&[p.clone(), g.clone()]).expect("eval");
    // (with `COTANGENT_DEVICE=cuda` the arrays live on the GPU, where fusing is the default)
    let expected: &[&str] = if p.device() == ct::Device::Cpu { &["Binary", "Binary"] } else { &["Fused"] };
    assert_eq!(launches(&(&p - &g * 0.01)), expected);
}

fn a_chain_of_temporaries_with_broadcasts_and_casts_is_one_fused_op() {
    let (a, row, col) = (random(&[40, 7], 3), random(&[7], 4), random(&[40, 1], 5));
    let n = Array::from_vec((0..280).map(|i| i % 5 - 2).collect::<Vec<i32>>(), &[40, 7]);
    ct::eval(&[a.clone(), row.clone(), col.clone(), n.clone()]).expect("eval");
    let body = || ((&a * &row + 1.0) * &col - 0.5) / (&n + 3i32).astype(ct::DType::F32);
    let plain = eager_fusion::with(false, body);
    let fused = eager_fusion::with(true, body);
    let separate = launches(&plain);
    assert!(separate.len() >= 7 && !separate.contains(&"Fused".to_string()), "{separate:?}");
    // `astype` borrows its operand, which the statement still holds when the division is built,
    // so `n + 3` stays its own op; the cast of it and everything else is one group
    assert_eq!(launches(&fused), ["Binary", "Fused"]);
    assert_eq!(bits(&plain), bits(&fused));
    // an owned cast folds into the integer op that consumes it
    let rem = || (&a * 100.0).astype(ct::DType::I32) % 7i32;
    let (plain, fused) = (eager_fusion::with(false, rem), eager_fusion::with(true, rem));
    assert!(format!("{fused:?}").contains("fused["), "{fused:?}");
    assert_eq!(plain.to_vec::<i32>().unwrap(), fused.to_vec::<i32>().unwrap());
}

fn long_chains_split_into_bounded_groups_with_the_same_bits() {
    let a = random(&[300], 6);
    ct::eval(std::slice::from_ref(&a)).expect("eval");
    let body = || {
        let mut x = a.clone();
        for i in 0..60 {
            x = x * (1.0 + i as f64 * 1e-3) - 0.01;
        }
        x
    };
    let plain = eager_fusion::with(false, body);
    let fused = eager_fusion::with(true, body);
    assert_eq!(launches(&plain).len(), 120);
    let ops = launches(&fused);
    assert!(ops.len() <= 120 / 8, "{ops:?}");
    assert!(ops.iter().filter(|o| *o == "Fused").count() >= 120 / 16, "{ops:?}");
    assert_eq!(bits(&plain), bits(&fused));
}

fn operands_held_elsewhere_stay_separate() {
    let (a, b) = (random(&[5, 6], 7), random(&[5, 6], 8));
    ct::eval(&[a.clone(), b.clone()]).expect("eval");
    eager_fusion::with(true, || {
        let t = &a * &b;
        // `t.clone()` is a temporary, but `t` still holds the product: it must not be folded
        let u = t.clone() + 1.0;
        assert_eq!(launches(&u), ["Binary", "Binary"]);
        let v = t.clone() - 2.0;
        assert_eq!(launches(&v), ["Binary"], "the product is computed once");
        let (tv, uv, vv) = (t.to_vec::<f32>().unwrap(), u.to_vec::<f32>().unwrap(), v.to_vec::<f32>().unwrap());
        for ((t, u), v) in tv.iter().zip(&uv).zip(&vv) {
            assert_eq!((t + 1.0).to_bits(), u.to_bits());
            assert_eq!((t - 2.0).to_bits(), v.to_bits());
        }
        // an evaluated temporary is data, not work to fold
        let w = &a * &b;
        ct::eval(std::slice::from_ref(&w)).unwrap();
        assert_eq!(launches(&(w + 1.0)), ["Binary"]);
    });
}

fn gradients_and_compile_see_the_same_values() {
    let x = random(&[8, 9], 9);
    ct::eval(std::slice::from_ref(&x)).expect("eval");
    let f = |xs: &[Array]| ((&xs[0] * 2.0 + 1.0).sin() * (&xs[0] - 0.5) * 0.25).sum_all();
    let run = |on: bool| {
        eager_fusion::with(on, || {
            let g = ct::grad(f)(std::slice::from_ref(&x)).expect("grad").remove(0);
            let c = ct::compile(move |xs: &[Array]| vec![f(xs)])(std::slice::from_ref(&x)).expect("compiled").remove(0);
            // a gradient built from eagerly fused values: the chain rule through a fused node
            let y = (&x * 3.0 - 1.0) * &x;
            let gy =
                ct::vjp(|xs: &[Array]| vec![(&xs[0] * 3.0 - 1.0) * &xs[0]], std::slice::from_ref(&x), &[y.clone()])
                    .expect("vjp")
                    .1
                    .remove(0);
            (bits(&g), bits(&c), bits(&y), bits(&gy))
        })
    };
    assert_eq!(run(false), run(true));
}

fn a_backward_pass_fuses_its_own_temporaries() {
    // d/dx sum(sin(x) * x) = x * cos(x) + sin(x): two contributions, summed by the backward
    // pass, whose products are temporaries only that sum holds
    let x = random(&[6, 7], 12);
    ct::eval(std::slice::from_ref(&x)).expect("eval");
    let f = |xs: &[Array]| (xs[0].sin() * &xs[0]).sum_all();
    let grad_of = |on: bool| eager_fusion::with(on, || ct::grad(f)(std::slice::from_ref(&x)).expect("grad").remove(0));
    let (plain, fused) = (grad_of(false), grad_of(true));
    let (plain_ops, fused_ops) = (launches(&plain), launches(&fused));
    assert!(!plain_ops.contains(&"Fused".to_string()), "{plain_ops:?}");
    assert!(fused_ops.contains(&"Fused".to_string()) && fused_ops.len() < plain_ops.len(), "{fused_ops:?}");
    assert_eq!(bits(&plain), bits(&fused));
    for (g, x) in fused.to_vec::<f32>().unwrap().iter().zip(x.to_vec::<f32>().unwrap()) {
        let x = x as f64;
        assert!((*g as f64 - (x * x.cos() + x.sin())).abs() < 1e-5, "{g} at {x}");
    }
    // a second derivative walks the first backward pass's nodes: they must stay separate ops
    // while the outer trace may walk them, and the values must not change
    let second = |on: bool| {
        eager_fusion::with(on, || {
            let g = move |xs: &[Array]| ct::grad(f)(xs).expect("inner grad").remove(0).sum_all();
            ct::grad(g)(std::slice::from_ref(&x)).expect("second derivative").remove(0)
        })
    };
    let (plain2, fused2) = (second(false), second(true));
    assert_eq!(bits(&plain2), bits(&fused2));
    for (h, x) in fused2.to_vec::<f32>().unwrap().iter().zip(x.to_vec::<f32>().unwrap()) {
        let x = x as f64;
        // d/dx (x cos x + sin x) = 2 cos x - x sin x
        assert!((*h as f64 - (2.0 * x.cos() - x * x.sin())).abs() < 1e-5, "{h} at {x}");
    }
}

fn element_wise_errors_keep_the_callers_location() {
    eager_fusion::with(true, || {
        let a = Array::from_vec(vec![1i32, 2, 3], &[3]);
        let b = Array::from_vec(vec![1i32, 0, 1], &[3]);
        // an integer power with a negative exponent fails at evaluation
        let e = (&a - 3i32).power(&b - 2i32) + 1i32;
        let err = ct::eval(std::slice::from_ref(&e)).expect_err("negative integer exponent");
        let msg = err.to_string();
        assert!(msg.contains("eager_fusion.rs"), "{msg}");
    });
}

/// One test calling the checks in turn: a recording logs the ops of every thread, so no other
/// test of this binary may evaluate while one runs.
#[test]
fn eager_fusion() {
    an_sgd_update_is_one_fused_op_with_the_same_bits();
    the_cpu_does_not_fuse_eagerly_by_default();
    a_chain_of_temporaries_with_broadcasts_and_casts_is_one_fused_op();
    long_chains_split_into_bounded_groups_with_the_same_bits();
    operands_held_elsewhere_stay_separate();
    gradients_and_compile_see_the_same_values();
    a_backward_pass_fuses_its_own_temporaries();
    element_wise_errors_keep_the_callers_location();
}
