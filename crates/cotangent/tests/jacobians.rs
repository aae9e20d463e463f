//! Jacobians and Hessians against closed forms: an MLP layer, softmax cross-entropy,
//! attention scores and layernorm written with ops.
mod common;

use common::{assert_close, vals};
use cotangent::{self as ct, Array};

fn data(n: usize, seed: f64) -> Vec<f64> {
    (0..n).map(|i| ((i as f64 + 1.0) * seed).sin()).collect()
}

#[test]
fn mlp_layer_jacobian() {
    // y = tanh(W x + b): dy/dx = diag(1 - y^2) W, dy/db = diag(1 - y^2)
    let (m, n) = (3, 4);
    let w = Array::from_vec(data(m * n, 0.7), &[m, n]);
    let x = Array::from_vec(data(n, 1.3), &[n]);
    let b = Array::from_vec(data(m, 2.1), &[m]);
    let f = |a: &[Array]| (a[0].matmul(&a[1]) + &a[2]).tanh();
    let y = vals(&f(&[w.clone(), x.clone(), b.clone()]));
    let wv = vals(&w);
    let args = [w.clone(), x.clone(), b.clone()];
    for j in [ct::jacobian(f)(&args).unwrap(), ct::jacfwd(f)(&args).unwrap()] {
        assert_eq!(j[1].shape(), &[m, n]);
        let want_x: Vec<f64> = (0..m * n).map(|k| (1.0 - y[k / n] * y[k / n]) * wv[k]).collect();
        assert_close(&vals(&j[1]), &want_x, 1e-10, "dy/dx");
        let want_b: Vec<f64> =
            (0..m * m).map(|k| if k / m == k % m { 1.0 - y[k / m] * y[k / m] } else { 0.0 }).collect();
        assert_close(&vals(&j[2]), &want_b, 1e-10, "dy/db");
        // dy_i/dW_jk = delta_ij (1 - y_i^2) x_k
        assert_eq!(j[0].shape(), &[m, m, n]);
        let xv = vals(&x);
        let want_w: Vec<f64> = (0..m * m * n)
            .map(|t| {
                let (i, jj, k) = (t / (m * n), (t / n) % m, t % n);
                if i == jj {
                    (1.0 - y[i] * y[i]) * xv[k]
                } else {
                    0.0
                }
            })
            .collect();
        assert_close(&vals(&j[0]), &want_w, 1e-10, "dy/dW");
    }
}

#[test]
fn softmax_cross_entropy_hessian() {
    // L = logsumexp(z) - z[t]: grad = p - onehot, Hessian = diag(p) - p p^T
    let z = Array::from_vec(data(5, 0.9), &[5]);
    let t = 2;
    let f = move |a: &[Array]| a[0].logsumexp(&[0], false) - a[0].slice_axis(0, Some(t), Some(t + 1), 1).sum_all();
    let zv = vals(&z);
    let mx = zv.iter().cloned().fold(f64::MIN, f64::max);
    let e: Vec<f64> = zv.iter().map(|x| (x - mx).exp()).collect();
    let s: f64 = e.iter().sum();
    let p: Vec<f64> = e.iter().map(|x| x / s).collect();
    let g = ct::grad(f)(&[z.clone()]).unwrap();
    let want_g: Vec<f64> = (0..5).map(|i| p[i] - if i == t as usize { 1.0 } else { 0.0 }).collect();
    assert_close(&vals(&g[0]), &want_g, 1e-10, "grad");
    let h = ct::hessian(f)(&[z.clone()]).unwrap();
    let want_h: Vec<f64> = (0..25).map(|k| if k / 5 == k % 5 { p[k / 5] } else { 0.0 } - p[k / 5] * p[k % 5]).collect();
    assert_close(&vals(&h), &want_h, 1e-10, "hessian");
}

#[test]
fn attention_scores_jacobian() {
    // s = q K^T / sqrt(d): ds/dq = K / sqrt(d), ds_i/dK_jk = delta_ij q_k / sqrt(d)
    let (l, d) = (3, 4);
    let q = Array::from_vec(data(d, 0.4), &[d]);
    let k = Array::from_vec(data(l * d, 1.7), &[l, d]);
    let f = move |a: &[Array]| a[1].matmul(&a[0]) * (1.0 / (d as f64).sqrt());
    let j = ct::jacobian(f)(&[q.clone(), k.clone()]).unwrap();
    let sc = 1.0 / (d as f64).sqrt();
    assert_close(&vals(&j[0]), &vals(&k).iter().map(|x| x * sc).collect::<Vec<_>>(), 1e-10, "ds/dq");
    let qv = vals(&q);
    let want: Vec<f64> = (0..l * l * d)
        .map(|t| {
            let (i, jj, kk) = (t / (l * d), (t / d) % l, t % d);
            if i == jj {
                qv[kk] * sc
            } else {
                0.0
            }
        })
        .collect();
    assert_close(&vals(&j[1]), &want, 1e-10, "ds/dK");
}

#[test]
fn layernorm_jacobian() {
    // y = (x - mean) / sqrt(var + eps): dy/dx = (I - 1/n - y y^T / n) / sigma
    let n = 6;
    let eps = 1e-5;
    let x = Array::from_vec(data(n, 1.1), &[n]);
    let f = move |a: &[Array]| {
        let c = &a[0] - a[0].mean(&[0], true);
        &c * (c.square().mean(&[0], true) + eps).rsqrt()
    };
    let xv = vals(&x);
    let mean = xv.iter().sum::<f64>() / n as f64;
    let var = xv.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / n as f64;
    let sigma = (var + eps).sqrt();
    let y: Vec<f64> = xv.iter().map(|t| (t - mean) / sigma).collect();
    let want: Vec<f64> = (0..n * n)
        .map(|k| {
            let (i, j) = (k / n, k % n);
            ((i == j) as u8 as f64 - 1.0 / n as f64 - y[i] * y[j] / n as f64) / sigma
        })
        .collect();
    assert_close(&vals(&ct::jacobian(f)(&[x.clone()]).unwrap()[0]), &want, 1e-10, "jacrev");
    assert_close(&vals(&ct::jacfwd(f)(&[x.clone()]).unwrap()[0]), &want, 1e-10, "jacfwd");
}
