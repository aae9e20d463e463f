//! The Gated DeltaNet layer and its recurrence.
//!
//! Per head, with a `d_k × d_v` state `S` (zero at the start), for every time step `t`:
//!
//! ```text
//! S   = S · g_t                      g_t = exp(-softplus(a_t))   (decay in (0, 1))
//! kv  = k_tᵀ S                       what the memory returns for k_t
//! δ   = (v_t - kv) · β_t             β_t = sigmoid(b_t)          (write strength)
//! S   = S + k_t ⊗ δ                  delta-rule write
//! y_t = q_tᵀ S
//! ```
//!
//! [`gated_delta_recurrent`] runs this step by step with ops; differentiating it stores the
//! state of every step. [`gated_delta_chunked`] splits time into chunks and runs them in
//! segments of [`SEGMENT_STEPS`] steps, each one **custom function** ([`segment_function`]) whose
//! forward computes every chunk's parallel (WY) form at once — batched matrix products over the
//! segment's chunks — and then carries the state across its chunks with four small products per
//! chunk, and whose VJP *recomputes* the segment from its inputs — ordered after the forward
//! outputs with [`ct::depends`] — instead of storing its intermediates. Only the
//! segment-boundary states are kept between the forward and backward pass. ([`chunk_function`]
//! is the same pattern one chunk per call: simpler, but several times the kernel launches.)
use crate::checks::{self, INPUT};
use crate::layers::Linear;
use crate::{activations, init, Module, Visitor};
use cotangent::{self as ct, Array, DType, Result};
use std::sync::{Arc, OnceLock};

/// How the recurrence is evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecurrenceMode {
    /// Step by step with ops; the backward pass keeps every step's state.
    Recurrent,
    /// Chunks of this many steps, each a custom function that recomputes itself in the
    /// backward pass.
    Chunked(usize),
}

type ChunkFn = Arc<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync>;

/// The forward computation of one chunk, in parallel (WY) form.
///
/// Inputs: `q, k: [.., C, d_k]`, `v: [.., C, d_v]`, `log_g, beta: [.., C]`, `s0: [.., d_k, d_v]`
/// (`..` = batch and head axes). Outputs: `y: [.., C, d_v]` and the final state.
///
/// With `γ_i = Σ_{j≤i} log g_j` and `D_ij = exp(γ_i − γ_j)` for `j ≤ i` (0 otherwise), the
/// writes `δ` of the chunk solve the unit lower-triangular system
/// `(I + A) δ = β ⊙ (v − e^γ ⊙ k S₀)` with `A_ij = β_i D_ij (k_i·k_j)` for `j < i`; then
/// `y = e^γ ⊙ q S₀ + (D ⊙ q kᵀ) δ` and `S = e^{γ_C} S₀ + kᵀ (e^{γ_C − γ} ⊙ δ)`.
/// `(I + A)⁻¹` comes from [`unit_lower_inverse`] (block inversion, `⌈log₂ C⌉` levels of
/// matrix products), which stays accurate when keys are strongly correlated.
pub fn chunk_forward(x: &[Array]) -> Vec<Array> {
    let (q, k, v, log_g, beta, s0) = (&x[0], &x[1], &x[2], &x[3], &x[4], &x[5]);
    let c = q.shape()[q.ndim() - 2];
    let dt = q.dtype();
    // γ = cumsum(log g) as a product with an upper-triangular matrix of ones
    let on = q.device(); // constants follow the inputs, whatever the default device
    let upper = ct::tri(c, c, 0, dt).t().to_device(on);
    let gamma = log_g.expand_dims(&[-2]).matmul(&upper).squeeze(&[-2]); // [.., C]
    let gamma_last = gamma.slice_axis(-1, Some(c as isize - 1), None, 1); // [.., 1]
    let lower = ct::tri(c, c, 0, DType::Bool).to_device(on);
    let diff = gamma.expand_dims(&[-1]) - gamma.expand_dims(&[-2]); // γ_i − γ_j
    let decay = ct::select(&lower, &diff, -1e30).exp(); // D, zero above the diagonal
    let strict = ct::tri(c, c, -1, dt).to_device(on);
    let kk = k.matmul(&k.swapaxes(-1, -2));
    let a = &kk * &decay * beta.expand_dims(&[-1]) * &strict;
    let g_col = gamma.exp().expand_dims(&[-1]); // [.., C, 1]
    let rhs = beta.expand_dims(&[-1]) * (v - &g_col * k.matmul(s0));
    let delta = unit_lower_inverse(&a).matmul(&rhs);
    let y = &g_col * q.matmul(s0) + (q.matmul(&k.swapaxes(-1, -2)) * &decay).matmul(&delta);
    let tail = (&gamma_last - &gamma).exp().expand_dims(&[-1]); // e^{γ_C − γ_i}
    let s = gamma_last.exp().expand_dims(&[-1]) * s0 + k.swapaxes(-1, -2).matmul(&(tail * &delta));
    vec![y, s]
}

/// `(I + A)⁻¹` for a strictly lower-triangular `A` (`[.., C, C]`), by block inversion.
///
/// With `T` the inverse of the block-diagonal part of `I + A` for blocks of `s` rows, the inverse
/// for blocks of `2s` rows is `T − T N T`, where `N` keeps only the entries of `A` in the
/// lower-left `s × s` quadrant of each diagonal `2s`-block (exact: `N T N = 0`). Starting from
/// `T = I` (blocks of one row), `⌈log₂ C⌉` levels reach the whole matrix; the last block of a level
/// may be shorter when `C` is not a power of two. Every `T` is the inverse of a diagonal block of
/// `I + A`, so the entries stay as bounded as those of the inverse itself. (The product formula
/// `(I − A)(I + A²)(I + A⁴)…` is exact too, but the powers of `A` grow like `C^p / p!` when all
/// entries are near one — strongly correlated keys, writes near full strength, little decay —
/// and a 64-step chunk lost every digit in f32.)
pub fn unit_lower_inverse(a: &Array) -> Array {
    let c = a.shape()[a.ndim() - 1];
    let dt = a.dtype();
    let quadrants = |s: usize| -> Array {
        let mask: Vec<f64> = (0..c * c)
            .map(|ij| {
                let (i, j) = (ij / c, ij % c);
                let same_block = i / (2 * s) == j / (2 * s);
                f64::from(u8::from(same_block && i % (2 * s) >= s && j % (2 * s) < s))
            })
            .collect();
        Array::from_vec(mask, &[c, c]).astype(dt).to_device(a.device())
    };
    let eye = ct::eye(c, c, 0, dt).to_device(a.device());
    if c <= 1 {
        return eye.broadcast_to(a.shape());
    }
    // blocks of one row: T = I, so T − T N T = I − N
    let mut t = &eye - a * quadrants(1);
    let mut s = 2;
    while s < c {
        let n = a * quadrants(s);
        t = &t - t.matmul(&n).matmul(&t);
        s *= 2;
    }
    t
}

/// The chunk as a custom function: the forward is [`chunk_forward`]; the VJP rule
/// `(primals, cotangents, outputs)` recomputes the chunk on `depends(primals, outputs)` — so the
/// recomputation runs only after the forward outputs exist, and none of the chunk's
/// intermediates are kept from the forward pass — and differentiates it with `ct::vjp`.
pub fn chunk_function() -> ChunkFn {
    static F: OnceLock<ChunkFn> = OnceLock::new();
    F.get_or_init(|| {
        let f = ct::custom_function(chunk_forward)
            .vjp(|primals, cotangents, outputs| {
                let inputs = ct::depends(primals, outputs);
                ct::vjp(chunk_forward, &inputs, cotangents).map(|(_, grads)| grads)
            })
            .name("gated_delta_chunk")
            .build();
        Arc::new(f)
    })
    .clone()
}

/// Time steps per call of [`segment_function`] in [`gated_delta_chunked`] (rounded down to
/// whole chunks, at least one): longer segments launch fewer kernels, shorter ones hold fewer
/// intermediates while a segment's VJP recomputes it.
pub const SEGMENT_STEPS: usize = 512;

/// The forward computation of a segment of `n` chunks of `C` steps.
///
/// Inputs: `q, k: [.., n, C, d_k]`, `v: [.., n, C, d_v]`, `log_g, beta: [.., n, C]`,
/// `s0: [.., d_k, d_v]`. Outputs: `y: [.., n, C, d_v]` and the state after the last chunk.
///
/// Every chunk's WY form (see [`chunk_forward`]) is computed for all `n` chunks at once:
/// `T = (I + A)⁻¹`, `W = T (β e^γ ⊙ k)` and `U = T (β ⊙ v)`, so that a chunk entered with state
/// `S` writes `δ = U − W S`. Only the state is sequential: per chunk `δ = U − W S`,
/// `S ← e^{γ_C} S + (e^{γ_C − γ} ⊙ k)ᵀ δ`. The outputs `y = e^γ ⊙ q S + (D ⊙ q kᵀ) δ` are
/// then one batched product over the chunks.
pub fn segment_forward(x: &[Array]) -> Vec<Array> {
    let (q, k, v, log_g, beta, s0) = (&x[0], &x[1], &x[2], &x[3], &x[4], &x[5]);
    let c = q.shape()[q.ndim() - 2];
    let n = q.shape()[q.ndim() - 3];
    let dt = q.dtype();
    let on = q.device();
    let upper = ct::tri(c, c, 0, dt).t().to_device(on);
    let gamma = log_g.expand_dims(&[-2]).matmul(&upper).squeeze(&[-2]); // [.., n, C]
    let gamma_last = gamma.slice_axis(-1, Some(c as isize - 1), None, 1); // [.., n, 1]
    let lower = ct::tri(c, c, 0, DType::Bool).to_device(on);
    let diff = gamma.expand_dims(&[-1]) - gamma.expand_dims(&[-2]);
    let decay = ct::select(&lower, &diff, -1e30).exp(); // D per chunk
    let strict = ct::tri(c, c, -1, dt).to_device(on);
    let k_t = k.swapaxes(-1, -2);
    let beta_col = beta.expand_dims(&[-1]); // [.., n, C, 1]
    let a = k.matmul(&k_t) * &decay * &beta_col * &strict;
    let g_col = gamma.exp().expand_dims(&[-1]); // e^γ, [.., n, C, 1]
    let inv = unit_lower_inverse(&a);
    let w = inv.matmul(&(&beta_col * &g_col * k)); // [.., n, C, d_k]
    let u = inv.matmul(&(&beta_col * v)); // [.., n, C, d_v]
    let tail_k = ((&gamma_last - &gamma).exp().expand_dims(&[-1]) * k).swapaxes(-1, -2); // [.., n, d_k, C]
    let g_last = gamma_last.exp().expand_dims(&[-1]); // [.., n, 1, 1]
    let chunk = |x: &Array, i: usize| x.slice_axis(-3, Some(i as isize), Some(i as isize + 1), 1).squeeze(&[-3]);
    let mut s = s0.clone();
    let (mut states, mut deltas) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let delta = chunk(&u, i) - chunk(&w, i).matmul(&s);
        let next = chunk(&g_last, i) * &s + chunk(&tail_k, i).matmul(&delta);
        states.push(s);
        deltas.push(delta);
        s = next;
    }
    let (states, deltas) = (ct::stack(&states, -3), ct::stack(&deltas, -3)); // [.., n, ·, d_v]
    let y = (&g_col * q).matmul(&states) + (q.matmul(&k_t) * &decay).matmul(&deltas);
    vec![y, s]
}

/// A segment of chunks as a custom function: the forward is [`segment_forward`]; the VJP rule
/// recomputes the segment on `depends(primals, outputs)` and differentiates it with `ct::vjp`,
/// so none of the segment's intermediates are kept from the forward pass.
///
/// ```
/// use cotangent::{self as ct, Array, DType};
/// use cotangent_nn::gated_delta::{segment_forward, segment_function};
/// // one head, 2 chunks of 3 steps, d_k = d_v = 2
/// let key = ct::random::key(0);
/// let r = |i: u32, shape: &[usize]| ct::random::normal(&ct::random::fold_in(&key, i), shape, DType::F64) * 0.3;
/// let x = vec![r(0, &[2, 3, 2]), r(1, &[2, 3, 2]), r(2, &[2, 3, 2]), r(3, &[2, 3]) - 1.0, r(4, &[2, 3]).sigmoid(), r(5, &[2, 2])];
/// let out = segment_function()(&x).unwrap();
/// assert_eq!(out[0].shape(), &[2, 3, 2]);
/// let plain = segment_forward(&x);
/// let same = (&out[0] - &plain[0]).abs().max_all().item::<f64>().unwrap();
/// assert!(same < 1e-12);
/// ```
pub fn segment_function() -> ChunkFn {
    static F: OnceLock<ChunkFn> = OnceLock::new();
    F.get_or_init(|| {
        let f = ct::custom_function(segment_forward)
            .vjp(|primals, cotangents, outputs| {
                let inputs = ct::depends(primals, outputs);
                ct::vjp(segment_forward, &inputs, cotangents).map(|(_, grads)| grads)
            })
            .name("gated_delta_segment")
            .build();
        Arc::new(f)
    })
    .clone()
}

/// Panic (at the caller's line) unless `q, k: [B, H, T, d_k]`, `v: [B, H, T, d_v]` and
/// `log_g, beta: [B, H, T]` all have one float dtype.
#[track_caller]
fn check_rule_inputs(op: &str, q: &Array, k: &Array, v: &Array, log_g: &Array, beta: &Array) {
    checks::rank(op, ("queries q", "queries q"), q, 4, "[batch, heads, time, d_k]");
    let bht = &q.shape()[..3];
    let (d_k, d_v) = (q.shape()[3], v.shape().last().copied().unwrap_or(0));
    let expected = [
        ("keys k", k, [bht, &[d_k]].concat(), "[batch, heads, time, d_k]"),
        ("values v", v, [bht, &[d_v]].concat(), "[batch, heads, time, d_v]"),
        ("log decays log_g", log_g, bht.to_vec(), "[batch, heads, time]"),
        ("write strengths beta", beta, bht.to_vec(), "[batch, heads, time]"),
    ];
    for (what, x, want, layout) in expected {
        if x.shape() != want.as_slice() {
            panic!(
                "{op} expects {what} of shape {layout} = {want:?} (from the queries' shape {:?}), but got {what} of \
                 shape {:?}",
                q.shape(),
                x.shape()
            );
        }
    }
    let dtypes = [q.dtype(), k.dtype(), v.dtype(), log_g.dtype(), beta.dtype()];
    if !q.dtype().is_float() || dtypes.iter().any(|&d| d != q.dtype()) {
        panic!(
            "{op} expects q, k, v, log_g and beta of one float dtype, but got {}, {}, {}, {} and {}",
            dtypes[0], dtypes[1], dtypes[2], dtypes[3], dtypes[4]
        );
    }
}

/// The recurrence step by step. `q, k: [B, H, T, d_k]`, `v: [B, H, T, d_v]`,
/// `log_g, beta: [B, H, T]`, all of one float dtype; returns `y: [B, H, T, d_v]`. Panics if
/// the shapes or dtypes do not fit together.
#[track_caller]
pub fn gated_delta_recurrent(q: &Array, k: &Array, v: &Array, log_g: &Array, beta: &Array) -> Array {
    check_rule_inputs("gated_delta_recurrent", q, k, v, log_g, beta);
    let (b, h, t, dk) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let dv = v.shape()[3];
    let mut s = ct::zeros(&[b, h, dk, dv], q.dtype()).to_device(q.device());
    let g = log_g.exp();
    let mut ys = Vec::with_capacity(t);
    for i in 0..t as isize {
        let at = |x: &Array| x.slice_axis(2, Some(i), Some(i + 1), 1); // [B, H, 1, ..]
        let (q_t, k_t, v_t) = (at(q), at(k), at(v));
        let g_t = at(&g).expand_dims(&[-1]); // [B, H, 1, 1]
        let b_t = at(beta).expand_dims(&[-1]);
        s = s * g_t;
        let kv = k_t.matmul(&s); // [B, H, 1, dv]
        let delta = (v_t - kv) * b_t;
        s = s + k_t.swapaxes(-1, -2) * delta; // outer product k_t ⊗ δ
        ys.push(q_t.matmul(&s));
    }
    ct::concatenate(&ys, 2)
}

/// The recurrence in chunks of `chunk` steps (the last chunk may be shorter), in segments of
/// [`SEGMENT_STEPS`] steps, each a call of [`segment_function`]. Same inputs and result as
/// [`gated_delta_recurrent`]; panics as it does.
#[track_caller]
pub fn gated_delta_chunked(
    q: &Array,
    k: &Array,
    v: &Array,
    log_g: &Array,
    beta: &Array,
    chunk: usize,
) -> Result<Array> {
    gated_delta_segmented(q, k, v, log_g, beta, chunk, SEGMENT_STEPS)
}

/// [`gated_delta_chunked`] with segments of `segment_steps` steps (rounded down to whole
/// chunks, at least one chunk) per call of [`segment_function`]: the knob between kernel launches
/// (fewer with longer segments) and the memory a segment's recomputation holds.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::gated_delta::{gated_delta_recurrent, gated_delta_segmented};
/// let r = |i: u64, shape: &[usize]| ct::random::normal(&ct::random::key(i), shape, DType::F64) * 0.3;
/// let (q, k, v) = (r(0, &[1, 2, 10, 3]), r(1, &[1, 2, 10, 3]), r(2, &[1, 2, 10, 3]));
/// let (log_g, beta) = (r(3, &[1, 2, 10]) - 1.0, r(4, &[1, 2, 10]).sigmoid());
/// // chunks of 3 steps, two chunks per segment: segments [0, 6), [6, 9) and the rest [9, 10)
/// let y = gated_delta_segmented(&q, &k, &v, &log_g, &beta, 3, 6).unwrap();
/// let want = gated_delta_recurrent(&q, &k, &v, &log_g, &beta);
/// assert!((&y - &want).abs().max_all().item::<f64>().unwrap() < 1e-12);
/// ```
#[track_caller]
pub fn gated_delta_segmented(
    q: &Array,
    k: &Array,
    v: &Array,
    log_g: &Array,
    beta: &Array,
    chunk: usize,
    segment_steps: usize,
) -> Result<Array> {
    assert!(chunk > 0, "gated_delta_chunked expects a positive chunk size, but got chunk = 0");
    check_rule_inputs("gated_delta_chunked", q, k, v, log_g, beta);
    let (b, h, t, dk) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let dv = v.shape()[3];
    let f = segment_function();
    // (first step, chunks, chunk length) of every segment: whole chunks, then the remainder
    let per_segment = (segment_steps / chunk).max(1);
    let whole = t / chunk;
    let mut segments: Vec<(usize, usize, usize)> =
        (0..whole).step_by(per_segment).map(|c0| (c0 * chunk, per_segment.min(whole - c0), chunk)).collect();
    if t % chunk != 0 {
        segments.push((whole * chunk, 1, t % chunk));
    }
    let mut s = ct::zeros(&[b, h, dk, dv], q.dtype()).to_device(q.device());
    let mut ys = Vec::with_capacity(segments.len());
    for (start, n, c) in segments {
        let (s0, e0) = (Some(start as isize), Some((start + n * c) as isize));
        let steps = |x: &Array, d: Option<usize>| {
            let shape: Vec<usize> = [b, h, n, c].into_iter().chain(d).collect();
            x.slice_axis(2, s0, e0, 1).reshape_exact(&shape)
        };
        let out =
            f(&[steps(q, Some(dk)), steps(k, Some(dk)), steps(v, Some(dv)), steps(log_g, None), steps(beta, None), s])?;
        ys.push(out[0].reshape_exact(&[b, h, n * c, dv]));
        s = out[1].clone();
    }
    if ys.len() == 1 {
        return Ok(ys.pop().unwrap());
    }
    Ok(ct::concatenate(&ys, 2))
}

/// A depthwise causal convolution over time: `y_t = Σ_m w[:, m] x_{t-K+1+m}` with zero
/// padding on the left; `x: [B, T, C]`, `w: [C, K]`. Panics unless the shapes fit and
/// `K > 0`.
#[track_caller]
pub fn causal_conv1d(x: &Array, w: &Array) -> Array {
    checks::rank("causal_conv1d", INPUT, x, 3, "[batch, time, channels]");
    checks::rank("causal_conv1d", ("weights", "weights"), w, 2, "[channels, kernel]");
    if w.shape()[0] != x.shape()[2] || w.shape()[1] == 0 {
        panic!(
            "causal_conv1d expects weights of shape [channels, kernel] = [{}, kernel > 0] for an input of shape {:?}, \
             but got weights of shape {:?}",
            x.shape()[2],
            x.shape(),
            w.shape()
        );
    }
    let (t, kernel) = (x.shape()[1] as isize, w.shape()[1]);
    let xp = x.pad(&[(0, 0), (kernel - 1, 0), (0, 0)], 0.0);
    let wt = w.t(); // [K, C]
    (0..kernel as isize)
        .map(|m| xp.slice_axis(1, Some(m), Some(m + t), 1) * wt.slice_axis(0, Some(m), Some(m + 1), 1))
        .reduce(|a, b| a + b)
        .expect("kernel size > 0")
}

/// Sizes and options of a [`GatedDeltaNet`] layer.
#[derive(Clone, Copy, Debug)]
pub struct GatedDeltaNetConfig {
    /// Model width.
    pub dim: usize,
    /// Number of heads.
    pub num_heads: usize,
    /// Key (and query) width per head.
    pub head_dim_k: usize,
    /// Value width per head.
    pub head_dim_v: usize,
    /// Kernel size of the short causal convolutions on q, k and v (`None`: no convolution).
    pub conv_kernel: Option<usize>,
    /// How the recurrence runs.
    pub mode: RecurrenceMode,
}

impl GatedDeltaNetConfig {
    /// `num_heads` heads of width `dim / num_heads` for keys and values, a convolution of
    /// kernel 4, chunks of 16 steps. Panics unless `num_heads` divides `dim`.
    #[track_caller]
    pub fn new(dim: usize, num_heads: usize) -> Self {
        assert!(
            num_heads > 0 && dim.is_multiple_of(num_heads),
            "GatedDeltaNetConfig expects num_heads to divide dim, but got num_heads = {num_heads} and dim = {dim}"
        );
        GatedDeltaNetConfig {
            dim,
            num_heads,
            head_dim_k: dim / num_heads,
            head_dim_v: dim / num_heads,
            conv_kernel: Some(4),
            mode: RecurrenceMode::Chunked(16),
        }
    }
}

/// A Gated DeltaNet token mixer (Yang, Kautz & Hatamizadeh, 2024): projections to q, k, v,
/// decay `a` and write strength `b`; optional short causal convolutions with SiLU on q, k and
/// v; L2-normalised q and k; the gated delta recurrence per head (see the module docs); then a
/// per-head RMS norm, a SiLU output gate and an output projection.
#[derive(Clone, Debug)]
pub struct GatedDeltaNet {
    /// Sizes and options.
    pub config: GatedDeltaNetConfig,
    /// `dim -> H·d_k`.
    pub q_proj: Linear,
    /// `dim -> H·d_k`.
    pub k_proj: Linear,
    /// `dim -> H·d_v`.
    pub v_proj: Linear,
    /// `dim -> H`: decay logits, `g = exp(-softplus(a))`.
    pub a_proj: Linear,
    /// `dim -> H`: write-strength logits, `β = sigmoid(b)`.
    pub b_proj: Linear,
    /// `dim -> H·d_v`: output gate.
    pub g_proj: Linear,
    /// `H·d_v -> dim`.
    pub o_proj: Linear,
    /// Convolution weights `[channels, K]` for q, k, v (if configured).
    pub conv: Option<[Array; 3]>,
    /// Per-head output RMS-norm scale `[d_v]`.
    pub norm_weight: Array,
}

impl GatedDeltaNet {
    /// A layer with PyTorch-style projection init; the decay bias is set so that `g` starts
    /// spread over `[0.9, 0.999]` across heads, and the convolutions start close to identity.
    pub fn new(key: &Array, config: GatedDeltaNetConfig, dtype: DType) -> Self {
        let c = config;
        let (h, dk, dv) = (c.num_heads, c.head_dim_k, c.head_dim_v);
        let keys = ct::random::split_keys(key, 10);
        let lin = |i: usize, o: usize, bias: bool| Linear::new(&keys[i], c.dim, o, bias, dtype);
        let mut a_proj = lin(3, h, true);
        // bias = softplus⁻¹(u), u = -log g for g spread over [0.9, 0.999]
        let u: Vec<f64> = (0..h)
            .map(|i| {
                let g = 0.9 + 0.099 * i as f64 / (h.max(2) - 1) as f64;
                -g.ln()
            })
            .collect();
        let bias: Vec<f64> = u.iter().map(|u| u.exp_m1().ln()).collect();
        a_proj.bias = Some(Array::from_vec(bias, &[h]).astype(dtype));
        let conv = c.conv_kernel.map(|kernel| {
            let mk = |i: usize, ch: usize| {
                // identity at the last tap plus small noise
                let mut w = init::normal(&keys[i], &[ch, kernel], 0.0, 0.1, dtype);
                let last = ct::one_hot(&Array::scalar((kernel - 1) as i32), kernel, dtype);
                w = w + last;
                w
            };
            [mk(7, h * dk), mk(8, h * dk), mk(9, h * dv)]
        });
        GatedDeltaNet {
            config: c,
            q_proj: lin(0, h * dk, false),
            k_proj: lin(1, h * dk, false),
            v_proj: lin(2, h * dv, false),
            a_proj,
            b_proj: lin(4, h, true),
            g_proj: lin(5, h * dv, false),
            o_proj: Linear::new(&keys[6], h * dv, c.dim, false, dtype),
            conv,
            norm_weight: ct::ones(&[dv], dtype),
        }
    }

    /// Apply to `x: [B, T, dim]`. Panics unless `x` is a float array of that shape.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let c = self.config;
        checks::float("GatedDeltaNet", INPUT, x);
        checks::rank("GatedDeltaNet", INPUT, x, 3, "[batch, time, dim]");
        checks::last_axis("GatedDeltaNet", INPUT, x, "dim", c.dim);
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (h, dk, dv) = (c.num_heads, c.head_dim_k, c.head_dim_v);
        let (mut q, mut k, mut v) = (self.q_proj.forward(x), self.k_proj.forward(x), self.v_proj.forward(x));
        if let Some([wq, wk, wv]) = &self.conv {
            q = activations::silu(&causal_conv1d(&q, wq));
            k = activations::silu(&causal_conv1d(&k, wk));
            v = activations::silu(&causal_conv1d(&v, wv));
        }
        let heads = |y: Array, d: usize| y.reshape_exact(&[b, t, h, d]).transpose(&[0, 2, 1, 3]); // [B, H, T, d]
        let q = activations::l2_normalize(&heads(q, dk), 1e-6) * (1.0 / (dk as f64).sqrt());
        let k = activations::l2_normalize(&heads(k, dk), 1e-6);
        let v = heads(v, dv);
        let log_g = -activations::softplus(&self.a_proj.forward(x)).transpose(&[0, 2, 1]); // [B, H, T]
        let beta = self.b_proj.forward(x).sigmoid().transpose(&[0, 2, 1]);
        let y = match c.mode {
            RecurrenceMode::Recurrent => gated_delta_recurrent(&q, &k, &v, &log_g, &beta),
            RecurrenceMode::Chunked(n) => gated_delta_chunked(&q, &k, &v, &log_g, &beta, n)?,
        };
        // per-head RMS norm, SiLU gate, output projection
        let y = y.transpose(&[0, 2, 1, 3]); // [B, T, H, dv]
        let y = &y * (y.square().mean(&[-1], true) + 1e-6).rsqrt() * &self.norm_weight;
        let gate = activations::silu(&self.g_proj.forward(x));
        Ok(self.o_proj.forward(&(y.reshape_exact(&[b, t, h * dv]) * gate)))
    }
}

impl Module for GatedDeltaNet {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("q_proj", &mut self.q_proj);
        v.child("k_proj", &mut self.k_proj);
        v.child("v_proj", &mut self.v_proj);
        v.child("a_proj", &mut self.a_proj);
        v.child("b_proj", &mut self.b_proj);
        v.child("g_proj", &mut self.g_proj);
        v.child("o_proj", &mut self.o_proj);
        if let Some([q, k, v_weight]) = &mut self.conv {
            v.enter("conv");
            v.param("q", q);
            v.param("k", k);
            v.param("v", v_weight);
            v.leave();
        }
        v.enter("norm");
        v.param("weight", &mut self.norm_weight);
        v.leave();
    }
}
