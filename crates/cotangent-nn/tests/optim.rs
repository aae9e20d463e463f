//! Optimizers' first steps against closed-form values; clipping and schedules.
use cotangent::Array;
use cotangent_nn::optim::{clip_grad_norm, global_norm, schedules, Adam, AdamW, Optimizer, Sgd};
use cotangent_nn::Tree;

fn tree(p: &[f64]) -> Tree {
    Tree::dict([("a", Tree::leaf(Array::from_slice(&p[..2], &[2]))), ("b", Tree::leaf(Array::scalar(p[2])))])
}

fn values(t: &Tree) -> Vec<f64> {
    t.leaves().iter().flat_map(|a| a.to_f64_vec().unwrap()).collect()
}

fn close(got: &[f64], want: &[f64]) {
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-12 * (1.0 + w.abs()), "got {got:?}, want {want:?}");
    }
}

const P: [f64; 3] = [1.0, -2.0, 0.5];
const G1: [f64; 3] = [0.1, 0.2, -0.3];
const G2: [f64; 3] = [-0.4, 0.0, 0.6];

/// Run two steps with gradients G1 then G2 and return the parameters after each.
fn two_steps(opt: &mut dyn FnMut(&Tree, &Tree) -> Tree) -> (Vec<f64>, Vec<f64>) {
    let p1 = opt(&tree(&P), &tree(&G1));
    let p2 = opt(&p1, &tree(&G2));
    (values(&p1), values(&p2))
}

#[test]
fn sgd_plain_momentum_nesterov_weight_decay() {
    let (lr, mu, wd) = (0.1, 0.9, 0.01);
    // plain
    let mut o = Sgd::new(lr);
    let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
    let w1: Vec<f64> = (0..3).map(|i| P[i] - lr * G1[i]).collect();
    close(&a, &w1);
    close(&b, &(0..3).map(|i| w1[i] - lr * G2[i]).collect::<Vec<_>>());
    // momentum + weight decay (PyTorch: g += wd p; buf = g on step 1, then mu buf + g)
    for nesterov in [false, true] {
        let mut o = Sgd::new(lr).momentum(mu, nesterov).weight_decay(wd);
        let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
        let (mut w1, mut w2) = (vec![0.0; 3], vec![0.0; 3]);
        for i in 0..3 {
            let g = G1[i] + wd * P[i];
            let buf = g;
            w1[i] = P[i] - lr * if nesterov { g + mu * buf } else { buf };
            let g2 = G2[i] + wd * w1[i];
            let buf2 = mu * buf + g2;
            w2[i] = w1[i] - lr * if nesterov { g2 + mu * buf2 } else { buf2 };
        }
        close(&a, &w1);
        close(&b, &w2);
        assert_eq!(o.state().len(), 2);
    }
}

fn adam_reference(decoupled: bool, lr: f64, wd: f64) -> (Vec<f64>, Vec<f64>) {
    let (b1, b2, eps) = (0.9, 0.999, 1e-8);
    let mut p = P.to_vec();
    let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
    let mut out = vec![];
    for (t, g) in [G1, G2].iter().enumerate() {
        let t = t as i32 + 1;
        for i in 0..3 {
            let gi = if decoupled { g[i] } else { g[i] + wd * p[i] };
            m[i] = b1 * m[i] + (1.0 - b1) * gi;
            v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
            let mh = m[i] / (1.0 - b1.powi(t));
            let vh = v[i] / (1.0 - b2.powi(t));
            let d = mh / (vh.sqrt() + eps);
            p[i] -= lr * if decoupled { d + wd * p[i] } else { d };
        }
        out.push(p.clone());
    }
    (out[0].clone(), out[1].clone())
}

#[test]
fn adam_first_steps() {
    let mut o = Adam::new(0.01);
    let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
    let (w1, w2) = adam_reference(false, 0.01, 0.0);
    close(&a, &w1);
    close(&b, &w2);
    // the first Adam step moves every coordinate by ~lr (sign of the gradient)
    for i in 0..3 {
        assert!(((P[i] - a[i]).abs() - 0.01).abs() < 1e-6);
    }
    let mut o = Adam::new(0.01);
    o.weight_decay = 0.1;
    let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
    let (w1, w2) = adam_reference(false, 0.01, 0.1);
    close(&a, &w1);
    close(&b, &w2);
    assert_eq!(o.t, 2);
    assert_eq!(o.state().names(), ["m.a", "m.b", "v.a", "v.b"]);
}

#[test]
fn adamw_first_steps() {
    let mut o = AdamW::new(0.01, 0.1);
    let (a, b) = two_steps(&mut |p, g| o.step(p, g).unwrap());
    let (w1, w2) = adam_reference(true, 0.01, 0.1);
    close(&a, &w1);
    close(&b, &w2);
}

#[test]
fn clipping_by_global_norm() {
    let g = tree(&[3.0, 0.0, 4.0]);
    assert!((global_norm(&g).item::<f64>().unwrap() - 5.0).abs() < 1e-12);
    let (c, n) = clip_grad_norm(&g, 1.0);
    assert!((n.item::<f64>().unwrap() - 5.0).abs() < 1e-12);
    let s = 1.0 / (5.0 + 1e-6);
    close(&values(&c), &[3.0 * s, 0.0, 4.0 * s]);
    let (c, _) = clip_grad_norm(&g, 10.0);
    close(&values(&c), &[3.0, 0.0, 4.0]);
}

#[test]
fn schedules_values() {
    let w = schedules::linear_warmup(0.0, 1.0, 10);
    assert_eq!(w(0), 0.0);
    assert!((w(5) - 0.5).abs() < 1e-12);
    assert_eq!(w(10), 1.0);
    assert_eq!(w(100), 1.0);
    let c = schedules::cosine_decay(1.0, 100, 0.1);
    assert!((c(0) - 1.0).abs() < 1e-12);
    assert!((c(50) - 0.55).abs() < 1e-12);
    assert!((c(100) - 0.1).abs() < 1e-12);
    assert!((c(1000) - 0.1).abs() < 1e-12);
    let wc = schedules::warmup_cosine(2.0, 10, 110, 0.0);
    assert!((wc(5) - 1.0).abs() < 1e-12);
    assert!((wc(10) - 2.0).abs() < 1e-12);
    assert!((wc(60) - 1.0).abs() < 1e-12);
    assert!(wc(110).abs() < 1e-12);
}
