//! Qwen3-Next's linear-attention blocks, with the parameter names and shapes of Hugging Face
//! transformers (`transformers.models.qwen3_next`), so checkpoints load by name:
//!
//! - [`Qwen3NextGatedDeltaNet`] — `Qwen3NextGatedDeltaNet` (`linear_attn`): the fused projections
//!   `in_proj_qkvz` / `in_proj_ba` in their interleaved per-key-head layout, a depthwise causal
//!   convolution with SiLU, grouped value heads, L2-normalised q and k, the gated delta rule
//!   (chunked, each chunk a custom function that recomputes itself in the backward pass — see
//!   [`crate::gated_delta`] — or op by op), a gated RMS norm and the output projection;
//! - [`Qwen3NextRMSNorm`] (`(1 + weight)` scaling), [`Qwen3NextRMSNormGated`], [`Qwen3NextMlp`]
//!   (SwiGLU) and the linear-attention [`Qwen3NextDecoderLayer`] around them.
//!
//! The arithmetic follows transformers' pure-PyTorch path (`torch_chunk_gated_delta_rule`,
//! `causal_conv1d_fn`), including where it computes in `f32` for lower-precision inputs: `f16`
//! and `bf16` layers compute their norms, gates and recurrence in `f32`; `f32` and `f64` layers
//! compute everything in their own dtype (see [`compute_dtype`]).
//! `tests/qwen3_next.rs` checks outputs and all gradients against files generated with
//! transformers itself (`tests/qwen3_next/gen_reference.py`).
//!
//! ```
//! use cotangent::{self as ct, DType};
//! use cotangent_nn::qwen3_next::{Qwen3NextConfig, Qwen3NextDecoderLayer};
//! use cotangent_nn::Module;
//! let config = Qwen3NextConfig::small(32);
//! let layer = Qwen3NextDecoderLayer::new(&ct::random::key(0), config, DType::F32);
//! let names = layer.parameters().names();
//! assert!(names.contains(&"linear_attn.in_proj_qkvz.weight".to_string()));
//! assert!(names.contains(&"post_attention_layernorm.weight".to_string()));
//! let x = ct::random::normal(&ct::random::key(1), &[2, 10, 32], DType::F32);
//! assert_eq!(layer.forward(&x).unwrap().shape(), &[2, 10, 32]);
//! ```
use crate::checks::{self, INPUT};
use crate::gated_delta::{causal_conv1d, gated_delta_chunked, gated_delta_recurrent, RecurrenceMode};
use crate::{activations, init, Linear, Module, Visitor};
use cotangent::{self as ct, Array, DType, Error, Result};

/// The fields of transformers' `Qwen3NextConfig` that a linear-attention decoder layer uses,
/// under the same names, plus how the recurrence runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qwen3NextConfig {
    /// Model width.
    pub hidden_size: usize,
    /// Hidden width of the dense SwiGLU MLP.
    pub intermediate_size: usize,
    /// Query/key heads of the Gated DeltaNet.
    pub linear_num_key_heads: usize,
    /// Value heads (a multiple of the key heads: each query/key head serves
    /// `linear_num_value_heads / linear_num_key_heads` consecutive value heads).
    pub linear_num_value_heads: usize,
    /// Query/key width per head.
    pub linear_key_head_dim: usize,
    /// Value width per head.
    pub linear_value_head_dim: usize,
    /// Kernel size of the depthwise causal convolution over q, k and v.
    pub linear_conv_kernel_dim: usize,
    /// Epsilon of every RMS norm.
    pub rms_norm_eps: f64,
    /// How the gated delta rule runs: transformers uses chunks of 64 (the result does not
    /// depend on the chunk size, only the speed and the memory of the backward pass do).
    pub recurrence: RecurrenceMode,
}

/// The integer fields of [`Qwen3NextConfig`], by their transformers names.
const INTEGER_FIELDS: [&str; 7] = [
    "hidden_size",
    "intermediate_size",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
];

impl Qwen3NextConfig {
    /// A small configuration of width `hidden_size`: 2 key heads and 4 value heads of width
    /// `hidden_size / 4`, kernel 4, an MLP of twice the width, `rms_norm_eps = 1e-6`, chunks
    /// of 64.
    ///
    /// ```
    /// let c = cotangent_nn::qwen3_next::Qwen3NextConfig::small(64);
    /// assert_eq!((c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim), (2, 4, 16));
    /// ```
    pub fn small(hidden_size: usize) -> Self {
        let head_dim = (hidden_size / 4).max(1);
        Qwen3NextConfig {
            hidden_size,
            intermediate_size: 2 * hidden_size,
            linear_num_key_heads: 2,
            linear_num_value_heads: 4,
            linear_key_head_dim: head_dim,
            linear_value_head_dim: head_dim,
            linear_conv_kernel_dim: 4,
            rms_norm_eps: 1e-6,
            recurrence: RecurrenceMode::Chunked(64),
        }
    }

    /// Read the fields from name/value strings, e.g. a safetensors file's metadata or the
    /// numbers of a `config.json`; every missing or unreadable field is named in the `Err`.
    /// The recurrence is chunked by 64.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use cotangent_nn::qwen3_next::Qwen3NextConfig;
    /// let fields: HashMap<&str, &str> = [
    ///     ("hidden_size", "32"), ("intermediate_size", "64"), ("linear_num_key_heads", "2"),
    ///     ("linear_num_value_heads", "4"), ("linear_key_head_dim", "8"),
    ///     ("linear_value_head_dim", "8"), ("linear_conv_kernel_dim", "4"), ("rms_norm_eps", "1e-6"),
    /// ].into();
    /// let c = Qwen3NextConfig::from_fields(|k| fields.get(k).map(|v| v.to_string())).unwrap();
    /// assert_eq!(c.linear_num_value_heads, 4);
    /// let err = Qwen3NextConfig::from_fields(|_| None).unwrap_err().to_string();
    /// assert!(err.contains("hidden_size") && err.contains("rms_norm_eps"));
    /// ```
    pub fn from_fields(field: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut problems = Vec::new();
        let mut integers = [0usize; INTEGER_FIELDS.len()];
        for (slot, name) in integers.iter_mut().zip(INTEGER_FIELDS) {
            match field(name).map(|v| v.trim().parse::<usize>()) {
                Some(Ok(v)) => *slot = v,
                Some(Err(e)) => problems.push(format!("`{name}`: {e}")),
                None => problems.push(format!("`{name}` is missing")),
            }
        }
        let eps = match field("rms_norm_eps").map(|v| v.trim().parse::<f64>()) {
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                problems.push(format!("`rms_norm_eps`: {e}"));
                0.0
            }
            None => {
                problems.push("`rms_norm_eps` is missing".to_string());
                0.0
            }
        };
        if !problems.is_empty() {
            return Err(Error::Other(format!("Qwen3NextConfig: {}", problems.join(", "))));
        }
        let [hidden_size, intermediate_size, nk, nv, dk, dv, kernel] = integers;
        let config = Qwen3NextConfig {
            hidden_size,
            intermediate_size,
            linear_num_key_heads: nk,
            linear_num_value_heads: nv,
            linear_key_head_dim: dk,
            linear_value_head_dim: dv,
            linear_conv_kernel_dim: kernel,
            rms_norm_eps: eps,
            recurrence: RecurrenceMode::Chunked(64),
        };
        config.validate()?;
        Ok(config)
    }

    /// The fields [`from_fields`](Qwen3NextConfig::from_fields) reads, as name/value strings
    /// (e.g. to store in a checkpoint's metadata with [`crate::io::save_with_metadata`]).
    ///
    /// ```
    /// use cotangent_nn::qwen3_next::Qwen3NextConfig;
    /// let c = Qwen3NextConfig::small(48);
    /// let fields = c.to_fields();
    /// assert_eq!(Qwen3NextConfig::from_fields(|k| fields.get(k).cloned()).unwrap(), c);
    /// ```
    pub fn to_fields(&self) -> std::collections::HashMap<String, String> {
        let c = self;
        let integers = [
            c.hidden_size,
            c.intermediate_size,
            c.linear_num_key_heads,
            c.linear_num_value_heads,
            c.linear_key_head_dim,
            c.linear_value_head_dim,
            c.linear_conv_kernel_dim,
        ];
        let mut fields: std::collections::HashMap<String, String> =
            INTEGER_FIELDS.iter().zip(integers).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        fields.insert("rms_norm_eps".to_string(), format!("{:e}", c.rms_norm_eps));
        fields
    }

    /// Check that the sizes fit together (positive, value heads a multiple of key heads).
    pub fn validate(&self) -> Result<()> {
        let c = self;
        let sizes = [
            c.hidden_size,
            c.linear_num_key_heads,
            c.linear_num_value_heads,
            c.linear_key_head_dim,
            c.linear_value_head_dim,
            c.linear_conv_kernel_dim,
        ];
        if sizes.contains(&0) {
            return Err(Error::Other(format!("Qwen3NextConfig: sizes must be positive: {c:?}")));
        }
        if !c.linear_num_value_heads.is_multiple_of(c.linear_num_key_heads) {
            return Err(Error::Other(format!(
                "Qwen3NextConfig: {} value heads are not a multiple of {} key heads",
                c.linear_num_value_heads, c.linear_num_key_heads
            )));
        }
        Ok(())
    }

    /// Value heads per query/key head.
    pub fn value_heads_per_key_head(&self) -> usize {
        self.linear_num_value_heads / self.linear_num_key_heads
    }

    /// Total query (or key) width: `linear_num_key_heads · linear_key_head_dim`.
    pub fn key_dim(&self) -> usize {
        self.linear_num_key_heads * self.linear_key_head_dim
    }

    /// Total value width: `linear_num_value_heads · linear_value_head_dim`.
    pub fn value_dim(&self) -> usize {
        self.linear_num_value_heads * self.linear_value_head_dim
    }

    /// Channels of the convolution (q, k and v together): `2 · key_dim + value_dim`.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
}

/// The dtype in which a layer of dtype `dtype` computes its norms, gates and recurrence:
/// `f32` for the half-precision `f16` and `bf16` (as transformers upcasts them), the dtype
/// itself otherwise, so an `f64` layer computes in `f64`.
///
/// ```
/// use cotangent::DType;
/// use cotangent_nn::qwen3_next::compute_dtype;
/// assert_eq!(compute_dtype(DType::BF16), DType::F32);
/// assert_eq!(compute_dtype(DType::F64), DType::F64);
/// ```
pub fn compute_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// `x` in the [`compute_dtype`] of `like` (itself if it already is).
fn upcast(x: &Array, like: DType) -> Array {
    x.astype(compute_dtype(like))
}

/// `x / sqrt(mean(x²) + eps)` over the last axis.
fn rms_normalize(x: &Array, eps: f64) -> Array {
    x * (x.square().mean(&[-1], true) + eps).rsqrt()
}

/// `x / sqrt(sum(x²) + eps)` over the last axis: the L2 norm of transformers' `l2norm` (and of
/// the FLA kernels), which adds `eps` to the sum of squares rather than clamping the norm.
pub fn l2norm(x: &Array, eps: f64) -> Array {
    x * (x.square().sum(&[-1], true) + eps).rsqrt()
}

/// transformers' `Qwen3NextRMSNorm`: `x / rms(x) · (1 + weight)`, computed in `f32` for `f16`
/// and `bf16` inputs (in `x`'s dtype otherwise, see [`compute_dtype`]) and cast back to `x`'s
/// dtype; the weight starts at zero.
///
/// ```
/// use cotangent::{Array, DType};
/// use cotangent_nn::qwen3_next::Qwen3NextRMSNorm;
/// let norm = Qwen3NextRMSNorm::new(2, 0.0, DType::F32);
/// let y = norm.forward(&Array::from_slice(&[3.0f32, 4.0], &[1, 2])).to_vec::<f32>().unwrap();
/// let rms = (12.5f32).sqrt();
/// assert!((y[0] - 3.0 / rms).abs() < 1e-6 && (y[1] - 4.0 / rms).abs() < 1e-6);
/// ```
#[derive(Clone, Debug)]
pub struct Qwen3NextRMSNorm {
    /// `[dim]`; the scale is `1 + weight`.
    pub weight: Array,
    /// Added to the mean square.
    pub eps: f64,
}

impl Qwen3NextRMSNorm {
    /// A norm over `dim` features with zero weight (scale one).
    pub fn new(dim: usize, eps: f64, dtype: DType) -> Self {
        Qwen3NextRMSNorm { weight: ct::zeros(&[dim], dtype), eps }
    }

    /// Normalise `x` over its last axis. Panics unless `x` is a float array whose last axis
    /// is the norm's `dim`.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        checks::float("Qwen3NextRMSNorm", INPUT, x);
        checks::last_axis("Qwen3NextRMSNorm", INPUT, x, "dim", self.weight.size());
        let dt = x.dtype();
        (rms_normalize(&upcast(x, dt), self.eps) * (upcast(&self.weight, dt) + 1.0)).astype(dt)
    }
}

impl Module for Qwen3NextRMSNorm {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.param("weight", &mut self.weight);
    }
}

/// transformers' `Qwen3NextRMSNormGated`: `weight · x / rms(x) · silu(gate)`, the norm and the
/// gate in `f32` for `f16` and `bf16` inputs (the norm cast back to `x`'s dtype before the
/// weight), in `x`'s dtype otherwise (see [`compute_dtype`]); the result in `x`'s dtype.
///
/// ```
/// use cotangent::{Array, DType};
/// use cotangent_nn::qwen3_next::Qwen3NextRMSNormGated;
/// let norm = Qwen3NextRMSNormGated::new(2, 0.0, DType::F32);
/// let x = Array::from_slice(&[1.0f32, -1.0], &[1, 2]);
/// let gate = Array::from_slice(&[0.0f32, 50.0], &[1, 2]); // silu(0) = 0, silu(50) ≈ 50
/// let y = norm.forward(&x, &gate).to_vec::<f32>().unwrap();
/// assert_eq!(y[0], 0.0);
/// assert!((y[1] + 50.0).abs() < 1e-4);
/// ```
#[derive(Clone, Debug)]
pub struct Qwen3NextRMSNormGated {
    /// `[dim]`, ones at init.
    pub weight: Array,
    /// Added to the mean square.
    pub eps: f64,
}

impl Qwen3NextRMSNormGated {
    /// A gated norm over `dim` features with unit weight.
    pub fn new(dim: usize, eps: f64, dtype: DType) -> Self {
        Qwen3NextRMSNormGated { weight: ct::ones(&[dim], dtype), eps }
    }

    /// Normalise `x` over its last axis and gate it with `silu(gate)` (same shape as `x`).
    /// Panics unless `x` is a float array whose last axis is the norm's `dim` and `gate` has
    /// `x`'s shape.
    #[track_caller]
    pub fn forward(&self, x: &Array, gate: &Array) -> Array {
        checks::float("Qwen3NextRMSNormGated", INPUT, x);
        checks::last_axis("Qwen3NextRMSNormGated", INPUT, x, "dim", self.weight.size());
        checks::same_shape("Qwen3NextRMSNormGated", ("x", x), ("gate", gate));
        let dt = x.dtype();
        let normalized = rms_normalize(&upcast(x, dt), self.eps).astype(dt);
        (&self.weight * normalized * activations::silu(&upcast(gate, dt))).astype(dt)
    }
}

impl Module for Qwen3NextRMSNormGated {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.param("weight", &mut self.weight);
    }
}

/// A depthwise causal convolution without bias, stored as PyTorch's grouped `nn.Conv1d`:
/// `weight: [channels, 1, kernel]`; `y_t = Σ_m weight[:, 0, m] · x_{t−K+1+m}` (zero before the
/// start).
///
/// ```
/// use cotangent::{Array, DType};
/// use cotangent_nn::qwen3_next::CausalDepthwiseConv1d;
/// // one channel, kernel 2: y_t = 1·x_{t−1} + 10·x_t
/// let conv = CausalDepthwiseConv1d { weight: Array::from_slice(&[1.0f32, 10.0], &[1, 1, 2]) };
/// let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3, 1]);
/// assert_eq!(conv.forward(&x).to_vec::<f32>().unwrap(), vec![10.0, 21.0, 32.0]);
/// ```
#[derive(Clone, Debug)]
pub struct CausalDepthwiseConv1d {
    /// `[channels, 1, kernel]`.
    pub weight: Array,
}

impl CausalDepthwiseConv1d {
    /// PyTorch's default init for a depthwise `nn.Conv1d`: `U(−1/√K, 1/√K)`.
    pub fn new(key: &Array, channels: usize, kernel: usize, dtype: DType) -> Self {
        let bound = 1.0 / (kernel as f64).sqrt();
        CausalDepthwiseConv1d { weight: init::uniform(key, &[channels, 1, kernel], -bound, bound, dtype) }
    }

    /// Convolve `x: [B, T, channels]` over time. Panics unless `x` has that shape.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        let (channels, kernel) = (self.weight.shape()[0], self.weight.shape()[2]);
        checks::rank("CausalDepthwiseConv1d", INPUT, x, 3, "[batch, time, channels]");
        checks::last_axis("CausalDepthwiseConv1d", INPUT, x, "channels", channels);
        causal_conv1d(x, &self.weight.reshape_exact(&[channels, kernel]).astype(x.dtype()))
    }
}

impl Module for CausalDepthwiseConv1d {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.param("weight", &mut self.weight);
    }
}

/// transformers' `Qwen3NextGatedDeltaNet`, the linear-attention token mixer of Qwen3-Next.
///
/// With `Hk` key heads of width `dk`, `Hv = r·Hk` value heads of width `dv`:
///
/// 1. `in_proj_qkvz(x)` viewed per key head as `[q (dk) | k (dk) | v (r·dv) | z (r·dv)]`,
///    `in_proj_ba(x)` per key head as `[b (r) | a (r)]` (`fix_query_key_value_ordering`);
/// 2. `q, k, v` concatenated, convolved ([`CausalDepthwiseConv1d`]) and passed through SiLU;
/// 3. `β = sigmoid(b)`, `log g = −exp(A_log) · softplus(a + dt_bias)` (in `f32` for `f16`
///    and `bf16` layers, in the layer's dtype otherwise: see [`compute_dtype`]);
/// 4. q and k repeated for the `r` value heads of their group, L2-normalised
///    ([`l2norm`], eps 1e-6), q scaled by `1/√dk`, and the gated delta rule run per value head
///    in the compute dtype (`config.recurrence`: chunked custom functions or op by op);
/// 5. [`Qwen3NextRMSNormGated`] of the output with gate `z`, then `out_proj`.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::qwen3_next::{Qwen3NextConfig, Qwen3NextGatedDeltaNet};
/// use cotangent_nn::{Module, RecurrenceMode};
/// let mut config = Qwen3NextConfig::small(16);
/// let chunked = Qwen3NextGatedDeltaNet::new(&ct::random::key(0), config, DType::F64);
/// config.recurrence = RecurrenceMode::Recurrent;
/// let mut stepwise = Qwen3NextGatedDeltaNet::new(&ct::random::key(1), config, DType::F64);
/// stepwise.update(&chunked.parameters()).unwrap();
/// let x = ct::random::normal(&ct::random::key(2), &[1, 9, 16], DType::F64);
/// let (a, b) = (chunked.forward(&x).unwrap(), stepwise.forward(&x).unwrap());
/// let diff = (&a - &b).abs().max_all().item::<f64>().unwrap();
/// assert!(diff < 1e-10, "{diff}"); // an f64 layer computes in f64
/// ```
#[derive(Clone, Debug)]
pub struct Qwen3NextGatedDeltaNet {
    /// Sizes and the recurrence mode.
    pub config: Qwen3NextConfig,
    /// Depthwise causal convolution over `conv_dim` channels (q, k, v).
    pub conv1d: CausalDepthwiseConv1d,
    /// `hidden -> 2·key_dim + 2·value_dim`, interleaved per key head.
    pub in_proj_qkvz: Linear,
    /// `hidden -> 2·Hv`, interleaved per key head.
    pub in_proj_ba: Linear,
    /// `[Hv]`, added to `a` before the softplus (ones at init).
    pub dt_bias: Array,
    /// `[Hv]`, `log A` of the decay rate `A` (`log U(0.01, 16)` at init); the checkpoint
    /// name is `A_log`.
    pub a_log: Array,
    /// Gated RMS norm over the value head width.
    pub norm: Qwen3NextRMSNormGated,
    /// `value_dim -> hidden`.
    pub out_proj: Linear,
}

impl Qwen3NextGatedDeltaNet {
    /// A layer initialised as PyTorch constructs transformers' module: uniform projections and
    /// convolution, `dt_bias = 1`, `A_log = log U(0.01, 16)`, norm weight one. Panics if the
    /// config does not [`validate`](Qwen3NextConfig::validate).
    #[track_caller]
    pub fn new(key: &Array, config: Qwen3NextConfig, dtype: DType) -> Self {
        if let Err(e) = config.validate() {
            panic!("Qwen3NextGatedDeltaNet::new expects a valid config, but got one that is not: {e}");
        }
        let c = config;
        let keys = ct::random::split_keys(key, 5);
        let heads = c.linear_num_value_heads;
        Qwen3NextGatedDeltaNet {
            config,
            conv1d: CausalDepthwiseConv1d::new(&keys[0], c.conv_dim(), c.linear_conv_kernel_dim, dtype),
            in_proj_qkvz: Linear::new(&keys[1], c.hidden_size, 2 * c.key_dim() + 2 * c.value_dim(), false, dtype),
            in_proj_ba: Linear::new(&keys[2], c.hidden_size, 2 * heads, false, dtype),
            dt_bias: ct::ones(&[heads], dtype),
            a_log: init::uniform(&keys[3], &[heads], 0.01, 16.0, DType::F32).log().astype(dtype),
            norm: Qwen3NextRMSNormGated::new(c.linear_value_head_dim, c.rms_norm_eps, dtype),
            out_proj: Linear::new(&keys[4], c.value_dim(), c.hidden_size, false, dtype),
        }
    }

    /// Apply to `x: [B, T, hidden]`, giving `[B, T, hidden]` in `x`'s dtype. Panics unless `x`
    /// is a float array of that shape.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let c = &self.config;
        checks::float("Qwen3NextGatedDeltaNet", INPUT, x);
        checks::rank("Qwen3NextGatedDeltaNet", INPUT, x, 3, "[batch, time, hidden_size]");
        checks::last_axis("Qwen3NextGatedDeltaNet", INPUT, x, "hidden_size", c.hidden_size);
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (hk, hv, dk, dv) =
            (c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim);
        let r = c.value_heads_per_key_head();
        let at = |i: usize| i as isize;

        // fix_query_key_value_ordering: per key head, [q | k | v (r heads) | z (r heads)] and [b | a]
        let qkvz = self.in_proj_qkvz.forward(x).reshape_exact(&[b, t, hk, 2 * dk + 2 * r * dv]);
        let [q, k, v, z]: [Array; 4] =
            qkvz.split([at(dk), at(2 * dk), at(2 * dk + r * dv)], -1).try_into().expect("four pieces");
        let ba = self.in_proj_ba.forward(x).reshape_exact(&[b, t, hk, 2 * r]);
        let [b_logits, a]: [Array; 2] = ba.split(2, -1).try_into().expect("two pieces");
        let (b_logits, a) = (b_logits.reshape_exact(&[b, t, hv]), a.reshape_exact(&[b, t, hv]));

        // the short convolution over q, k, v together
        let mixed = ct::concatenate(
            &[
                q.reshape_exact(&[b, t, c.key_dim()]),
                k.reshape_exact(&[b, t, c.key_dim()]),
                v.reshape_exact(&[b, t, c.value_dim()]),
            ],
            -1,
        );
        let mixed = activations::silu(&self.conv1d.forward(&mixed));
        let [q, k, v]: [Array; 3] =
            mixed.split([at(c.key_dim()), at(2 * c.key_dim())], -1).try_into().expect("three pieces");

        let beta = b_logits.sigmoid();
        let (dt, cdt) = (x.dtype(), compute_dtype(x.dtype()));
        let log_g =
            -upcast(&self.a_log, dt).exp() * activations::softplus(&(upcast(&a, dt) + upcast(&self.dt_bias, dt)));

        // the rule, in the compute dtype, with heads before time: [B, Hv, T, d]
        let heads_first = |y: &Array, heads: usize, d: usize| {
            upcast(&y.reshape_exact(&[b, t, heads, d]).repeat(hv / heads, 2).transpose(&[0, 2, 1, 3]), dt)
        };
        let q = l2norm(&heads_first(&q, hk, dk), 1e-6) * (1.0 / (dk as f64).sqrt());
        let k = l2norm(&heads_first(&k, hk, dk), 1e-6);
        let v = heads_first(&v, hv, dv);
        let (beta, log_g) = (upcast(&beta, dt).transpose(&[0, 2, 1]), log_g.astype(cdt).transpose(&[0, 2, 1]));
        let core = match c.recurrence {
            RecurrenceMode::Recurrent => gated_delta_recurrent(&q, &k, &v, &log_g, &beta),
            RecurrenceMode::Chunked(n) => gated_delta_chunked(&q, &k, &v, &log_g, &beta, n)?,
        };
        let core = core.transpose(&[0, 2, 1, 3]).astype(x.dtype()); // [B, T, Hv, dv]

        let gated = self.norm.forward(&core, &z.reshape_exact(&[b, t, hv, dv]));
        Ok(self.out_proj.forward(&gated.reshape_exact(&[b, t, c.value_dim()])))
    }
}

impl Module for Qwen3NextGatedDeltaNet {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("conv1d", &mut self.conv1d);
        v.child("in_proj_qkvz", &mut self.in_proj_qkvz);
        v.child("in_proj_ba", &mut self.in_proj_ba);
        v.param("dt_bias", &mut self.dt_bias);
        v.param("A_log", &mut self.a_log);
        v.child("norm", &mut self.norm);
        v.child("out_proj", &mut self.out_proj);
    }
}

/// transformers' `Qwen3NextMLP`: `down_proj(silu(gate_proj(x)) · up_proj(x))`, no biases.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::qwen3_next::Qwen3NextMlp;
/// let mlp = Qwen3NextMlp::new(&ct::random::key(0), 8, 16, DType::F32);
/// assert_eq!(mlp.up_proj.weight.shape(), &[16, 8]);
/// let x = ct::random::normal(&ct::random::key(1), &[3, 8], DType::F32);
/// assert_eq!(mlp.forward(&x).shape(), &[3, 8]);
/// ```
#[derive(Clone, Debug)]
pub struct Qwen3NextMlp {
    /// `hidden -> intermediate`, through SiLU.
    pub gate_proj: Linear,
    /// `hidden -> intermediate`.
    pub up_proj: Linear,
    /// `intermediate -> hidden`.
    pub down_proj: Linear,
}

impl Qwen3NextMlp {
    /// An MLP `hidden -> intermediate -> hidden` with PyTorch's uniform init.
    pub fn new(key: &Array, hidden_size: usize, intermediate_size: usize, dtype: DType) -> Self {
        let keys = ct::random::split_keys(key, 3);
        Qwen3NextMlp {
            gate_proj: Linear::new(&keys[0], hidden_size, intermediate_size, false, dtype),
            up_proj: Linear::new(&keys[1], hidden_size, intermediate_size, false, dtype),
            down_proj: Linear::new(&keys[2], intermediate_size, hidden_size, false, dtype),
        }
    }

    /// Apply to `[..., hidden]`. Panics unless `x` is a float array whose last axis is
    /// `hidden_size`.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        checks::float("Qwen3NextMlp", INPUT, x);
        checks::last_axis("Qwen3NextMlp", INPUT, x, "hidden_size", self.gate_proj.weight.shape()[1]);
        self.down_proj.forward(&(activations::silu(&self.gate_proj.forward(x)) * self.up_proj.forward(x)))
    }
}

impl Module for Qwen3NextMlp {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("gate_proj", &mut self.gate_proj);
        v.child("up_proj", &mut self.up_proj);
        v.child("down_proj", &mut self.down_proj);
    }
}

/// transformers' `Qwen3NextDecoderLayer` of the `linear_attention` type with a dense MLP:
/// `h = x + linear_attn(input_layernorm(x))`, `y = h + mlp(post_attention_layernorm(h))`.
///
/// Its parameters are named as under `model.layers.{i}.` in a Hugging Face checkpoint; load one
/// with [`crate::io::load_into_with_prefix`]`(&mut layer, path, "model.layers.0.")`.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::qwen3_next::{Qwen3NextConfig, Qwen3NextDecoderLayer};
/// use cotangent_nn::Module;
/// let layer = Qwen3NextDecoderLayer::new(&ct::random::key(0), Qwen3NextConfig::small(16), DType::F32);
/// let names = layer.parameters().names();
/// assert_eq!(names[0], "input_layernorm.weight");
/// assert!(names.contains(&"linear_attn.A_log".to_string()));
/// assert!(names.contains(&"mlp.down_proj.weight".to_string()));
/// ```
#[derive(Clone, Debug)]
pub struct Qwen3NextDecoderLayer {
    /// Norm before the token mixer.
    pub input_layernorm: Qwen3NextRMSNorm,
    /// The Gated DeltaNet token mixer.
    pub linear_attn: Qwen3NextGatedDeltaNet,
    /// Norm before the MLP.
    pub post_attention_layernorm: Qwen3NextRMSNorm,
    /// The dense SwiGLU MLP.
    pub mlp: Qwen3NextMlp,
}

impl Qwen3NextDecoderLayer {
    /// A layer with transformers' init of the norms (zero weights, scale one); see
    /// [`Qwen3NextGatedDeltaNet::new`] and [`Qwen3NextMlp::new`] for the rest.
    #[track_caller]
    pub fn new(key: &Array, config: Qwen3NextConfig, dtype: DType) -> Self {
        let (k1, k2) = ct::random::split2(key);
        Qwen3NextDecoderLayer {
            input_layernorm: Qwen3NextRMSNorm::new(config.hidden_size, config.rms_norm_eps, dtype),
            linear_attn: Qwen3NextGatedDeltaNet::new(&k1, config, dtype),
            post_attention_layernorm: Qwen3NextRMSNorm::new(config.hidden_size, config.rms_norm_eps, dtype),
            mlp: Qwen3NextMlp::new(&k2, config.hidden_size, config.intermediate_size, dtype),
        }
    }

    /// Apply to `x: [B, T, hidden]`. Panics unless `x` is a float array of that shape.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let c = &self.linear_attn.config;
        checks::float("Qwen3NextDecoderLayer", INPUT, x);
        checks::rank("Qwen3NextDecoderLayer", INPUT, x, 3, "[batch, time, hidden_size]");
        checks::last_axis("Qwen3NextDecoderLayer", INPUT, x, "hidden_size", c.hidden_size);
        let h = x + self.linear_attn.forward(&self.input_layernorm.forward(x))?;
        Ok(&h + self.mlp.forward(&self.post_attention_layernorm.forward(&h)))
    }
}

impl Module for Qwen3NextDecoderLayer {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("input_layernorm", &mut self.input_layernorm);
        v.child("linear_attn", &mut self.linear_attn);
        v.child("post_attention_layernorm", &mut self.post_attention_layernorm);
        v.child("mlp", &mut self.mlp);
    }
}
