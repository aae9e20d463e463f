//! `rope` and `scaled_dot_product_attention` against f64 loops written here (partial and
//! interleaved rotations, offsets and scales; causal, boolean and additive masks, GQA),
//! gradients by finite differences, vmap against a loop.
mod common;
use common::{assert_close, check_grads, vals, Lcg};
use cotangent::{self as ct, Array, AttentionMask, DType};

/// The reference rotary embedding of a row-major `[rows, t, d]` array.
#[allow(clippy::too_many_arguments)]
fn rope_ref(
    x: &[f64],
    rows: usize,
    t: usize,
    d: usize,
    dims: usize,
    traditional: bool,
    base: f64,
    scale: f64,
    offset: usize,
) -> Vec<f64> {
    let mut y = x.to_vec();
    let half = dims / 2;
    for r in 0..rows {
        for p in 0..t {
            let at = |f: usize| (r * t + p) * d + f;
            for i in 0..half {
                let angle = (offset + p) as f64 * scale * base.powf(-2.0 * i as f64 / dims as f64);
                let (c, s) = (angle.cos(), angle.sin());
                let (ia, ib) = if traditional { (at(2 * i), at(2 * i + 1)) } else { (at(i), at(i + half)) };
                y[ia] = x[ia] * c - x[ib] * s;
                y[ib] = x[ia] * s + x[ib] * c;
            }
        }
    }
    y
}

#[test]
fn rope_matches_the_loop_for_every_layout() {
    let mut rng = Lcg(1);
    let (b, h, t, d) = (2usize, 3usize, 5usize, 8usize);
    let x = rng.signed(&[b, h, t, d]);
    for traditional in [false, true] {
        for dims in [0usize, 2, 4, 8] {
            for (base, scale, offset) in [(10000.0, 1.0, 0usize), (500.0, 0.5, 7), (1e6, 2.0, 3)] {
                let y = ct::rope(&x, dims, traditional, base, scale, offset);
                assert_eq!(y.shape(), x.shape());
                let want = rope_ref(&vals(&x), b * h, t, d, dims, traditional, base, scale, offset);
                let what =
                    format!("rope dims {dims} traditional {traditional} base {base} scale {scale} offset {offset}");
                assert_close(&vals(&y), &want, 1e-12, &what);
            }
        }
    }
    // f32 and bf16 keep their dtype and are close to the f64 loop
    let want = rope_ref(&vals(&x), b * h, t, d, 6, false, 10000.0, 1.0, 100);
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
        let y = ct::rope(&x.astype(dtype), 6, false, 10000.0, 1.0, 100);
        assert_eq!(y.dtype(), dtype);
        assert_close(&vals(&y), &want, tol, &format!("rope {dtype}"));
    }
}

#[test]
fn rope_gradients_and_vmap() {
    let mut rng = Lcg(2);
    let x = rng.signed(&[2, 4, 6]);
    check_grads("rope half-split", |a: &[Array]| ct::rope(&a[0], 4, false, 100.0, 1.0, 2), std::slice::from_ref(&x));
    check_grads("rope interleaved", |a: &[Array]| ct::rope(&a[0], 6, true, 100.0, 0.5, 0), std::slice::from_ref(&x));
    let xs = rng.signed(&[3, 2, 4, 6]);
    let f = |a: &[Array]| ct::rope(&a[0], 4, true, 50.0, 1.0, 1);
    let batched = ct::vmap(f, &[Some(1)], &[Some(0)])(&[xs.clone()]).unwrap();
    for k in 0..2 {
        assert_close(&vals(&batched[0].index(k)), &vals(&f(&[xs.index_axis(1, k)])), 0.0, "vmap(rope)");
    }
}

/// What a reference attention needs to know about the mask.
enum RefMask<'a> {
    None,
    Causal,
    /// A `[b, hq, tq, tk]` boolean keep mask.
    Keep(&'a [bool]),
    /// A `[b, hq, tq, tk]` additive mask.
    Add(&'a [f64]),
}

/// The reference attention over row-major `q [b, hq, tq, d]`, `k [b, hkv, tk, d]`,
/// `v [b, hkv, tk, dv]`.
#[allow(clippy::too_many_arguments)]
fn sdpa_ref(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    [b, hq, tq, d]: [usize; 4],
    hkv: usize,
    tk: usize,
    dv: usize,
    scale: f64,
    mask: &RefMask,
) -> Vec<f64> {
    let rep = hq / hkv;
    let mut out = vec![0.0; b * hq * tq * dv];
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / rep;
            for i in 0..tq {
                let mut s = vec![0.0; tk];
                for (j, sj) in s.iter_mut().enumerate() {
                    let dot: f64 = (0..d)
                        .map(|e| q[((bi * hq + h) * tq + i) * d + e] * k[((bi * hkv + kh) * tk + j) * d + e])
                        .sum();
                    let m = ((bi * hq + h) * tq + i) * tk + j;
                    *sj = match mask {
                        RefMask::None => dot * scale,
                        RefMask::Causal if j > i + tk - tq => f64::MIN,
                        RefMask::Causal => dot * scale,
                        RefMask::Keep(keep) if !keep[m] => f64::MIN,
                        RefMask::Keep(_) => dot * scale,
                        RefMask::Add(add) => dot * scale + add[m],
                    };
                }
                let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..dv {
                    let o: f64 = (0..tk).map(|j| e[j] / z * v[((bi * hkv + kh) * tk + j) * dv + c]).sum();
                    out[((bi * hq + h) * tq + i) * dv + c] = o;
                }
            }
        }
    }
    out
}

#[test]
fn attention_matches_the_loop_with_every_mask_and_gqa() {
    let mut rng = Lcg(3);
    let (b, d, dv) = (2usize, 4usize, 3usize);
    for (hq, hkv) in [(2usize, 2usize), (4, 2), (6, 1)] {
        for (tq, tk) in [(5usize, 5usize), (3, 6), (1, 4)] {
            let q = rng.signed(&[b, hq, tq, d]);
            let k = rng.signed(&[b, hkv, tk, d]);
            let v = rng.signed(&[b, hkv, tk, dv]);
            let (qv, kv, vv) = (vals(&q), vals(&k), vals(&v));
            let scale = 1.0 / (d as f64).sqrt();
            let reference = |m: &RefMask| sdpa_ref(&qv, &kv, &vv, [b, hq, tq, d], hkv, tk, dv, scale, m);
            let what = format!("hq {hq} hkv {hkv} tq {tq} tk {tk}");
            let none = ct::scaled_dot_product_attention(&q, &k, &v, scale, AttentionMask::None);
            assert_eq!(none.shape(), &[b, hq, tq, dv]);
            assert_close(&vals(&none), &reference(&RefMask::None), 1e-12, &format!("no mask, {what}"));
            let causal = ct::scaled_dot_product_attention(&q, &k, &v, scale, AttentionMask::Causal);
            assert_close(&vals(&causal), &reference(&RefMask::Causal), 1e-12, &format!("causal, {what}"));
            // a boolean mask per (query head, query, key), with a fully masked row for query 0
            // of head 0 (the lowest-value fill makes it uniform, as the reference)
            let n = b * hq * tq * tk;
            let keep: Vec<bool> = (0..n).map(|m| m >= tk && rng.next() < 0.7).collect();
            let mask = Array::from_slice(&keep, &[b, hq, tq, tk]);
            let got = ct::scaled_dot_product_attention(&q, &k, &v, scale, &mask);
            assert_close(&vals(&got), &reference(&RefMask::Keep(&keep)), 1e-12, &format!("boolean mask, {what}"));
            // an additive mask broadcast over batch and heads: [tq, tk]
            let add2: Vec<f64> = rng.vec(tq * tk, -2.0, 2.0);
            let full: Vec<f64> = (0..n).map(|m| add2[m % (tq * tk)]).collect();
            let got = ct::scaled_dot_product_attention(&q, &k, &v, scale, Array::from_vec(add2, &[tq, tk]));
            assert_close(&vals(&got), &reference(&RefMask::Add(&full)), 1e-12, &format!("additive mask, {what}"));
        }
    }
}

#[test]
fn attention_in_f32_and_bf16_is_close_to_the_f64_loop() {
    let mut rng = Lcg(4);
    let q = rng.signed(&[1, 4, 6, 8]);
    let k = rng.signed(&[1, 2, 6, 8]);
    let v = rng.signed(&[1, 2, 6, 8]);
    let want = sdpa_ref(&vals(&q), &vals(&k), &vals(&v), [1, 4, 6, 8], 2, 6, 8, 0.35, &RefMask::Causal);
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 5e-3), (DType::BF16, 3e-2)] {
        let o = ct::scaled_dot_product_attention(
            &q.astype(dtype),
            &k.astype(dtype),
            &v.astype(dtype),
            0.35,
            AttentionMask::Causal,
        );
        assert_eq!(o.dtype(), dtype);
        assert_close(&vals(&o), &want, tol, &format!("attention {dtype}"));
    }
}

#[test]
fn attention_gradients_by_finite_differences() {
    let mut rng = Lcg(5);
    let q = rng.signed(&[1, 4, 3, 2]);
    let k = rng.signed(&[1, 2, 4, 2]);
    let v = rng.signed(&[1, 2, 4, 3]);
    check_grads(
        "causal gqa attention",
        |a: &[Array]| ct::scaled_dot_product_attention(&a[0], &a[1], &a[2], 0.7, AttentionMask::Causal),
        &[q.clone(), k.clone(), v.clone()],
    );
    let add = rng.signed(&[1, 4, 3, 4]);
    check_grads(
        "additive-mask gqa attention",
        move |a: &[Array]| ct::scaled_dot_product_attention(&a[0], &a[1], &a[2], 0.7, &add),
        &[q.clone(), k.clone(), v.clone()],
    );
    let keep =
        Array::from_slice(&[true, false, true, true, false, true, true, false, true, true, true, false], &[3, 4]);
    check_grads(
        "boolean-mask attention",
        move |a: &[Array]| ct::scaled_dot_product_attention(&a[0], &a[1], &a[2], 0.7, &keep),
        &[q, k, v],
    );
}

#[test]
fn vmap_of_attention_equals_a_loop() {
    let mut rng = Lcg(6);
    let q = rng.signed(&[3, 1, 4, 3, 2]);
    let k = rng.signed(&[1, 2, 5, 2]);
    let v = rng.signed(&[3, 1, 2, 5, 2]);
    let f = |a: &[Array]| ct::scaled_dot_product_attention(&a[0], &a[1], &a[2], 0.5, AttentionMask::Causal);
    let batched = ct::vmap(f, &[Some(0), None, Some(0)], &[Some(0)])(&[q.clone(), k.clone(), v.clone()]).unwrap();
    for i in 0..3 {
        assert_close(&vals(&batched[0].index(i)), &vals(&f(&[q.index(i), k.clone(), v.index(i)])), 1e-12, "vmap");
    }
}

#[test]
#[should_panic(expected = "cotangent::scaled_dot_product_attention: needs q [B, H_q, T_q, D]")]
fn attention_rejects_heads_that_do_not_group() {
    let q = ct::zeros(&[1, 3, 2, 4], DType::F32);
    let kv = ct::zeros(&[1, 2, 2, 4], DType::F32);
    let _ = ct::scaled_dot_product_attention(&q, &kv, &kv, 1.0, AttentionMask::None);
}

#[test]
#[should_panic(expected = "the mask of shape [3, 2] (bool) does not broadcast to [B, H_q, T_q, T_k] = [1, 2, 2, 2]")]
fn attention_rejects_a_mask_that_does_not_broadcast() {
    let q = ct::zeros(&[1, 2, 2, 4], DType::F32);
    let _ = ct::scaled_dot_product_attention(&q, &q, &q, 1.0, ct::zeros(&[3, 2], DType::Bool));
}

#[test]
#[should_panic(expected = "cotangent::rope: dims = 3 must be even")]
fn rope_rejects_odd_dims() {
    let _ = ct::rope(&ct::zeros(&[2, 4], DType::F32), 3, false, 10000.0, 1.0, 0);
}

#[test]
fn compiled_attention_with_rope_equals_the_eager_one() {
    let mut rng = Lcg(7);
    let (q, k, v) = (rng.signed(&[2, 4, 5, 8]), rng.signed(&[2, 2, 5, 8]), rng.signed(&[2, 2, 5, 8]));
    let f = |a: &[Array]| {
        let (q, k) = (ct::rope(&a[0], 8, false, 10000.0, 1.0, 3), ct::rope(&a[1], 8, false, 10000.0, 1.0, 3));
        ct::scaled_dot_product_attention(&q, &k, &a[2], 0.35, AttentionMask::Causal)
    };
    let args = [q, k, v];
    let compiled = ct::compile(f)(&args).unwrap();
    assert_close(&vals(&compiled[0]), &vals(&f(&args)), 1e-12, "compiled attention");
}
