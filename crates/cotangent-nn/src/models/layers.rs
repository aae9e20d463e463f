//! The decoder blocks of Qwen3-Next / Qwen3.5 as transformers computes them: gated full
//! attention, the Gated DeltaNet in both projection layouts (with a cache), the sparse MoE
//! block, and the decoder layer around them.
use super::cache::{AttentionCache, LayerCache, LinearCache};
use super::config::{LayerType, ModelConfig};
use crate::gated_delta::{gated_delta_recurrent, segment_function, RecurrenceMode};
use crate::qwen3_next::{
    compute_dtype, l2norm, CausalDepthwiseConv1d, Qwen3NextConfig, Qwen3NextGatedDeltaNet, Qwen3NextMlp,
    Qwen3NextRMSNorm, Qwen3NextRMSNormGated,
};
use crate::{activations, init, Linear, Module, Visitor};
use cotangent::{self as ct, Array, DType, Result};

/// Rotary position embedding of the first `rotary_dim` dimensions of each head (transformers'
/// default rope with `partial_rotary_factor`; Qwen3.5's multimodal rope is the same for text,
/// where all three position axes are equal).
#[derive(Clone, Debug)]
pub struct Rotary {
    /// `1 / theta^(2i / rotary_dim)`, computed in f32 as transformers does.
    pub inv_freq: Vec<f32>,
}

impl Rotary {
    /// The frequencies for `rotary_dim` dimensions and base `theta`.
    pub fn new(rotary_dim: usize, theta: f64) -> Self {
        let inv_freq =
            (0..rotary_dim / 2).map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / rotary_dim as f32)).collect();
        Rotary { inv_freq }
    }

    /// Rotating dimensions.
    pub fn dim(&self) -> usize {
        2 * self.inv_freq.len()
    }

    /// `cos` and `sin` of positions `offset..offset + t`, `[t, rotary_dim]` each, in `dtype`.
    fn cos_sin(&self, offset: usize, t: usize, like: &Array) -> (Array, Array) {
        let d = self.dim();
        let (mut cos, mut sin) = (Vec::with_capacity(t * d), Vec::with_capacity(t * d));
        for p in offset..offset + t {
            for half in 0..2 {
                let _ = half;
                for f in &self.inv_freq {
                    let angle = (p as f32 * f) as f64;
                    cos.push(angle.cos() as f32);
                    sin.push(angle.sin() as f32);
                }
            }
        }
        let to = |v: Vec<f32>| Array::from_vec(v, &[t, d]).astype(like.dtype()).to_device(like.device());
        (to(cos), to(sin))
    }

    /// Rotate the first `rotary_dim` dimensions of `x: [B, H, T, head_dim]`.
    fn apply(&self, x: &Array, cos: &Array, sin: &Array) -> Array {
        let d = self.dim() as isize;
        if d == 0 {
            return x.clone();
        }
        let (rot, pass) = (x.slice_axis(-1, None, Some(d), 1), x.slice_axis(-1, Some(d), None, 1));
        let (x1, x2) = (rot.slice_axis(-1, None, Some(d / 2), 1), rot.slice_axis(-1, Some(d / 2), None, 1));
        let rotated = ct::concatenate(&[-&x2, x1], -1);
        let embedded = &rot * cos + rotated * sin;
        if pass.shape()[pass.ndim() - 1] == 0 {
            embedded
        } else {
            ct::concatenate(&[embedded, pass], -1)
        }
    }
}

/// transformers' `Qwen3NextAttention` (also Qwen3.5's): `q_proj` gives query and gate per
/// head, per-head zero-centred q/k norms, partial rotary, grouped key/value heads, softmax in
/// f32, and `o_proj(attention · sigmoid(gate))`.
#[derive(Clone, Debug)]
pub struct Attention {
    /// `hidden -> heads · head_dim · 2` (query and gate interleaved per head).
    pub q_proj: Linear,
    /// `hidden -> kv_heads · head_dim`.
    pub k_proj: Linear,
    /// `hidden -> kv_heads · head_dim`.
    pub v_proj: Linear,
    /// `heads · head_dim -> hidden`.
    pub o_proj: Linear,
    /// Norm of each query head.
    pub q_norm: Qwen3NextRMSNorm,
    /// Norm of each key head.
    pub k_norm: Qwen3NextRMSNorm,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
    /// Width per head.
    pub head_dim: usize,
    /// Rotary positions.
    pub rotary: Rotary,
}

impl Attention {
    /// An attention block of `config`'s sizes with PyTorch's default init.
    pub fn new(key: &Array, c: &ModelConfig, dtype: DType) -> Self {
        let k = ct::random::split_keys(key, 4);
        let (h, kv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let bias = c.attention_bias;
        Attention {
            q_proj: Linear::new(&k[0], c.hidden_size, h * hd * 2, bias, dtype),
            k_proj: Linear::new(&k[1], c.hidden_size, kv * hd, bias, dtype),
            v_proj: Linear::new(&k[2], c.hidden_size, kv * hd, bias, dtype),
            o_proj: Linear::new(&k[3], h * hd, c.hidden_size, bias, dtype),
            q_norm: Qwen3NextRMSNorm::new(hd, c.rms_norm_eps, dtype),
            k_norm: Qwen3NextRMSNorm::new(hd, c.rms_norm_eps, dtype),
            num_heads: h,
            num_kv_heads: kv,
            head_dim: hd,
            rotary: Rotary::new(c.rotary_dim(), c.rope_theta),
        }
    }

    /// Apply to `x: [B, T, hidden]` at positions `offset..offset + T`; with a cache, the new
    /// keys and values are appended to it and the queries attend to all of them.
    pub fn forward(&self, x: &Array, offset: usize, cache: Option<&mut AttentionCache>) -> Array {
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (h, kv, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let heads_first = |y: Array, n: usize| y.reshape_exact(&[b, t, n, hd]).transpose(&[0, 2, 1, 3]);
        let qg = self.q_proj.forward(x).reshape_exact(&[b, t, h, 2 * hd]);
        let [q, gate]: [Array; 2] = qg.split(2, -1).try_into().expect("two pieces");
        let gate = gate.reshape_exact(&[b, t, h * hd]);
        let q = self.q_norm.forward(&q).transpose(&[0, 2, 1, 3]);
        let k = heads_first(self.k_norm.forward(&self.k_proj.forward(x).reshape_exact(&[b, t, kv, hd])), kv);
        let v = heads_first(self.v_proj.forward(x), kv);
        let (cos, sin) = self.rotary.cos_sin(offset, t, &q);
        let (q, k) = (self.rotary.apply(&q, &cos, &sin), self.rotary.apply(&k, &cos, &sin));
        let (k, v) = match cache {
            Some(c) => c.append(k, v),
            None => (k, v),
        };
        let s = k.shape()[2];
        let (k, v) = (k.repeat(h / kv, 1), v.repeat(h / kv, 1));
        let scores = q.matmul(&k.swapaxes(-1, -2)) * (1.0 / (hd as f64).sqrt());
        let scores = if t > 1 || s != offset + t {
            // query i (position offset + i) sees keys 0..=offset + i
            let start = s - t; // the queries' first position within the keys
            let mask: Vec<bool> = (0..t * s).map(|ij| ij % s <= start + ij / s).collect();
            let mask = Array::from_vec(mask, &[t, s]).to_device(x.device());
            ct::select(&mask, &scores, f64::from(f32::MIN))
        } else {
            scores
        };
        let probs = scores.astype(compute_dtype(q.dtype())).softmax(&[-1]).astype(q.dtype());
        let out = probs.matmul(&v).transpose(&[0, 2, 1, 3]).reshape_exact(&[b, t, h * hd]);
        self.o_proj.forward(&(out * gate.sigmoid()))
    }
}

impl Module for Attention {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("q_proj", &mut self.q_proj);
        v.child("k_proj", &mut self.k_proj);
        v.child("v_proj", &mut self.v_proj);
        v.child("o_proj", &mut self.o_proj);
        v.child("q_norm", &mut self.q_norm);
        v.child("k_norm", &mut self.k_norm);
    }
}

/// transformers' `Qwen3_5GatedDeltaNet`: the Gated DeltaNet with separate projections
/// `in_proj_qkv` (`[q | k | v]`, not interleaved), `in_proj_z`, `in_proj_b` and `in_proj_a`.
#[derive(Clone, Debug)]
pub struct Qwen3_5GatedDeltaNet {
    /// Sizes.
    pub config: Qwen3NextConfig,
    /// Depthwise causal convolution over q, k and v.
    pub conv1d: CausalDepthwiseConv1d,
    /// `hidden -> 2·key_dim + value_dim`.
    pub in_proj_qkv: Linear,
    /// `hidden -> value_dim`, the output gate.
    pub in_proj_z: Linear,
    /// `hidden -> value heads`, the write strength logits.
    pub in_proj_b: Linear,
    /// `hidden -> value heads`, the decay inputs.
    pub in_proj_a: Linear,
    /// `[value heads]`.
    pub dt_bias: Array,
    /// `[value heads]`, checkpoint name `A_log`.
    pub a_log: Array,
    /// Gated RMS norm over the value head width.
    pub norm: Qwen3NextRMSNormGated,
    /// `value_dim -> hidden`.
    pub out_proj: Linear,
}

impl Qwen3_5GatedDeltaNet {
    /// A layer with PyTorch's default init (as [`Qwen3NextGatedDeltaNet::new`]).
    pub fn new(key: &Array, c: Qwen3NextConfig, dtype: DType) -> Self {
        let k = ct::random::split_keys(key, 7);
        let hv = c.linear_num_value_heads;
        Qwen3_5GatedDeltaNet {
            config: c,
            conv1d: CausalDepthwiseConv1d::new(&k[0], c.conv_dim(), c.linear_conv_kernel_dim, dtype),
            in_proj_qkv: Linear::new(&k[1], c.hidden_size, c.conv_dim(), false, dtype),
            in_proj_z: Linear::new(&k[2], c.hidden_size, c.value_dim(), false, dtype),
            in_proj_b: Linear::new(&k[3], c.hidden_size, hv, false, dtype),
            in_proj_a: Linear::new(&k[4], c.hidden_size, hv, false, dtype),
            dt_bias: ct::ones(&[hv], dtype),
            a_log: init::uniform(&k[5], &[hv], 0.01, 16.0, DType::F32).log().astype(dtype),
            norm: Qwen3NextRMSNormGated::new(c.linear_value_head_dim, c.rms_norm_eps, dtype),
            out_proj: Linear::new(&k[6], c.value_dim(), c.hidden_size, false, dtype),
        }
    }
}

impl Module for Qwen3_5GatedDeltaNet {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("conv1d", &mut self.conv1d);
        v.child("in_proj_qkv", &mut self.in_proj_qkv);
        v.child("in_proj_z", &mut self.in_proj_z);
        v.child("in_proj_b", &mut self.in_proj_b);
        v.child("in_proj_a", &mut self.in_proj_a);
        v.param("dt_bias", &mut self.dt_bias);
        v.param("A_log", &mut self.a_log);
        v.child("norm", &mut self.norm);
        v.child("out_proj", &mut self.out_proj);
    }
}

/// A Gated DeltaNet token mixer in either checkpoint layout.
#[derive(Clone, Debug)]
pub enum LinearAttention {
    /// Qwen3-Next's fused, per-key-head interleaved `in_proj_qkvz` / `in_proj_ba`.
    Fused(Qwen3NextGatedDeltaNet),
    /// Qwen3.5's split `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`.
    Split(Qwen3_5GatedDeltaNet),
}

/// The pieces both layouts share after projecting.
struct Shared<'a> {
    config: &'a Qwen3NextConfig,
    conv1d: &'a CausalDepthwiseConv1d,
    dt_bias: &'a Array,
    a_log: &'a Array,
    norm: &'a Qwen3NextRMSNormGated,
    out_proj: &'a Linear,
}

impl LinearAttention {
    fn shared(&self) -> Shared<'_> {
        match self {
            LinearAttention::Fused(l) => Shared {
                config: &l.config,
                conv1d: &l.conv1d,
                dt_bias: &l.dt_bias,
                a_log: &l.a_log,
                norm: &l.norm,
                out_proj: &l.out_proj,
            },
            LinearAttention::Split(l) => Shared {
                config: &l.config,
                conv1d: &l.conv1d,
                dt_bias: &l.dt_bias,
                a_log: &l.a_log,
                norm: &l.norm,
                out_proj: &l.out_proj,
            },
        }
    }

    /// `(mixed q|k|v [B, T, conv_dim], z [B, T, Hv, dv], b [B, T, Hv], a [B, T, Hv])`.
    fn project(&self, x: &Array) -> (Array, Array, Array, Array) {
        let (b, t) = (x.shape()[0], x.shape()[1]);
        match self {
            LinearAttention::Fused(l) => {
                let c = &l.config;
                let (hk, hv, dk, dv) =
                    (c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim);
                let r = c.value_heads_per_key_head();
                let at = |i: usize| i as isize;
                let qkvz = l.in_proj_qkvz.forward(x).reshape_exact(&[b, t, hk, 2 * dk + 2 * r * dv]);
                let [q, k, v, z]: [Array; 4] =
                    qkvz.split([at(dk), at(2 * dk), at(2 * dk + r * dv)], -1).try_into().expect("four pieces");
                let ba = l.in_proj_ba.forward(x).reshape_exact(&[b, t, hk, 2 * r]);
                let [bl, a]: [Array; 2] = ba.split(2, -1).try_into().expect("two pieces");
                let mixed = ct::concatenate(
                    &[
                        q.reshape_exact(&[b, t, c.key_dim()]),
                        k.reshape_exact(&[b, t, c.key_dim()]),
                        v.reshape_exact(&[b, t, c.value_dim()]),
                    ],
                    -1,
                );
                (mixed, z.reshape_exact(&[b, t, hv, dv]), bl.reshape_exact(&[b, t, hv]), a.reshape_exact(&[b, t, hv]))
            }
            LinearAttention::Split(l) => {
                let c = &l.config;
                (
                    l.in_proj_qkv.forward(x),
                    l.in_proj_z.forward(x).reshape_exact(&[b, t, c.linear_num_value_heads, c.linear_value_head_dim]),
                    l.in_proj_b.forward(x),
                    l.in_proj_a.forward(x),
                )
            }
        }
    }

    /// Apply to `x: [B, T, hidden]`. With a cache, the convolution continues from the cached
    /// inputs and the rule from the cached state (one recurrent step when `T = 1`), and both
    /// are replaced by their values after the last step.
    pub fn forward(&self, x: &Array, cache: Option<&mut LinearCache>) -> Result<Array> {
        let p = self.shared();
        let c = p.config;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (hk, hv, dk, dv) =
            (c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim);
        let kernel = c.linear_conv_kernel_dim;
        let (mixed, z, b_logits, a) = self.project(x);

        // the short convolution, continuing from the cached last K-1 inputs
        let channels = c.conv_dim();
        let prev = cache
            .as_ref()
            .and_then(|c| c.conv.clone())
            .unwrap_or_else(|| ct::zeros(&[b, kernel - 1, channels], mixed.dtype()).to_device(x.device()));
        let padded = ct::concatenate(&[prev, mixed.clone()], 1); // [B, K-1+T, C]
        let w = p.conv1d.weight.reshape_exact(&[channels, kernel]).astype(mixed.dtype()).t(); // [K, C]
        let conv = (0..kernel as isize)
            .map(|m| padded.slice_axis(1, Some(m), Some(m + t as isize), 1) * w.slice_axis(0, Some(m), Some(m + 1), 1))
            .reduce(|a, b| a + b)
            .expect("kernel > 0");
        let new_conv = padded.slice_axis(1, Some(t as isize), None, 1);
        let mixed = activations::silu(&conv);
        let at = |i: usize| i as isize;
        let [q, k, v]: [Array; 3] =
            mixed.split([at(c.key_dim()), at(2 * c.key_dim())], -1).try_into().expect("three pieces");

        let beta = b_logits.sigmoid();
        // f32 for f16 / bf16 layers, the layer's dtype otherwise
        let cdt = compute_dtype(x.dtype());
        let up = |y: &Array| y.astype(cdt);
        let log_g = -up(p.a_log).exp() * activations::softplus(&(up(&a) + up(p.dt_bias)));
        let heads_first = |y: &Array, heads: usize, d: usize| {
            up(&y.reshape_exact(&[b, t, heads, d]).repeat(hv / heads, 2).transpose(&[0, 2, 1, 3]))
        };
        let q = l2norm(&heads_first(&q, hk, dk), 1e-6) * (1.0 / (dk as f64).sqrt());
        let k = l2norm(&heads_first(&k, hk, dk), 1e-6);
        let v = heads_first(&v, hv, dv);
        let beta = up(&beta).transpose(&[0, 2, 1]);
        let log_g = up(&log_g).transpose(&[0, 2, 1]);
        let s0 = cache
            .as_ref()
            .and_then(|c| c.state.clone())
            .unwrap_or_else(|| ct::zeros(&[b, hv, dk, dv], cdt).to_device(x.device()));
        let (core, state) = if t == 1 {
            recurrent_step(&q, &k, &v, &log_g, &beta, &s0)
        } else if cache.is_none() && c.recurrence == RecurrenceMode::Recurrent {
            // op by op from the zero state (no cache wants the final state)
            (gated_delta_recurrent(&q, &k, &v, &log_g, &beta), s0)
        } else {
            chunked(&q, &k, &v, &log_g, &beta, &s0, 64)?
        };
        if let Some(cache) = cache {
            cache.conv = Some(new_conv);
            cache.state = Some(state);
        }
        let core = core.transpose(&[0, 2, 1, 3]).astype(x.dtype()); // [B, T, Hv, dv]
        let gated = p.norm.forward(&core, &z);
        Ok(p.out_proj.forward(&gated.reshape_exact(&[b, t, c.value_dim()])))
    }
}

impl Module for LinearAttention {
    fn visit(&mut self, v: &mut dyn Visitor) {
        match self {
            LinearAttention::Fused(l) => l.visit(v),
            LinearAttention::Split(l) => l.visit(v),
        }
    }
}

/// One step of the gated delta rule from state `s0: [B, H, dk, dv]`; `q, k: [B, H, 1, dk]`,
/// `v: [B, H, 1, dv]`, `log_g, beta: [B, H, 1]`. Returns `(y [B, H, 1, dv], state)`.
fn recurrent_step(q: &Array, k: &Array, v: &Array, log_g: &Array, beta: &Array, s0: &Array) -> (Array, Array) {
    let g = log_g.exp().expand_dims(&[-1]); // [B, H, 1, 1]
    let b = beta.expand_dims(&[-1]);
    let s = s0 * g;
    let delta = (v - k.matmul(&s)) * b; // [B, H, 1, dv]
    let s = s + k.swapaxes(-1, -2).matmul(&delta);
    (q.matmul(&s), s)
}

/// The chunked rule from state `s0` (segments of [`crate::gated_delta::SEGMENT_STEPS`] steps,
/// each a recomputing custom function), returning the outputs and the final state.
#[allow(clippy::too_many_arguments)]
fn chunked(
    q: &Array,
    k: &Array,
    v: &Array,
    log_g: &Array,
    beta: &Array,
    s0: &Array,
    chunk: usize,
) -> Result<(Array, Array)> {
    let (b, h, t, dk) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let dv = v.shape()[3];
    let f = segment_function();
    let per_segment = (crate::gated_delta::SEGMENT_STEPS / chunk).max(1);
    let whole = t / chunk;
    let mut segments: Vec<(usize, usize, usize)> =
        (0..whole).step_by(per_segment).map(|c0| (c0 * chunk, per_segment.min(whole - c0), chunk)).collect();
    if t % chunk != 0 {
        segments.push((whole * chunk, 1, t % chunk));
    }
    let mut s = s0.clone();
    let mut ys = Vec::with_capacity(segments.len());
    for (start, n, c) in segments {
        let (from, to) = (Some(start as isize), Some((start + n * c) as isize));
        let steps = |x: &Array, d: Option<usize>| {
            let shape: Vec<usize> = [b, h, n, c].into_iter().chain(d).collect();
            x.slice_axis(2, from, to, 1).reshape_exact(&shape)
        };
        let out =
            f(&[steps(q, Some(dk)), steps(k, Some(dk)), steps(v, Some(dv)), steps(log_g, None), steps(beta, None), s])?;
        ys.push(out[0].reshape_exact(&[b, h, n * c, dv]));
        s = out[1].clone();
    }
    let y = if ys.len() == 1 { ys.pop().expect("one") } else { ct::concatenate(&ys, 2) };
    Ok((y, s))
}

/// transformers' `Qwen3NextSparseMoeBlock` (also Qwen3.5-MoE's): a softmax router over
/// `experts`, the top `top_k` per token (renormalised if `norm_topk_prob`), each expert applied
/// only to the tokens routed to it (gathered, one product per expert, scattered back), plus a
/// shared expert scaled by `sigmoid(shared_expert_gate(x))`.
#[derive(Clone, Debug)]
pub struct SparseMoe {
    /// The router, `hidden -> experts` (checkpoint name `gate`).
    pub gate: Linear,
    /// The routed experts (`experts.{e}.{gate,up,down}_proj`).
    pub experts: Vec<Qwen3NextMlp>,
    /// The expert every token goes through.
    pub shared_expert: Qwen3NextMlp,
    /// `hidden -> 1`, the shared expert's gate.
    pub shared_expert_gate: Linear,
    /// Experts per token.
    pub top_k: usize,
    /// Renormalise the top-k probabilities.
    pub norm_topk_prob: bool,
}

impl SparseMoe {
    /// A block of `config`'s sizes with PyTorch's default init.
    pub fn new(key: &Array, c: &ModelConfig, dtype: DType) -> Self {
        let k = ct::random::split_keys(key, c.num_experts + 3);
        SparseMoe {
            gate: Linear::new(&k[0], c.hidden_size, c.num_experts, false, dtype),
            experts: (0..c.num_experts)
                .map(|e| Qwen3NextMlp::new(&k[3 + e], c.hidden_size, c.moe_intermediate_size, dtype))
                .collect(),
            shared_expert: Qwen3NextMlp::new(&k[1], c.hidden_size, c.shared_expert_intermediate_size, dtype),
            shared_expert_gate: Linear::new(&k[2], c.hidden_size, 1, false, dtype),
            top_k: c.num_experts_per_tok,
            norm_topk_prob: c.norm_topk_prob,
        }
    }

    /// The top-k experts of each token (descending probability, ties to the lower index) from
    /// router probabilities `[N, E]` read back to the host.
    fn route(&self, probs: &Array) -> Result<Vec<Vec<usize>>> {
        let (n, e) = (probs.shape()[0], probs.shape()[1]);
        let values = ct::stop_gradient(probs).astype(DType::F64).to_vec::<f64>()?;
        Ok((0..n)
            .map(|i| {
                let row = &values[i * e..(i + 1) * e];
                let mut order: Vec<usize> = (0..e).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                order.truncate(self.top_k);
                order
            })
            .collect())
    }

    /// Apply to `x: [B, T, hidden]`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let shape = x.shape().to_vec();
        let hidden = shape[shape.len() - 1];
        let n = x.size() / hidden;
        let k = self.top_k;
        let xf = x.reshape_exact(&[n, hidden]);
        let logits = self.gate.forward(&xf);
        let probs = logits.astype(compute_dtype(logits.dtype())).softmax(&[-1]);
        let chosen = self.route(&probs)?;
        let flat_idx: Vec<i32> = chosen.iter().flatten().map(|&e| e as i32).collect();
        let idx = Array::from_vec(flat_idx, &[n, k]).to_device(x.device());
        let mut top = probs.take_along_axis(&idx, -1); // [N, k]
        if self.norm_topk_prob {
            top = &top / top.sum(&[-1], true);
        }
        let top = top.astype(logits.dtype()).reshape_exact(&[n * k]);

        // group (token, slot) pairs by expert
        let mut tokens: Vec<Vec<i32>> = vec![Vec::new(); self.experts.len()];
        let mut slots: Vec<Vec<i32>> = vec![Vec::new(); self.experts.len()];
        for (tok, experts) in chosen.iter().enumerate() {
            for (slot, &e) in experts.iter().enumerate() {
                tokens[e].push(tok as i32);
                slots[e].push((tok * k + slot) as i32);
            }
        }
        let (mut all_tokens, mut outputs) = (Vec::new(), Vec::new());
        for (e, expert) in self.experts.iter().enumerate() {
            if tokens[e].is_empty() {
                continue;
            }
            let m = tokens[e].len();
            let tok = Array::from_vec(tokens[e].clone(), &[m]).to_device(x.device());
            let slot = Array::from_vec(slots[e].clone(), &[m]).to_device(x.device());
            let y = expert.forward(&xf.take(&tok, 0)) * top.take(&slot, 0).expand_dims(&[-1]);
            outputs.push(y);
            all_tokens.extend_from_slice(&tokens[e]);
        }
        let mut routed = ct::zeros(&[n, hidden], x.dtype()).to_device(x.device());
        if !outputs.is_empty() {
            let m = all_tokens.len();
            let idx = Array::from_vec(all_tokens, &[m]).to_device(x.device());
            routed = routed.scatter_add(&idx, &ct::concatenate(&outputs, 0), 0);
        }
        let shared = self.shared_expert.forward(&xf) * self.shared_expert_gate.forward(&xf).sigmoid();
        Ok((routed + shared).reshape_exact(&shape))
    }
}

impl Module for SparseMoe {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("gate", &mut self.gate);
        v.enter("experts");
        for (e, expert) in self.experts.iter_mut().enumerate() {
            v.child(&e.to_string(), expert);
        }
        v.leave();
        v.child("shared_expert", &mut self.shared_expert);
        v.child("shared_expert_gate", &mut self.shared_expert_gate);
    }
}

/// A decoder layer's token mixer.
#[derive(Clone, Debug)]
pub enum Mixer {
    /// `linear_attn`.
    Linear(LinearAttention),
    /// `self_attn`.
    Full(Attention),
}

/// A decoder layer's MLP.
#[derive(Clone, Debug)]
pub enum FeedForward {
    /// A dense SwiGLU MLP.
    Dense(Qwen3NextMlp),
    /// A sparse mixture of experts.
    Sparse(SparseMoe),
}

/// transformers' decoder layer: `h = x + mixer(input_layernorm(x))`,
/// `y = h + mlp(post_attention_layernorm(h))`.
#[derive(Clone, Debug)]
pub struct DecoderLayer {
    /// Norm before the mixer.
    pub input_layernorm: Qwen3NextRMSNorm,
    /// Gated DeltaNet or gated attention.
    pub mixer: Mixer,
    /// Norm before the MLP.
    pub post_attention_layernorm: Qwen3NextRMSNorm,
    /// Dense or sparse MLP.
    pub mlp: FeedForward,
}

impl DecoderLayer {
    /// Layer `i` of `config`, with PyTorch's default init.
    pub fn new(key: &Array, c: &ModelConfig, i: usize, dtype: DType) -> Self {
        let (k1, k2) = ct::random::split2(key);
        let lin = c.linear_attention();
        let mixer = match (c.layer_types[i], c.model_type) {
            (LayerType::FullAttention, _) => Mixer::Full(Attention::new(&k1, c, dtype)),
            (LayerType::LinearAttention, super::ModelType::Qwen3Next) => {
                Mixer::Linear(LinearAttention::Fused(Qwen3NextGatedDeltaNet::new(&k1, lin, dtype)))
            }
            (LayerType::LinearAttention, _) => {
                Mixer::Linear(LinearAttention::Split(Qwen3_5GatedDeltaNet::new(&k1, lin, dtype)))
            }
        };
        let mlp = if c.is_sparse_layer(i) {
            FeedForward::Sparse(SparseMoe::new(&k2, c, dtype))
        } else {
            FeedForward::Dense(Qwen3NextMlp::new(&k2, c.hidden_size, c.intermediate_size, dtype))
        };
        DecoderLayer {
            input_layernorm: Qwen3NextRMSNorm::new(c.hidden_size, c.rms_norm_eps, dtype),
            mixer,
            post_attention_layernorm: Qwen3NextRMSNorm::new(c.hidden_size, c.rms_norm_eps, dtype),
            mlp,
        }
    }

    /// Apply to `x: [B, T, hidden]` at positions `offset..offset + T`, with this layer's cache
    /// if any.
    #[track_caller]
    pub fn forward(&self, x: &Array, offset: usize, cache: Option<&mut LayerCache>) -> Result<Array> {
        let normed = self.input_layernorm.forward(x);
        let mixed = match (&self.mixer, cache) {
            (Mixer::Linear(l), None) => l.forward(&normed, None)?,
            (Mixer::Linear(l), Some(LayerCache::Linear(c))) => l.forward(&normed, Some(c))?,
            (Mixer::Full(a), None) => a.forward(&normed, offset, None),
            (Mixer::Full(a), Some(LayerCache::Attention(c))) => a.forward(&normed, offset, Some(c)),
            _ => panic!("cotangent_nn::models::DecoderLayer::forward: the cache is for the other layer type"),
        };
        let h = x + mixed;
        let normed = self.post_attention_layernorm.forward(&h);
        let out = match &self.mlp {
            FeedForward::Dense(m) => m.forward(&normed),
            FeedForward::Sparse(m) => m.forward(&normed)?,
        };
        Ok(&h + out)
    }
}

impl Module for DecoderLayer {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("input_layernorm", &mut self.input_layernorm);
        match &mut self.mixer {
            Mixer::Linear(l) => v.child("linear_attn", l),
            Mixer::Full(a) => v.child("self_attn", a),
        }
        v.child("post_attention_layernorm", &mut self.post_attention_layernorm);
        match &mut self.mlp {
            FeedForward::Dense(m) => v.child("mlp", m),
            FeedForward::Sparse(m) => v.child("mlp", m),
        }
    }
}
