//! The generation cache: one entry per decoder layer, by layer type.
use cotangent::{self as ct, Array};

/// Keys and values of a full-attention layer, `[B, kv_heads, seen, head_dim]` each.
#[derive(Clone, Debug, Default)]
pub struct AttentionCache {
    /// Keys after the norm and rotary, or `None` before the first call.
    pub keys: Option<Array>,
    /// Values, or `None` before the first call.
    pub values: Option<Array>,
}

impl AttentionCache {
    /// Append new keys and values along time; returns all of them.
    pub fn append(&mut self, k: Array, v: Array) -> (Array, Array) {
        let (k, v) = match (self.keys.take(), self.values.take()) {
            (Some(k0), Some(v0)) => (ct::concatenate(&[k0, k], 2), ct::concatenate(&[v0, v], 2)),
            _ => (k, v),
        };
        self.keys = Some(k.clone());
        self.values = Some(v.clone());
        (k, v)
    }
}

/// The state of a Gated DeltaNet layer.
#[derive(Clone, Debug, Default)]
pub struct LinearCache {
    /// The last `kernel - 1` inputs of the convolution, `[B, kernel - 1, conv_dim]`.
    pub conv: Option<Array>,
    /// The recurrent state, `[B, value_heads, key_head_dim, value_head_dim]`, in f32 for f16 and
    /// bf16 models, in the model's dtype otherwise.
    pub state: Option<Array>,
}

/// One layer's cache.
#[derive(Clone, Debug)]
pub enum LayerCache {
    /// For a full-attention layer.
    Attention(AttentionCache),
    /// For a linear-attention layer.
    Linear(LinearCache),
}

/// The state of a whole model during generation: every layer's cache and the number of
/// positions already processed.
#[derive(Clone, Debug)]
pub struct Cache {
    /// One per decoder layer.
    pub layers: Vec<LayerCache>,
    /// Positions seen so far (the next token's position).
    pub offset: usize,
}

impl Cache {
    /// Evaluate every cached array (so that a long generation does not grow one graph).
    pub fn eval(&self) -> cotangent::Result<()> {
        let mut arrays = Vec::new();
        for l in &self.layers {
            match l {
                LayerCache::Attention(a) => arrays.extend(a.keys.iter().chain(a.values.iter()).cloned()),
                LayerCache::Linear(c) => arrays.extend(c.conv.iter().chain(c.state.iter()).cloned()),
            }
        }
        ct::eval(&arrays)
    }
}
