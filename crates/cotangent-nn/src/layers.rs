//! Basic layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`RMSNorm`], [`Dropout`], [`Mlp`]
//! and causal [`MultiHeadAttention`]. Each holds its parameters as arrays and implements
//! [`Module`]; `forward` methods build the lazy graph.
//!
//! Misuse panics at the caller's line with a sentence naming the layer, the argument and the
//! expected and given shape or dtype:
//!
//! ```should_panic
//! use cotangent::{self as ct, DType};
//! use cotangent_nn::Linear;
//! let layer = Linear::new(&ct::random::key(0), 4, 2, true, DType::F32);
//! // panics: "Linear expects inputs whose last axis is in_features = 4, but got an input of shape [2, 3]"
//! layer.forward(&ct::zeros(&[2, 3], DType::F32));
//! ```
use crate::checks::{self, INPUT};
use crate::lora::LoraAdapter;
use crate::{activations, init, Module, Visitor};
use cotangent::{self as ct, Array, DType};

/// `y = x Wᵀ + b`, with `W` of shape `[out, in]` (PyTorch's layout), plus a LoRA adapter's
/// term when [`lora::apply`](crate::lora::apply) gave it one.
#[derive(Clone, Debug)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Array,
    /// `[out_features]`, if the layer has a bias.
    pub bias: Option<Array>,
    /// A low-rank adapter added to the output (see [`crate::lora`]); `None` for a plain layer.
    pub lora: Option<Box<LoraAdapter>>,
}

impl Linear {
    /// Weight `U(-1/√in, 1/√in)` (as PyTorch), bias zero.
    pub fn new(key: &Array, in_features: usize, out_features: usize, bias: bool, dtype: DType) -> Self {
        let a = 1.0 / (in_features.max(1) as f64).sqrt();
        Linear {
            weight: init::uniform(key, &[out_features, in_features], -a, a, dtype),
            bias: bias.then(|| ct::zeros(&[out_features], dtype)),
            lora: None,
        }
    }

    /// Apply to `x` of shape `[..., in]`, giving `[..., out]`. Panics unless `x` is a float
    /// array whose last axis is `in_features`.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        let (out_f, in_f) = (self.weight.shape()[0], self.weight.shape()[1]);
        checks::float("Linear", INPUT, x);
        checks::last_axis("Linear", INPUT, x, "in_features", in_f);
        let lead = &x.shape()[..x.ndim() - 1];
        let mut shape = lead.to_vec();
        shape.push(out_f);
        let y = x.reshape_exact(&[lead.iter().product(), in_f]).matmul(&self.weight.t()).reshape_exact(&shape);
        let y = match &self.bias {
            Some(b) => y + b,
            None => y,
        };
        match &self.lora {
            Some(adapter) => adapter.forward(x, &y),
            None => y,
        }
    }
}

impl Module for Linear {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.visit_linear(self);
        v.param("weight", &mut self.weight);
        if let Some(b) = &mut self.bias {
            v.param("bias", b);
        }
        if let Some(adapter) = &mut self.lora {
            v.visit_adapter("lora_A", &mut adapter.a, false);
            v.visit_adapter("lora_B", &mut adapter.b, false);
        }
    }
}

/// A lookup table: integer ids `[...]` to vectors `[..., dim]`.
#[derive(Clone, Debug)]
pub struct Embedding {
    /// `[num_embeddings, dim]`.
    pub weight: Array,
}

impl Embedding {
    /// Rows drawn from `N(0, 1)` (as PyTorch).
    pub fn new(key: &Array, num_embeddings: usize, dim: usize, dtype: DType) -> Self {
        Embedding { weight: init::normal(key, &[num_embeddings, dim], 0.0, 1.0, dtype) }
    }

    /// The rows of `ids` (an integer array of any shape). Panics unless `ids` has an integer
    /// dtype; ids outside `[-num_embeddings, num_embeddings)` make the evaluation fail.
    #[track_caller]
    pub fn forward(&self, ids: &Array) -> Array {
        checks::integer("Embedding", ("ids", "ids"), ids);
        self.weight.take(ids, 0)
    }

    /// Use the table as an output projection (weight tying): `x Wᵀ`, `[..., dim] -> [..., num]`.
    /// Panics unless `x` is a float array whose last axis is `dim`.
    #[track_caller]
    pub fn as_linear(&self, x: &Array) -> Array {
        checks::float("Embedding::as_linear", INPUT, x);
        checks::last_axis("Embedding::as_linear", INPUT, x, "dim", self.weight.shape()[1]);
        Linear { weight: self.weight.clone(), bias: None, lora: None }.forward(x)
    }
}

impl Module for Embedding {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.param("weight", &mut self.weight);
    }
}

/// Layer normalisation over the last axis: `(x - mean) / sqrt(var + eps) * weight + bias`.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    /// Scale `[dim]` (ones at init), if affine.
    pub weight: Option<Array>,
    /// Shift `[dim]` (zeros at init), if affine.
    pub bias: Option<Array>,
    /// Added to the variance.
    pub eps: f64,
}

impl LayerNorm {
    /// A layer norm over `dim` features, with learnable scale and shift if `affine`.
    pub fn new(dim: usize, eps: f64, affine: bool, dtype: DType) -> Self {
        LayerNorm {
            weight: affine.then(|| ct::ones(&[dim], dtype)),
            bias: affine.then(|| ct::zeros(&[dim], dtype)),
            eps,
        }
    }

    /// Normalise `x` over its last axis. Panics unless `x` is a float array whose last axis
    /// is the layer's `dim` (any last axis without affine parameters).
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        checks::float("LayerNorm", INPUT, x);
        match &self.weight {
            Some(w) => checks::last_axis("LayerNorm", INPUT, x, "dim", w.size()),
            None => checks::rank_at_least("LayerNorm", INPUT, x, 1),
        }
        let mean = x.mean(&[-1], true);
        let xc = x - &mean;
        let var = xc.square().mean(&[-1], true);
        let mut y = xc * (var + self.eps).rsqrt();
        if let Some(w) = &self.weight {
            y = y * w;
        }
        if let Some(b) = &self.bias {
            y = y + b;
        }
        y
    }
}

impl Module for LayerNorm {
    fn visit(&mut self, v: &mut dyn Visitor) {
        if let Some(w) = &mut self.weight {
            v.param("weight", w);
        }
        if let Some(b) = &mut self.bias {
            v.param("bias", b);
        }
    }
}

/// Root-mean-square normalisation over the last axis: `x / sqrt(mean(x²) + eps) * weight`.
#[derive(Clone, Debug)]
pub struct RMSNorm {
    /// Scale `[dim]`, ones at init.
    pub weight: Array,
    /// Added to the mean square.
    pub eps: f64,
}

impl RMSNorm {
    /// An RMS norm over `dim` features.
    pub fn new(dim: usize, eps: f64, dtype: DType) -> Self {
        RMSNorm { weight: ct::ones(&[dim], dtype), eps }
    }

    /// Normalise `x` over its last axis. Panics unless `x` is a float array whose last axis
    /// is the layer's `dim`.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        checks::float("RMSNorm", INPUT, x);
        checks::last_axis("RMSNorm", INPUT, x, "dim", self.weight.size());
        x * (x.square().mean(&[-1], true) + self.eps).rsqrt() * &self.weight
    }
}

impl Module for RMSNorm {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.param("weight", &mut self.weight);
    }
}

/// Inverted dropout: during training each element is zeroed with probability `p` and the
/// survivors are scaled by `1 / (1 - p)`. The random key is explicit; without one (evaluation)
/// the layer is the identity.
#[derive(Clone, Debug)]
pub struct Dropout {
    /// Drop probability in `[0, 1)`.
    pub p: f64,
}

impl Dropout {
    /// A dropout layer. Panics unless `0 <= p < 1`.
    #[track_caller]
    pub fn new(p: f64) -> Self {
        assert!((0.0..1.0).contains(&p), "Dropout expects a drop probability p in [0, 1), but got p = {p}");
        Dropout { p }
    }

    /// Apply with `key` (training) or without (evaluation: identity).
    #[track_caller]
    pub fn forward(&self, x: &Array, key: Option<&Array>) -> Array {
        match key {
            Some(k) if self.p > 0.0 => {
                let keep = ct::random::bernoulli(k, 1.0 - self.p, x.shape());
                ct::select(&keep, x * (1.0 / (1.0 - self.p)), 0.0)
            }
            _ => x.clone(),
        }
    }
}

impl Module for Dropout {
    fn visit(&mut self, _v: &mut dyn Visitor) {}
}

/// An element-wise activation function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// [`activations::relu`].
    Relu,
    /// [`activations::gelu`].
    Gelu,
    /// [`activations::silu`].
    Silu,
    /// `tanh`.
    Tanh,
}

impl Activation {
    /// Apply the activation.
    #[track_caller]
    pub fn apply(self, x: &Array) -> Array {
        match self {
            Activation::Relu => activations::relu(x),
            Activation::Gelu => activations::gelu(x),
            Activation::Silu => activations::silu(x),
            Activation::Tanh => x.tanh(),
        }
    }
}

/// Two-layer perceptron `fc2(act(fc1(x)))`.
#[derive(Clone, Debug)]
pub struct Mlp {
    /// `dim -> hidden`.
    pub fc1: Linear,
    /// `hidden -> dim`.
    pub fc2: Linear,
    /// Between the two.
    pub activation: Activation,
}

impl Mlp {
    /// An MLP `dim -> hidden -> dim` with biases.
    pub fn new(key: &Array, dim: usize, hidden: usize, activation: Activation, dtype: DType) -> Self {
        let (k1, k2) = ct::random::split2(key);
        Mlp {
            fc1: Linear::new(&k1, dim, hidden, true, dtype),
            fc2: Linear::new(&k2, hidden, dim, true, dtype),
            activation,
        }
    }

    /// Apply to `[..., dim]`. Panics unless `x` is a float array whose last axis is `dim`.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        checks::float("Mlp", INPUT, x);
        checks::last_axis("Mlp", INPUT, x, "dim", self.fc1.weight.shape()[1]);
        self.fc2.forward(&self.activation.apply(&self.fc1.forward(x)))
    }
}

impl Module for Mlp {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("fc1", &mut self.fc1);
        v.child("fc2", &mut self.fc2);
    }
}

/// Causal multi-head self-attention: `softmax(q kᵀ / √d_head + mask) v` per head, with
/// query/key/value/output projections (no biases).
#[derive(Clone, Debug)]
pub struct MultiHeadAttention {
    /// `dim -> dim`.
    pub q_proj: Linear,
    /// `dim -> dim`.
    pub k_proj: Linear,
    /// `dim -> dim`.
    pub v_proj: Linear,
    /// `dim -> dim`.
    pub o_proj: Linear,
    /// Number of heads (divides `dim`).
    pub num_heads: usize,
}

impl MultiHeadAttention {
    /// Attention over `dim` features split into `num_heads` heads. Panics unless
    /// `num_heads` divides `dim`.
    #[track_caller]
    pub fn new(key: &Array, dim: usize, num_heads: usize, dtype: DType) -> Self {
        assert!(
            num_heads > 0 && dim.is_multiple_of(num_heads),
            "MultiHeadAttention expects num_heads to divide dim, but got num_heads = {num_heads} and dim = {dim}"
        );
        let k = ct::random::split_keys(key, 4);
        let lin = |i: usize| Linear::new(&k[i], dim, dim, false, dtype);
        MultiHeadAttention { q_proj: lin(0), k_proj: lin(1), v_proj: lin(2), o_proj: lin(3), num_heads }
    }

    /// Apply to `x` of shape `[batch, time, dim]`; position `t` attends to positions `<= t`.
    /// Panics unless `x` is a float array of that shape.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        checks::float("MultiHeadAttention", INPUT, x);
        checks::rank("MultiHeadAttention", INPUT, x, 3, "[batch, time, dim]");
        checks::last_axis("MultiHeadAttention", INPUT, x, "dim", self.q_proj.weight.shape()[1]);
        let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let h = self.num_heads;
        let heads = |y: Array| y.reshape_exact(&[b, t, h, d / h]).transpose(&[0, 2, 1, 3]);
        let q = heads(self.q_proj.forward(x));
        let k = heads(self.k_proj.forward(x));
        let v = heads(self.v_proj.forward(x));
        let scores = q.matmul(&k.swapaxes(-1, -2)) * (1.0 / ((d / h) as f64).sqrt());
        let causal = ct::tri(t, t, 0, DType::Bool).to_device(x.device());
        let scores = ct::select(&causal, &scores, f64::NEG_INFINITY);
        let attn = activations::softmax(&scores, -1);
        let y = attn.matmul(&v).transpose(&[0, 2, 1, 3]).reshape_exact(&[b, t, d]);
        self.o_proj.forward(&y)
    }
}

impl Module for MultiHeadAttention {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("q_proj", &mut self.q_proj);
        v.child("k_proj", &mut self.k_proj);
        v.child("v_proj", &mut self.v_proj);
        v.child("o_proj", &mut self.o_proj);
    }
}
