//! Each layer's forward pass against a reference computed with f64 loops.
use cotangent::{self as ct, Array, DType};
use cotangent_nn::gated_delta::{causal_conv1d, gated_delta_chunked, gated_delta_recurrent, gated_delta_segmented};
use cotangent_nn::*;

fn vals(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}");
    }
}

fn rand(seed: u64, shape: &[usize]) -> Array {
    ct::random::normal(&ct::random::key(seed), shape, DType::F64)
}

#[test]
fn linear_matches_loops() {
    let lin = Linear::new(&ct::random::key(1), 3, 4, true, DType::F64);
    let lin = {
        let mut l = lin;
        l.bias = Some(rand(9, &[4]));
        l
    };
    let x = rand(2, &[2, 5, 3]);
    let y = lin.forward(&x);
    assert_eq!(y.shape(), &[2, 5, 4]);
    let (w, b, xv) = (vals(&lin.weight), vals(lin.bias.as_ref().unwrap()), vals(&x));
    let mut want = vec![];
    for r in 0..10 {
        for o in 0..4 {
            want.push(b[o] + (0..3).map(|i| xv[r * 3 + i] * w[o * 3 + i]).sum::<f64>());
        }
    }
    assert_close(&vals(&y), &want, 1e-12, "linear");
    // init range U(-1/sqrt(3), 1/sqrt(3))
    assert!(w.iter().all(|v| v.abs() <= 1.0 / 3f64.sqrt()));
}

#[test]
fn embedding_gathers_rows() {
    let e = Embedding::new(&ct::random::key(3), 5, 2, DType::F64);
    let ids = Array::from_slice(&[4i32, 0, 4, 2], &[2, 2]);
    let y = e.forward(&ids);
    assert_eq!(y.shape(), &[2, 2, 2]);
    let w = vals(&e.weight);
    let want: Vec<f64> = [4, 0, 4, 2].iter().flat_map(|&r| [w[r * 2], w[r * 2 + 1]]).collect();
    assert_close(&vals(&y), &want, 0.0, "embedding");
}

#[test]
fn norms_match_loops() {
    let x = rand(4, &[3, 6]);
    let xv = vals(&x);
    let mut ln = LayerNorm::new(6, 1e-5, true, DType::F64);
    ln.weight = Some(rand(5, &[6]));
    ln.bias = Some(rand(6, &[6]));
    let mut rms = RMSNorm::new(6, 1e-5, DType::F64);
    rms.weight = rand(7, &[6]);
    let (w, b, rw) = (vals(ln.weight.as_ref().unwrap()), vals(ln.bias.as_ref().unwrap()), vals(&rms.weight));
    let (mut want_ln, mut want_rms) = (vec![], vec![]);
    for r in 0..3 {
        let row = &xv[r * 6..r * 6 + 6];
        let mean = row.iter().sum::<f64>() / 6.0;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 6.0;
        let ms = row.iter().map(|v| v * v).sum::<f64>() / 6.0;
        for i in 0..6 {
            want_ln.push((row[i] - mean) / (var + 1e-5).sqrt() * w[i] + b[i]);
            want_rms.push(row[i] / (ms + 1e-5).sqrt() * rw[i]);
        }
    }
    assert_close(&vals(&ln.forward(&x)), &want_ln, 1e-12, "layer norm");
    assert_close(&vals(&rms.forward(&x)), &want_rms, 1e-12, "rms norm");
    let plain = LayerNorm::new(6, 1e-5, false, DType::F64);
    assert!(plain.parameters().is_empty());
}

#[test]
fn dropout_zeroes_and_rescales() {
    let d = Dropout::new(0.25);
    let x = ct::ones(&[10000], DType::F32);
    assert_eq!(vals(&d.forward(&x, None)), vec![1.0; 10000]);
    let y = vals(&d.forward(&x, Some(&ct::random::key(0))));
    let kept = y.iter().filter(|&&v| v != 0.0).count();
    assert!(y.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
    assert!((kept as f64 / 10000.0 - 0.75).abs() < 0.03, "kept {kept}");
    // same key, same mask; another key, another mask
    assert_eq!(y, vals(&d.forward(&x, Some(&ct::random::key(0)))));
    assert_ne!(y, vals(&d.forward(&x, Some(&ct::random::key(1)))));
}

#[test]
fn activations_match_formulas() {
    let xs = [-3.0f64, -0.5, 0.0, 0.7, 2.0, 40.0];
    let x = Array::from_slice(&xs, &[6]);
    let erf = |v: f64| vals(&Array::scalar(v).erf())[0];
    let check = |got: Array, f: &dyn Fn(f64) -> f64, what: &str| {
        let want: Vec<f64> = xs.iter().map(|&v| f(v)).collect();
        assert_close(&vals(&got), &want, 1e-12, what);
    };
    check(activations::relu(&x), &|v| v.max(0.0), "relu");
    check(activations::silu(&x), &|v| v / (1.0 + (-v).exp()), "silu");
    check(activations::softplus(&x), &|v| if v > 30.0 { v } else { v.exp().ln_1p() }, "softplus");
    check(activations::gelu(&x), &|v| 0.5 * v * (1.0 + erf(v / 2f64.sqrt())), "gelu");
}

#[test]
fn mlp_is_two_linears() {
    let m = Mlp::new(&ct::random::key(8), 3, 5, Activation::Relu, DType::F64);
    let x = rand(9, &[4, 3]);
    let want = m.fc2.forward(&m.fc1.forward(&x).maximum(0.0));
    assert_close(&vals(&m.forward(&x)), &vals(&want), 1e-12, "mlp");
}

#[test]
fn attention_matches_loops() {
    let (b, t, d, h) = (2, 4, 6, 2);
    let att = MultiHeadAttention::new(&ct::random::key(10), d, h, DType::F64);
    let x = rand(11, &[b, t, d]);
    let y = att.forward(&x);
    let proj = |l: &Linear| vals(&l.forward(&x));
    let (q, k, v) = (proj(&att.q_proj), proj(&att.k_proj), proj(&att.v_proj));
    let dh = d / h;
    let mut mixed = vec![0.0; b * t * d];
    for bi in 0..b {
        for hi in 0..h {
            for i in 0..t {
                let at = |m: &Vec<f64>, s: usize, c: usize| m[(bi * t + s) * d + hi * dh + c];
                let scores: Vec<f64> = (0..=i)
                    .map(|j| (0..dh).map(|c| at(&q, i, c) * at(&k, j, c)).sum::<f64>() / (dh as f64).sqrt())
                    .collect();
                let mx = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|s| (s - mx).exp()).sum();
                for c in 0..dh {
                    mixed[(bi * t + i) * d + hi * dh + c] =
                        (0..=i).map(|j| (scores[j] - mx).exp() / z * at(&v, j, c)).sum();
                }
            }
        }
    }
    let want = att.o_proj.forward(&Array::from_vec(mixed, &[b, t, d]));
    assert_close(&vals(&y), &vals(&want), 1e-10, "attention");
}

/// The gated delta rule in f64 loops, `[B, H, T, d]` layout.
fn delta_reference(q: &Array, k: &Array, v: &Array, log_g: &Array, beta: &Array) -> Vec<f64> {
    let (b, h, t, dk) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let dv = v.shape()[3];
    let (q, k, v, lg, be) = (vals(q), vals(k), vals(v), vals(log_g), vals(beta));
    let mut y = vec![0.0; b * h * t * dv];
    for bh in 0..b * h {
        let mut s = vec![0.0; dk * dv];
        for i in 0..t {
            let g = lg[bh * t + i].exp();
            let kt = &k[(bh * t + i) * dk..][..dk];
            let qt = &q[(bh * t + i) * dk..][..dk];
            let vt = &v[(bh * t + i) * dv..][..dv];
            s.iter_mut().for_each(|x| *x *= g);
            for c in 0..dv {
                let kv: f64 = (0..dk).map(|r| kt[r] * s[r * dv + c]).sum();
                let delta = (vt[c] - kv) * be[bh * t + i];
                for r in 0..dk {
                    s[r * dv + c] += kt[r] * delta;
                }
            }
            for c in 0..dv {
                y[(bh * t + i) * dv + c] = (0..dk).map(|r| qt[r] * s[r * dv + c]).sum();
            }
        }
    }
    y
}

fn delta_inputs(seed: u64, b: usize, h: usize, t: usize, dk: usize, dv: usize) -> [Array; 5] {
    let q = activations::l2_normalize(&rand(seed, &[b, h, t, dk]), 1e-6);
    let k = activations::l2_normalize(&rand(seed + 1, &[b, h, t, dk]), 1e-6);
    let v = rand(seed + 2, &[b, h, t, dv]);
    let log_g = -activations::softplus(&rand(seed + 3, &[b, h, t]));
    let beta = rand(seed + 4, &[b, h, t]).sigmoid();
    [q, k, v, log_g, beta]
}

#[test]
fn gated_delta_recurrent_and_chunked_match_loops() {
    let [q, k, v, lg, be] = delta_inputs(20, 2, 3, 37, 5, 4);
    let want = delta_reference(&q, &k, &v, &lg, &be);
    let rec = gated_delta_recurrent(&q, &k, &v, &lg, &be);
    assert_eq!(rec.shape(), &[2, 3, 37, 4]);
    assert_close(&vals(&rec), &want, 1e-10, "recurrent");
    for chunk in [1, 4, 8, 16, 37, 64] {
        let ch = gated_delta_chunked(&q, &k, &v, &lg, &be, chunk).unwrap();
        assert_close(&vals(&ch), &want, 1e-9, &format!("chunked({chunk})"));
    }
    // several segments per call (two chunks of 4 per segment), values and gradients
    for (chunk, seg) in [(4, 8), (3, 3), (5, 100)] {
        let ch = gated_delta_segmented(&q, &k, &v, &lg, &be, chunk, seg).unwrap();
        assert_close(&vals(&ch), &want, 1e-9, &format!("segmented({chunk}, {seg})"));
    }
    let w = rand(29, &[2, 3, 37, 4]);
    let loss = |f: fn(&[Array], &Array) -> Array, w: Array| move |x: &[Array]| (f(x, &w) * &w).sum_all();
    let seg: fn(&[Array], &Array) -> Array =
        |x, _| gated_delta_segmented(&x[0], &x[1], &x[2], &x[3], &x[4], 4, 8).unwrap();
    let rec: fn(&[Array], &Array) -> Array = |x, _| gated_delta_recurrent(&x[0], &x[1], &x[2], &x[3], &x[4]);
    let inputs = [q.clone(), k.clone(), v.clone(), lg.clone(), be.clone()];
    let g_seg = ct::grad(loss(seg, w.clone()))(&inputs).unwrap();
    let g_rec = ct::grad(loss(rec, w))(&inputs).unwrap();
    for (i, (a, b)) in g_seg.iter().zip(&g_rec).enumerate() {
        assert_close(&vals(a), &vals(b), 1e-9, &format!("segmented gradient {i}"));
    }
    // f32: the chunked form stays accurate
    let f = |a: &Array| a.astype(DType::F32);
    let ch = gated_delta_chunked(&f(&q), &f(&k), &f(&v), &f(&lg), &f(&be), 16).unwrap();
    assert_close(&vals(&ch), &want, 1e-4, "chunked f32");
}

/// Strongly correlated keys, writes of strength near 1 and almost no decay make the chunk's
/// triangular system `(I + A) δ = r` nearly all ones below the diagonal: its inverse stays
/// bounded, but powers of `A` grow like `C^p / p!`, so a solve through them loses every digit in
/// f32 for long chunks. The chunked form must match the f64 loops there too.
#[test]
fn gated_delta_chunked_is_accurate_for_correlated_keys() {
    let (b, h, t, dk, dv) = (1, 2, 64, 8, 4);
    let base = rand(40, &[b, h, 1, dk]);
    let k = activations::l2_normalize(&(base + rand(41, &[b, h, t, dk]) * 0.02), 1e-6);
    let q = activations::l2_normalize(&rand(42, &[b, h, t, dk]), 1e-6);
    let v = rand(43, &[b, h, t, dv]);
    let log_g = -activations::softplus(&(rand(44, &[b, h, t]) - 7.0));
    let beta = (rand(45, &[b, h, t]) * 0.1 + 4.0).sigmoid();
    let want = delta_reference(&q, &k, &v, &log_g, &beta);
    let f = |a: &Array| a.astype(DType::F32);
    for chunk in [64, 16] {
        let ch = gated_delta_chunked(&q, &k, &v, &log_g, &beta, chunk).unwrap();
        assert_close(&vals(&ch), &want, 1e-9, &format!("correlated keys, chunked({chunk}) f64"));
        let ch = gated_delta_chunked(&f(&q), &f(&k), &f(&v), &f(&log_g), &f(&beta), chunk).unwrap();
        assert_close(&vals(&ch), &want, 2e-5, &format!("correlated keys, chunked({chunk}) f32"));
    }
}

#[test]
fn unit_lower_inverse_inverts() {
    for c in [1, 2, 3, 8, 37] {
        let a = rand(50 + c as u64, &[2, c, c]) * ct::tri(c, c, -1, DType::F64);
        let inv = cotangent_nn::gated_delta::unit_lower_inverse(&a);
        let eye = ct::eye(c, c, 0, DType::F64);
        let product = inv.matmul(&(&eye + &a));
        assert_eq!(product.shape(), &[2, c, c]);
        assert_close(&vals(&product), &vals(&eye.broadcast_to(&[2, c, c])), 1e-10, &format!("inverse ({c})"));
    }
}

#[test]
fn causal_conv_matches_loops() {
    let x = rand(30, &[2, 7, 3]);
    let w = rand(31, &[3, 4]);
    let y = causal_conv1d(&x, &w);
    let (xv, wv) = (vals(&x), vals(&w));
    let mut want = vec![0.0; 2 * 7 * 3];
    for b in 0..2 {
        for t in 0..7 {
            for c in 0..3 {
                want[(b * 7 + t) * 3 + c] =
                    (0..4).filter(|&m| t + m >= 3).map(|m| wv[c * 4 + m] * xv[(b * 7 + t + m - 3) * 3 + c]).sum();
            }
        }
    }
    assert_close(&vals(&y), &want, 1e-12, "causal conv");
}

#[test]
fn gated_delta_net_layer_matches_its_parts() {
    let mut cfg = GatedDeltaNetConfig::new(8, 2);
    cfg.mode = RecurrenceMode::Chunked(4);
    let layer = GatedDeltaNet::new(&ct::random::key(40), cfg, DType::F64);
    let x = rand(41, &[2, 9, 8]);
    let y = layer.forward(&x).unwrap();
    assert_eq!(y.shape(), &[2, 9, 8]);
    // rebuild by hand: projections, conv + silu, l2 norm, reference recurrence, norm, gate
    let [wq, wk, wv] = layer.conv.as_ref().unwrap();
    let heads = |a: Array, d: usize| a.reshape(&[2, 9, 2, d as isize]).transpose(&[0, 2, 1, 3]);
    let conv = |l: &Linear, w: &Array| activations::silu(&causal_conv1d(&l.forward(&x), w));
    let q = activations::l2_normalize(&heads(conv(&layer.q_proj, wq), 4), 1e-6) * 0.5;
    let k = activations::l2_normalize(&heads(conv(&layer.k_proj, wk), 4), 1e-6);
    let v = heads(conv(&layer.v_proj, wv), 4);
    let lg = -activations::softplus(&layer.a_proj.forward(&x)).transpose(&[0, 2, 1]);
    let be = layer.b_proj.forward(&x).sigmoid().transpose(&[0, 2, 1]);
    let core = Array::from_vec(delta_reference(&q, &k, &v, &lg, &be), &[2, 2, 9, 4]).transpose(&[0, 2, 1, 3]);
    let normed = &core * (core.square().mean(&[-1], true) + 1e-6).rsqrt() * &layer.norm_weight;
    let gated = normed.reshape(&[2, 9, 8]) * activations::silu(&layer.g_proj.forward(&x));
    let want = layer.o_proj.forward(&gated);
    assert_close(&vals(&y), &vals(&want), 1e-9, "gated deltanet layer");
    // the recurrent mode gives the same
    let mut rec = layer.clone();
    rec.config.mode = RecurrenceMode::Recurrent;
    assert_close(&vals(&rec.forward(&x).unwrap()), &vals(&want), 1e-9, "recurrent layer");
    // initial decays lie in [0.9, 0.999]
    let g = vals(&(-activations::softplus(layer.a_proj.bias.as_ref().unwrap())).exp());
    assert!(g.iter().all(|&g| (0.9 - 1e-9..=0.999 + 1e-9).contains(&g)), "{g:?}");
}

#[test]
fn initialisers_have_the_right_spread() {
    let k = ct::random::key(50);
    let n = [200, 300];
    let std = |a: &Array| {
        let v = vals(a);
        let m = v.iter().sum::<f64>() / v.len() as f64;
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
    };
    let close = |got: f64, want: f64, what: &str| assert!((got / want - 1.0).abs() < 0.03, "{what}: {got} vs {want}");
    close(std(&init::glorot_uniform(&k, &n, 1.0, DType::F64)), (2.0 / 500.0f64).sqrt(), "glorot uniform");
    close(std(&init::glorot_normal(&k, &n, 1.0, DType::F64)), (2.0 / 500.0f64).sqrt(), "glorot normal");
    close(std(&init::he_normal(&k, &n, DType::F64)), (2.0 / 300.0f64).sqrt(), "he normal");
    close(std(&init::he_uniform(&k, &n, DType::F64)), (2.0 / 300.0f64).sqrt(), "he uniform");
    close(std(&init::normal(&k, &n, 1.0, 0.5, DType::F64)), 0.5, "normal");
    let u = vals(&init::uniform(&k, &n, -2.0, 3.0, DType::F64));
    assert!(u.iter().all(|&x| (-2.0..3.0).contains(&x)));
    assert_eq!(init::fans(&[4, 3, 5]), (15, 20));
}
