//! Transformer building blocks with MLX's `mx.fast` semantics: rotary position embeddings
//! ([`rope`]) and [`scaled_dot_product_attention`] with causal or explicit masks and grouped
//! query attention.
//!
//! Both are compositions of existing ops (slices, element-wise math, matmul, softmax, select),
//! so their VJP, JVP, vmap and compile rules come from those ops, and on a CUDA device they run
//! as the CUDA kernels of those ops (matmuls through cuBLAS).
use crate::{Array, DType};

/// Rotary position embedding of `x` (`[.., T, D]`, positions along the second-to-last axis),
/// as MLX's `mx.fast.rope`: the first `dims` features of position `t` are rotated by the
/// angles `(offset + t) · scale · base^(-2i / dims)`, `i < dims / 2`; features past `dims`
/// pass through. With `traditional` the rotated pairs are adjacent features `(2i, 2i + 1)`
/// (the original RoFormer layout); without it they are `(i, i + dims / 2)` (the half-split
/// layout of Llama and Qwen checkpoints). Angles are computed in `f64`; the rotation runs in
/// `f32` for `f16`/`bf16` inputs (and in the input's dtype otherwise), the result has `x`'s
/// dtype. Linear in `x`, so differentiable and batchable like its parts.
///
/// ```
/// use cotangent::{self as ct, Array};
/// // one position at offset 1, one pair, base 1: the angle is 1 radian
/// let x = Array::from_slice(&[1.0f64, 0.0], &[1, 2]);
/// let y = ct::rope(&x, 2, false, 1.0, 1.0, 1).to_vec::<f64>()?;
/// assert!((y[0] - 1f64.cos()).abs() < 1e-12 && (y[1] - 1f64.sin()).abs() < 1e-12);
/// // partial rotation: features past `dims` pass through
/// let x = ct::ones(&[2, 3, 8], ct::DType::F32);
/// let y = ct::rope(&x, 4, true, 10000.0, 1.0, 0);
/// assert_eq!(y.slice_axis(-1, Some(4), None, 1).to_vec::<f32>()?, vec![1.0; 24]);
/// # Ok::<(), ct::Error>(())
/// ```
///
/// # Panics
/// If `x` has fewer than 2 axes or is not float, or `dims` is odd or exceeds the last extent
/// (reported at the caller's line).
#[track_caller]
pub fn rope(x: &Array, dims: usize, traditional: bool, base: f64, scale: f64, offset: usize) -> Array {
    let _op = crate::array::OpScope::enter("rope");
    assert!(
        x.ndim() >= 2 && x.dtype().is_float(),
        "cotangent::rope: needs a float array of shape [.., T, D], got shape {:?} ({})",
        x.shape(),
        x.dtype()
    );
    let (t, d) = (x.shape()[x.ndim() - 2], x.shape()[x.ndim() - 1]);
    assert!(
        dims.is_multiple_of(2) && dims <= d,
        "cotangent::rope: dims = {dims} must be even and at most the feature extent {d} of shape {:?} ({})",
        x.shape(),
        x.dtype()
    );
    if dims == 0 {
        return x.clone();
    }
    let half = dims / 2;
    let compute = if x.dtype() == DType::F64 { DType::F64 } else { DType::F32 };
    // angles [T, half] in f64, from constants on the input's device
    let pos = crate::ops::arange(offset as f64, (offset + t) as f64, 1.0, DType::F64).to_device(x.device());
    let freq_exponent = crate::ops::arange(0.0, half as f64, 1.0, DType::F64).to_device(x.device());
    let inv_freq = (freq_exponent * (-base.ln() / half as f64)).exp();
    let theta = (pos * scale).reshape_exact(&[t, 1]) * inv_freq.reshape_exact(&[1, half]);
    let (cos, sin) = (theta.cos().astype(compute), theta.sin().astype(compute));
    let xc = x.astype(compute);
    let rotated = if traditional {
        // pairs (2i, 2i + 1): split the first `dims` features into [.., half, 2]
        let mut pairs_shape = x.shape()[..x.ndim() - 1].to_vec();
        pairs_shape.extend([half, 2]);
        let pairs = xc.slice_axis(-1, Some(0), Some(dims as isize), 1).reshape_exact(&pairs_shape);
        let (a, b) = (pairs.index_axis(-1, 0), pairs.index_axis(-1, 1));
        let (ra, rb) = (&a * &cos - &b * &sin, &a * &sin + &b * &cos);
        let mut flat_shape = x.shape()[..x.ndim() - 1].to_vec();
        flat_shape.push(dims);
        crate::ops::stack(&[ra, rb], -1).reshape_exact(&flat_shape)
    } else {
        let a = xc.slice_axis(-1, Some(0), Some(half as isize), 1);
        let b = xc.slice_axis(-1, Some(half as isize), Some(dims as isize), 1);
        crate::ops::concatenate(&[&a * &cos - &b * &sin, &a * &sin + &b * &cos], -1)
    };
    let rotated = rotated.astype(x.dtype());
    if dims == d {
        return rotated;
    }
    crate::ops::concatenate(&[rotated, x.slice_axis(-1, Some(dims as isize), None, 1)], -1)
}

/// The mask of a [`scaled_dot_product_attention`].
///
/// ```
/// use cotangent::{self as ct, Array, AttentionMask};
/// let keep = Array::from_slice(&[true, false], &[1, 2]);
/// let m: AttentionMask = (&keep).into();
/// assert!(matches!(m, AttentionMask::Array(_)));
/// assert!(matches!(AttentionMask::default(), AttentionMask::None));
/// ```
#[derive(Clone, Debug, Default)]
pub enum AttentionMask {
    /// Every query attends to every key.
    #[default]
    None,
    /// Query `i` attends to keys `j <= i + (T_k - T_q)` (the queries are the last `T_q`
    /// positions of the keys' sequence, as MLX's `mask="causal"`).
    Causal,
    /// An array broadcasting to `[B, H_q, T_q, T_k]`: boolean (`true` = attend) or float (added
    /// to the scores, `-inf` to block).
    Array(Array),
}

impl From<Array> for AttentionMask {
    fn from(a: Array) -> Self {
        AttentionMask::Array(a)
    }
}

impl From<&Array> for AttentionMask {
    fn from(a: &Array) -> Self {
        AttentionMask::Array(a.clone())
    }
}

/// `softmax(scale · q kᵀ + mask) v` over heads, as MLX's
/// `mx.fast.scaled_dot_product_attention`: `q` is `[B, H_q, T_q, D]`, `k` is
/// `[B, H_kv, T_k, D]`, `v` is `[B, H_kv, T_k, D_v]`, the result `[B, H_q, T_q, D_v]`. With
/// fewer key/value heads than query heads (grouped query attention, `H_q` a multiple of
/// `H_kv`), query head `h` uses key/value head `h / (H_q / H_kv)` without copying them. The
/// softmax runs in `f32` for `f16`/`bf16` inputs. Masked scores are set to the score dtype's
/// lowest finite value (as MLX), so a query that may attend to nothing averages all values
/// instead of producing NaN. Dropout-free; differentiable in `q`, `k` and `v`.
///
/// ```
/// use cotangent::{self as ct, Array, AttentionMask};
/// let q = ct::ones(&[1, 4, 3, 8], ct::DType::F32);
/// let k = ct::ones(&[1, 2, 3, 8], ct::DType::F32);
/// let v = ct::arange(0.0, 3.0, 1.0, ct::DType::F32).reshape(&[1, 1, 3, 1]).broadcast_to(&[1, 2, 3, 8]);
/// let o = ct::scaled_dot_product_attention(&q, &k, &v, 8f64.powf(-0.5), AttentionMask::Causal);
/// assert_eq!(o.shape(), &[1, 4, 3, 8]);
/// // equal scores: query i averages the values of keys 0..=i
/// assert_eq!(o.index(0).index(3).index_axis(-1, 0).to_vec::<f32>()?, vec![0.0, 0.5, 1.0]);
/// # Ok::<(), ct::Error>(())
/// ```
///
/// # Panics
/// If the shapes are not as above, the dtypes differ or are not float, or the mask does not
/// broadcast to `[B, H_q, T_q, T_k]` or is neither boolean nor float (reported at the
/// caller's line).
#[track_caller]
pub fn scaled_dot_product_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f64,
    mask: impl Into<AttentionMask>,
) -> Array {
    let _op = crate::array::OpScope::enter("scaled_dot_product_attention");
    let op = "scaled_dot_product_attention";
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let fits = q.ndim() == 4
        && k.ndim() == 4
        && v.ndim() == 4
        && ks[0] == qs[0]
        && vs[0] == qs[0]
        && ks[1] == vs[1]
        && ks[1] > 0
        && qs[1] % ks[1] == 0
        && ks[2] == vs[2]
        && ks[3] == qs[3];
    assert!(
        fits,
        "cotangent::{op}: needs q [B, H_q, T_q, D], k [B, H_kv, T_k, D] and v [B, H_kv, T_k, D_v] with H_q a multiple \
         of H_kv, got shapes {qs:?}, {ks:?} and {vs:?}"
    );
    assert!(
        q.dtype().is_float() && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
        "cotangent::{op}: q, k and v must be floats of one dtype, got {}, {} and {} (shapes {qs:?}, {ks:?}, {vs:?})",
        q.dtype(),
        k.dtype(),
        v.dtype()
    );
    let (b, hq, tq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, tk, dv) = (ks[1], ks[2], vs[3]);
    let rep = hq / hkv;
    // heads grouped as [B, H_kv, rep, T, D]: the keys and values broadcast over `rep`
    let q5 = (q * scale).reshape_exact(&[b, hkv, rep, tq, d]);
    let (k5, v5) = (k.expand_dims(&[2]), v.expand_dims(&[2]));
    let compute = if q.dtype() == DType::F64 { DType::F64 } else { DType::F32 };
    let lowest = if compute == DType::F64 { f64::MIN } else { f32::MIN as f64 };
    let mut scores = q5.matmul(&k5.swapaxes(-1, -2)).astype(compute);
    match mask.into() {
        AttentionMask::None => {}
        AttentionMask::Causal => {
            let rows =
                crate::ops::arange(0.0, tq as f64, 1.0, DType::I64).to_device(q.device()).reshape_exact(&[tq, 1]);
            let cols =
                crate::ops::arange(0.0, tk as f64, 1.0, DType::I64).to_device(q.device()).reshape_exact(&[1, tk]);
            let keep = cols.less_equal(rows + (tk as i64 - tq as i64));
            scores = crate::ops::select(&keep, &scores, lowest);
        }
        AttentionMask::Array(m) => {
            let ms = m.shape();
            let want = [b, hq, tq, tk];
            let lead = 4usize.saturating_sub(m.ndim());
            let broadcasts = m.ndim() <= 4 && ms.iter().enumerate().all(|(i, &e)| e == 1 || e == want[lead + i]);
            assert!(
                broadcasts,
                "cotangent::{op}: the mask of shape {ms:?} ({}) does not broadcast to [B, H_q, T_q, T_k] = {want:?}",
                m.dtype()
            );
            assert!(
                m.dtype() == DType::Bool || m.dtype().is_float(),
                "cotangent::{op}: the mask must be boolean (true = attend) or float (added to the scores), got {} \
                 (shape {ms:?})",
                m.dtype()
            );
            let mut m4 = vec![1; lead];
            m4.extend_from_slice(ms);
            let m = m.reshape_exact(&m4);
            // split the mask's head axis as the queries' heads were
            let m5 = if m4[1] == 1 { m.expand_dims(&[2]) } else { m.reshape_exact(&[m4[0], hkv, rep, m4[2], m4[3]]) };
            scores = if m5.dtype() == DType::Bool {
                crate::ops::select(&m5, &scores, lowest)
            } else {
                scores + m5.astype(compute)
            };
        }
    }
    let weights = scores.softmax(&[-1]).astype(q.dtype());
    weights.matmul(&v5).reshape_exact(&[b, hq, tq, dv])
}
