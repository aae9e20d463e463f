//! Whole Qwen3-Next and Qwen3.5 (dense and MoE) causal language models from a Hugging Face
//! folder: [`from_pretrained`] reads `config.json` and the (sharded) safetensors weights,
//! [`CausalLm`] computes logits and the causal-LM loss as transformers does, and
//! [`CausalLm::generate`] decodes with a per-layer cache ([`Cache`]).
//!
//! - `model_type` `qwen3_next`, `qwen3_5_text`, `qwen3_5_moe_text`, and the hub's composite
//!   `qwen3_5` / `qwen3_5_moe` (fields under `text_config`, weights under
//!   `model.language_model.*`; `mtp.*` and `model.visual.*` tensors are ignored);
//! - decoder layers by `layer_types` (or `full_attention_interval`): the Gated DeltaNet
//!   ([`crate::qwen3_next::Qwen3NextGatedDeltaNet`] for Qwen3-Next's fused projections,
//!   [`Qwen3_5GatedDeltaNet`] for Qwen3.5's split ones) or gated full attention
//!   ([`Attention`]); a dense MLP or a sparse MoE ([`SparseMoe`]: tokens grouped by expert);
//! - zero-centred RMS norms, tied or untied head.
//!
//! `tests/models.rs` checks logits, loss, every parameter gradient and greedy tokens against
//! folders written by transformers itself (`tests/models/gen_reference.py`).
//!
//! ```
//! use cotangent::{self as ct, Array, DType};
//! use cotangent_nn::models::{CausalLm, GenerationConfig, ModelConfig};
//! use cotangent_nn::Module;
//! let config = ModelConfig::from_json(r#"{"model_type": "qwen3_5_text", "vocab_size": 16,
//!   "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
//!   "num_key_value_heads": 1, "head_dim": 8, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
//!   "linear_key_head_dim": 4, "linear_value_head_dim": 4, "full_attention_interval": 2}"#).unwrap();
//! let model = CausalLm::new(&ct::random::key(0), config, DType::F32);
//! assert!(model.parameters().names().contains(&"model.layers.1.self_attn.q_proj.weight".to_string()));
//! let ids = Array::from_slice(&[1i64, 2, 3, 4, 5], &[1, 5]);
//! assert_eq!(model.logits(&ids).unwrap().shape(), &[1, 5, 16]);
//! let new = model.generate(&ids, &GenerationConfig::greedy(3)).unwrap();
//! assert_eq!(new.shape(), &[1, 3]);
//! ```
mod cache;
mod config;
mod layers;
mod weights;

pub use cache::{AttentionCache, Cache, LayerCache, LinearCache};
pub use config::{LayerType, ModelConfig, ModelType};
pub use layers::{
    Attention, DecoderLayer, FeedForward, LinearAttention, Mixer, Qwen3_5GatedDeltaNet, Rotary, SparseMoe,
};

use crate::losses::{cross_entropy, Reduction};
use crate::qwen3_next::Qwen3NextRMSNorm;
use crate::{Embedding, Linear, Module, RecurrenceMode, Visitor};
use cotangent::{self as ct, Array, DType, Error, Result};
use std::collections::HashMap;
use std::path::Path;

/// Load a Hugging Face folder (`config.json` plus `model.safetensors` or the shards of
/// `model.safetensors.index.json`) as a [`CausalLm`] whose parameters are in `dtype`.
///
/// Tensors are read one at a time and converted on load. A text `model_type` over weights
/// named `model.language_model.*` loads too (as transformers does). Every missing, unexpected or
/// mis-shaped tensor is named in one `Err`; a malformed file is an `Err`, never a panic.
/// `eos_token_id` of `generation_config.json` (else of `config.json`) gives the default stop
/// tokens.
pub fn from_pretrained(dir: impl AsRef<Path>, dtype: DType) -> Result<CausalLm> {
    let dir = dir.as_ref();
    let config_path = dir.join("config.json");
    let text =
        std::fs::read_to_string(&config_path).map_err(|e| Error::Io(format!("{}: {e}", config_path.display())))?;
    let mut config =
        ModelConfig::from_json(&text).map_err(|e| Error::Other(format!("{}: {e}", config_path.display())))?;
    let generation = dir.join("generation_config.json");
    if let Ok(text) = std::fs::read_to_string(&generation) {
        if let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(&text) {
            match obj.get("eos_token_id") {
                Some(serde_json::Value::Number(n)) => config.eos_token_ids = n.as_i64().into_iter().collect(),
                Some(serde_json::Value::Array(a)) => {
                    config.eos_token_ids = a.iter().filter_map(|v| v.as_i64()).collect()
                }
                _ => {}
            }
        }
    }
    let mut model = CausalLm::new(&ct::random::key(0), config, dtype);
    let params = model.parameters();
    let flat = params.flatten();
    let expected: weights::Expected = flat.iter().map(|(n, a)| (n.clone(), a.shape().to_vec())).collect();
    let files = weights::weight_files(dir)?;
    let tied = model.config.tie_word_embeddings;
    let composite = model.config.composite.is_some();
    let mut found = weights::load_tensors(&files, &expected, dtype, |name| {
        if name.starts_with("mtp.") || name.starts_with("model.visual.") || (tied && name == "lm_head.weight") {
            return None;
        }
        // a text-only config over a composite checkpoint (transformers drops `language_model.`)
        match name.strip_prefix("model.language_model.") {
            Some(rest) if !composite => Some(format!("model.{rest}")),
            _ => Some(name.to_string()),
        }
    })?;
    let leaves: Vec<Array> = flat.iter().map(|(n, _)| found.remove(n).expect("checked by load_tensors")).collect();
    model.update(&params.with_leaves(leaves)?)?;
    Ok(model)
}

/// A Qwen3-Next / Qwen3.5 causal language model: embedding, decoder layers, final norm, head.
///
/// Its [`Module`] parameter names are the checkpoint's (`model.embed_tokens.weight`,
/// `model.layers.{i}.…`, `model.norm.weight`, `lm_head.weight` unless tied; under
/// `model.language_model.` for composite folders).
#[derive(Clone, Debug)]
pub struct CausalLm {
    /// The configuration read from `config.json`.
    pub config: ModelConfig,
    /// Token embedding `[vocab, hidden]`.
    pub embed_tokens: Embedding,
    /// The decoder layers.
    pub layers: Vec<DecoderLayer>,
    /// Final zero-centred RMS norm.
    pub norm: Qwen3NextRMSNorm,
    /// The output head, `None` when tied to the embedding.
    pub lm_head: Option<Linear>,
    /// Recompute each decoder layer in the backward pass instead of keeping its activations
    /// (see [`CausalLm::set_gradient_checkpointing`]).
    pub gradient_checkpointing: bool,
}

impl Module for CausalLm {
    fn visit(&mut self, v: &mut dyn Visitor) {
        let composite = self.config.composite.is_some();
        v.enter("model");
        if composite {
            v.enter("language_model");
        }
        v.child("embed_tokens", &mut self.embed_tokens);
        v.enter("layers");
        for (i, layer) in self.layers.iter_mut().enumerate() {
            v.child(&i.to_string(), layer);
        }
        v.leave();
        v.child("norm", &mut self.norm);
        if composite {
            v.leave();
        }
        v.leave();
        if let Some(head) = &mut self.lm_head {
            v.child("lm_head", head);
        }
    }
}

/// Panics unless `ids` is a 2-D integer array.
#[track_caller]
fn check_ids(what: &str, ids: &Array) {
    assert!(
        ids.ndim() == 2 && ids.dtype().is_int(),
        "cotangent_nn::models::CausalLm::{what}: token ids must be an integer array [batch, time], got {:?} {}",
        ids.shape(),
        ids.dtype()
    );
}

impl CausalLm {
    /// A model of `config` with PyTorch's default init (embedding `N(0, 1)`, uniform
    /// projections, zero-centred norms at zero), parameters in `dtype`.
    pub fn new(key: &Array, config: ModelConfig, dtype: DType) -> Self {
        let keys = ct::random::split_keys(key, config.num_hidden_layers + 2);
        let layers =
            (0..config.num_hidden_layers).map(|i| DecoderLayer::new(&keys[2 + i], &config, i, dtype)).collect();
        CausalLm {
            embed_tokens: Embedding::new(&keys[0], config.vocab_size, config.hidden_size, dtype),
            layers,
            norm: Qwen3NextRMSNorm::new(config.hidden_size, config.rms_norm_eps, dtype),
            lm_head: (!config.tie_word_embeddings)
                .then(|| Linear::new(&keys[1], config.hidden_size, config.vocab_size, false, dtype)),
            config,
            gradient_checkpointing: false,
        }
    }

    /// Turn per-decoder-layer gradient checkpointing on or off. When on, each layer's forward
    /// without a cache runs inside [`ct::checkpoint`]: the forward pass keeps only the layer's
    /// input and output, and the backward pass recomputes the layer, so activation memory no
    /// longer grows with the number of layers (one layer's activations at a time, plus each
    /// layer's `[B, T, hidden]` input). Losses and gradients are the same as without (on the
    /// CPU bit for bit); a step costs about one more forward pass. Generation with a cache is
    /// unaffected.
    ///
    /// The layer's trainable parameters (those not marked frozen by the layer itself, e.g. by
    /// LoRA) are the checkpointed function's inputs; frozen ones are constants, so no gradient
    /// is computed for them.
    ///
    /// ```
    /// use cotangent::{self as ct, Array, DType};
    /// use cotangent_nn::models::{CausalLm, ModelConfig};
    /// use cotangent_nn::{self as nn, Module};
    /// let config = ModelConfig::from_json(r#"{"model_type": "qwen3_5_text", "vocab_size": 16,
    ///   "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
    ///   "num_key_value_heads": 1, "head_dim": 8, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
    ///   "linear_key_head_dim": 4, "linear_value_head_dim": 4, "full_attention_interval": 2}"#)?;
    /// let mut model = CausalLm::new(&ct::random::key(0), config, DType::F32);
    /// let ids = Array::from_slice(&[1i64, 2, 3, 4, 5], &[1, 5]);
    /// let vg = nn::value_and_grad(|m: &CausalLm, b: &[Array]| m.loss(&b[0], &b[0]));
    /// let (plain, _) = vg(&model, &[ids.clone()])?;
    /// model.set_gradient_checkpointing(true);
    /// let (checkpointed, _) = vg(&model, &[ids])?;
    /// assert_eq!(plain[0].item::<f32>()?, checkpointed[0].item::<f32>()?);
    /// # Ok::<(), ct::Error>(())
    /// ```
    pub fn set_gradient_checkpointing(&mut self, on: bool) {
        self.gradient_checkpointing = on;
    }

    /// Evaluate the Gated DeltaNet layers' recurrence (without a cache) as `mode` says:
    /// [`RecurrenceMode::Recurrent`] runs it op by op (the backward pass keeps every step's
    /// state: memory grows with `T · d_k · d_v` per head), any [`RecurrenceMode::Chunked`] runs
    /// the chunk-recomputing custom functions (chunks of 64 steps; the default). For
    /// measurements and checks; the results agree to rounding.
    ///
    /// ```
    /// use cotangent::{self as ct, Array, DType};
    /// use cotangent_nn::models::{CausalLm, ModelConfig};
    /// use cotangent_nn::RecurrenceMode;
    /// let config = ModelConfig::from_json(r#"{"model_type": "qwen3_5_text", "vocab_size": 16,
    ///   "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
    ///   "num_key_value_heads": 1, "head_dim": 8, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
    ///   "linear_key_head_dim": 4, "linear_value_head_dim": 4, "full_attention_interval": 2}"#)?;
    /// let mut model = CausalLm::new(&ct::random::key(0), config, DType::F64);
    /// let ids = Array::from_slice(&[1i64, 2, 3, 4, 5], &[1, 5]);
    /// let chunked = model.logits(&ids)?.to_vec::<f32>()?;
    /// model.set_recurrence(RecurrenceMode::Recurrent);
    /// let stepped = model.logits(&ids)?.to_vec::<f32>()?;
    /// assert!(chunked.iter().zip(&stepped).all(|(a, b)| (a - b).abs() < 1e-4));
    /// # Ok::<(), ct::Error>(())
    /// ```
    pub fn set_recurrence(&mut self, mode: RecurrenceMode) {
        for layer in &mut self.layers {
            match &mut layer.mixer {
                Mixer::Linear(LinearAttention::Fused(l)) => l.config.recurrence = mode,
                Mixer::Linear(LinearAttention::Split(l)) => l.config.recurrence = mode,
                Mixer::Full(_) => {}
            }
        }
    }

    /// The dtype of the parameters.
    pub fn dtype(&self) -> DType {
        self.embed_tokens.weight.dtype()
    }

    /// An empty cache for this model (one entry per layer).
    pub fn new_cache(&self) -> Cache {
        let layers = self
            .layers
            .iter()
            .map(|l| match l.mixer {
                Mixer::Linear(_) => LayerCache::Linear(LinearCache::default()),
                Mixer::Full(_) => LayerCache::Attention(AttentionCache::default()),
            })
            .collect();
        Cache { layers, offset: 0 }
    }

    fn check_range(&self, ids: &Array) -> Result<()> {
        let v = self.config.vocab_size as f64;
        if let Some(bad) = ids.to_f64_vec()?.into_iter().find(|&i| i < 0.0 || i >= v) {
            return Err(Error::Other(format!("token id {bad} is outside the vocabulary of {v} tokens")));
        }
        Ok(())
    }

    /// The final hidden states `[B, T, hidden]` (after the norm) of `ids: [B, T]`; with a
    /// cache, continuing from it (positions from `cache.offset`) and updating it.
    #[track_caller]
    pub fn hidden_states(&self, ids: &Array, mut cache: Option<&mut Cache>) -> Result<Array> {
        check_ids("hidden_states", ids);
        self.check_range(ids)?;
        let offset = cache.as_ref().map_or(0, |c| c.offset);
        let mut h = self.embed_tokens.forward(ids);
        for (i, layer) in self.layers.iter().enumerate() {
            h = match cache.as_mut() {
                Some(c) => layer.forward(&h, offset, Some(&mut c.layers[i]))?,
                None if self.gradient_checkpointing => checkpointed_layer(layer, &h)?,
                None => layer.forward(&h, offset, None)?,
            };
        }
        if let Some(c) = cache {
            c.offset += ids.shape()[1];
        }
        Ok(self.norm.forward(&h))
    }

    fn head(&self, h: &Array) -> Array {
        match &self.lm_head {
            Some(head) => head.forward(h),
            None => self.embed_tokens.as_linear(h),
        }
        .astype(DType::F32)
    }

    /// Logits `[B, T, vocab]` in f32 of token ids `[B, T]` (any integer dtype). Ids outside the
    /// vocabulary are an `Err`.
    #[track_caller]
    pub fn logits(&self, ids: &Array) -> Result<Array> {
        check_ids("logits", ids);
        Ok(self.head(&self.hidden_states(ids, None)?))
    }

    /// Logits of `ids` continuing from `cache` (which is updated).
    #[track_caller]
    pub fn logits_with_cache(&self, ids: &Array, cache: &mut Cache) -> Result<Array> {
        check_ids("logits_with_cache", ids);
        Ok(self.head(&self.hidden_states(ids, Some(cache))?))
    }

    /// transformers' causal-LM loss: position `t` predicts `labels[t + 1]`; labels `-100` are
    /// ignored; the mean over the remaining targets (0-d, f32). `labels` has `ids`' shape, any
    /// integer dtype; a label outside the vocabulary (other than -100) is an `Err`.
    #[track_caller]
    pub fn loss(&self, ids: &Array, labels: &Array) -> Result<Array> {
        check_ids("loss", ids);
        assert!(
            labels.shape() == ids.shape() && labels.dtype().is_int(),
            "cotangent_nn::models::CausalLm::loss: labels must be integers of the ids' shape {:?}, got {:?} {}",
            ids.shape(),
            labels.shape(),
            labels.dtype()
        );
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let logits = self.logits(ids)?;
        let v = self.config.vocab_size;
        let values = labels.to_f64_vec()?;
        let (mut targets, mut mask) = (Vec::with_capacity(b * t), Vec::with_capacity(b * t));
        for row in 0..b {
            for j in 0..t {
                let l = if j + 1 < t { values[row * t + j + 1] } else { -100.0 };
                if l == -100.0 {
                    targets.push(0i32);
                    mask.push(0.0f32);
                } else if l < 0.0 || l >= v as f64 {
                    return Err(Error::Other(format!("label {l} is outside the vocabulary of {v} tokens")));
                } else {
                    targets.push(l as i32);
                    mask.push(1.0);
                }
            }
        }
        let count: f32 = mask.iter().sum();
        let dev = logits.device();
        let targets = Array::from_vec(targets, &[b, t]).to_device(dev);
        let mask = Array::from_vec(mask, &[b, t]).to_device(dev);
        let per_token = cross_entropy(&logits, &targets, 0.0, Reduction::None);
        Ok((per_token * mask).sum_all() / f64::from(count))
    }

    /// Write `config.json` and `model.safetensors` (the parameters in their dtype, under the
    /// checkpoint's names) into `dir`, created if needed: a folder transformers and
    /// [`from_pretrained`] load.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
        let json = serde_json::to_string_pretty(&self.config.raw).map_err(|e| Error::Other(e.to_string()))?;
        let path = dir.join("config.json");
        std::fs::write(&path, json).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
        crate::io::save_with_metadata(dir.join("model.safetensors"), &self.parameters(), None, &meta)
    }

    /// Generate up to `config.max_new_tokens` tokens after `prompt: [B, T]` (any integer
    /// dtype); returns the new tokens `[B, n]` as i64. With the cache (the default) the prompt
    /// runs in chunks of `config.prefill_chunk` and each new token through the recurrent form;
    /// without it, every step recomputes the whole sequence. Rows that emitted a stop token get
    /// `pad_token_id` afterwards; generation ends early (`n < max_new_tokens`) when all rows
    /// have stopped, as in transformers.
    #[track_caller]
    pub fn generate(&self, prompt: &Array, config: &GenerationConfig) -> Result<Array> {
        check_ids("generate", prompt);
        let (b, t) = (prompt.shape()[0], prompt.shape()[1]);
        assert!(t > 0, "cotangent_nn::models::CausalLm::generate: the prompt is empty");
        let stop: Vec<i64> = config.stop_tokens.clone().unwrap_or_else(|| self.config.eos_token_ids.clone());
        let pad = config.pad_token_id.or(self.config.pad_token_id).unwrap_or(0);
        let vocab = self.config.vocab_size;
        let prompt = prompt.astype(DType::I64);
        let mut sequence = prompt.clone();
        let mut cache = config.use_cache.then(|| self.new_cache());
        let mut last_logits = match &mut cache {
            Some(c) => {
                let chunk = config.prefill_chunk.max(1);
                let mut last = None;
                let mut start = 0;
                while start < t {
                    let end = (start + chunk).min(t);
                    let piece = prompt.slice_axis(1, Some(start as isize), Some(end as isize), 1);
                    let h = self.hidden_states(&piece, Some(c))?;
                    last = Some(h.slice_axis(1, Some((end - start - 1) as isize), None, 1));
                    c.eval()?;
                    start = end;
                }
                self.head(&last.expect("a non-empty prompt"))
            }
            None => {
                let h = self.hidden_states(&prompt, None)?;
                self.head(&h.slice_axis(1, Some(t as isize - 1), None, 1))
            }
        };
        let mut finished = vec![false; b];
        let mut out: Vec<Vec<i64>> = vec![Vec::new(); b];
        for step in 0..config.max_new_tokens {
            let logits = last_logits.reshape_exact(&[b, vocab]).to_vec::<f32>()?;
            let u = match (&config.key, config.temperature > 0.0) {
                (Some(key), true) => {
                    ct::random::uniform(&ct::random::fold_in(key, step as u32), &[b], 0.0, 1.0, DType::F64)
                        .to_vec::<f64>()?
                }
                (None, true) => {
                    return Err(Error::Other("GenerationConfig: sampling needs a random key".to_string()));
                }
                _ => vec![0.0; b],
            };
            let mut next = Vec::with_capacity(b);
            for row in 0..b {
                let token = if finished[row] {
                    pad
                } else {
                    config.pick(&logits[row * vocab..(row + 1) * vocab], u[row]) as i64
                };
                if !finished[row] && stop.contains(&token) {
                    finished[row] = true;
                }
                out[row].push(token);
                // a finished row's input no longer matters; keep it inside the vocabulary
                next.push(if (0..vocab as i64).contains(&token) { token } else { 0 });
            }
            if finished.iter().all(|&f| f) || step + 1 == config.max_new_tokens {
                break;
            }
            let next = Array::from_vec(next, &[b, 1]);
            last_logits = match &mut cache {
                Some(c) => {
                    let l = self.logits_with_cache(&next, c)?;
                    c.eval()?;
                    l
                }
                None => {
                    sequence = ct::concatenate(&[sequence, next], 1);
                    let n = sequence.shape()[1];
                    self.head(&self.hidden_states(&sequence, None)?.slice_axis(1, Some(n as isize - 1), None, 1))
                }
            };
        }
        let n = out[0].len();
        Ok(Array::from_vec(out.into_iter().flatten().collect::<Vec<i64>>(), &[b, n]))
    }
}

/// `layer.forward(x)` (no cache, positions from 0) inside [`ct::checkpoint`], with the layer's
/// trainable parameters as the checkpointed function's inputs.
fn checkpointed_layer(layer: &DecoderLayer, x: &Array) -> Result<Array> {
    let trainable = layer.trainable_parameters();
    let mut args = vec![x.clone()];
    args.extend(trainable.leaves());
    let template = layer.clone();
    let f = ct::checkpoint(move |xs: &[Array]| -> Result<Vec<Array>> {
        let mut l = template.clone();
        l.update(&trainable.with_leaves(xs[1..].to_vec())?)?;
        Ok(vec![l.forward(&xs[0], 0, None)?])
    });
    Ok(f(&args)?.remove(0))
}

/// How [`CausalLm::generate`] picks tokens.
#[derive(Clone, Debug)]
pub struct GenerationConfig {
    /// The most tokens to generate.
    pub max_new_tokens: usize,
    /// 0: greedy (argmax, the first on ties); otherwise logits are divided by it and sampled.
    pub temperature: f64,
    /// Sample only among the `k` most likely tokens.
    pub top_k: Option<usize>,
    /// Sample only among the most likely tokens whose probabilities sum to at least `p`.
    pub top_p: Option<f64>,
    /// The `ct::random` key sampling draws from (step `i` uses `fold_in(key, i)`).
    pub key: Option<Array>,
    /// Stop tokens; `None`: the model's `eos_token_id`.
    pub stop_tokens: Option<Vec<i64>>,
    /// Filler after a row's stop token; `None`: the model's `pad_token_id`, else 0.
    pub pad_token_id: Option<i64>,
    /// Use the cache (prefill, then one recurrent step per token).
    pub use_cache: bool,
    /// Prompt tokens per prefill call.
    pub prefill_chunk: usize,
}

impl GenerationConfig {
    /// Greedy decoding of up to `max_new_tokens` tokens with the cache.
    pub fn greedy(max_new_tokens: usize) -> Self {
        GenerationConfig {
            max_new_tokens,
            temperature: 0.0,
            top_k: None,
            top_p: None,
            key: None,
            stop_tokens: None,
            pad_token_id: None,
            use_cache: true,
            prefill_chunk: 2048,
        }
    }

    /// Sampling at `temperature` from `key`.
    pub fn sample(max_new_tokens: usize, key: &Array, temperature: f64) -> Self {
        GenerationConfig { temperature, key: Some(key.clone()), ..GenerationConfig::greedy(max_new_tokens) }
    }

    /// Keep only the `k` most likely tokens when sampling.
    pub fn with_top_k(mut self, k: usize) -> Self {
        self.top_k = Some(k);
        self
    }

    /// Nucleus sampling with mass `p`.
    pub fn with_top_p(mut self, p: f64) -> Self {
        self.top_p = Some(p);
        self
    }

    /// Stop a row at any of `tokens`.
    pub fn with_stop_tokens(mut self, tokens: &[i64]) -> Self {
        self.stop_tokens = Some(tokens.to_vec());
        self
    }

    /// Recompute the whole sequence at every step instead of using the cache.
    pub fn without_cache(mut self) -> Self {
        self.use_cache = false;
        self
    }

    /// The token for one row of logits; `u` is a uniform draw in `[0, 1)` (unused when greedy).
    /// Order as transformers: temperature, then top-k, then top-p.
    fn pick(&self, logits: &[f32], u: f64) -> usize {
        let argmax = || logits.iter().enumerate().fold(0, |best, (i, &x)| if x > logits[best] { i } else { best });
        if self.temperature <= 0.0 {
            return argmax();
        }
        let scaled: Vec<f64> = logits.iter().map(|&x| x as f64 / self.temperature).collect();
        let mut order: Vec<usize> = (0..scaled.len()).collect();
        order.sort_by(|&a, &b| scaled[b].total_cmp(&scaled[a]).then(a.cmp(&b)));
        if let Some(k) = self.top_k {
            order.truncate(k.max(1));
        }
        let max = scaled[order[0]];
        let weights: Vec<f64> = order.iter().map(|&i| (scaled[i] - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        let mut keep = order.len();
        if let Some(p) = self.top_p {
            let mut mass = 0.0;
            for (j, w) in weights.iter().enumerate() {
                mass += w / total;
                if mass >= p {
                    keep = j + 1;
                    break;
                }
            }
        }
        let total: f64 = weights[..keep].iter().sum();
        let mut acc = 0.0;
        for j in 0..keep {
            acc += weights[j] / total;
            if u < acc {
                return order[j];
            }
        }
        order[keep - 1]
    }
}
