//! `config.json` of a Hugging Face Qwen3-Next / Qwen3.5 folder, read as transformers reads it.
use cotangent::{Error, Result};
use serde_json::{Map, Value};

/// The kind of token mixer of one decoder layer (`layer_types` in `config.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerType {
    /// `"linear_attention"`: a Gated DeltaNet.
    LinearAttention,
    /// `"full_attention"`: gated softmax attention with rotary positions.
    FullAttention,
}

/// Which of transformers' text models the configuration describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelType {
    /// `qwen3_next`: fused `in_proj_qkvz` / `in_proj_ba` projections; MoE where
    /// `num_experts > 0`, outside `mlp_only_layers`, every `decoder_sparse_step`-th layer.
    Qwen3Next,
    /// `qwen3_5_text`: split `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`; dense MLPs.
    Qwen3_5,
    /// `qwen3_5_moe_text`: Qwen3.5's projections; a sparse MoE on every layer, top-k
    /// probabilities always renormalised.
    Qwen3_5Moe,
}

impl ModelType {
    /// The `model_type` string of the text model.
    pub fn name(self) -> &'static str {
        match self {
            ModelType::Qwen3Next => "qwen3_next",
            ModelType::Qwen3_5 => "qwen3_5_text",
            ModelType::Qwen3_5Moe => "qwen3_5_moe_text",
        }
    }
}

/// Everything the text model needs from `config.json`, with transformers' defaults for
/// fields the file leaves out. `raw` keeps the file's JSON so that
/// [`CausalLm::save_pretrained`](super::CausalLm::save_pretrained) writes it back unchanged.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The text model's type.
    pub model_type: ModelType,
    /// The composite (vision-language) `model_type` (`qwen3_5`, `qwen3_5_moe`) when the file
    /// holds the text model's fields under `text_config` and the weights under
    /// `model.language_model.*`.
    pub composite: Option<String>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Width of the dense MLPs (0 where the model has none).
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads of full attention.
    pub num_attention_heads: usize,
    /// Key/value heads of full attention.
    pub num_key_value_heads: usize,
    /// Width of an attention head.
    pub head_dim: usize,
    /// Whether the attention projections have biases.
    pub attention_bias: bool,
    /// Epsilon of every RMS norm.
    pub rms_norm_eps: f64,
    /// Whether `lm_head` is the embedding table.
    pub tie_word_embeddings: bool,
    /// Rotary base.
    pub rope_theta: f64,
    /// Fraction of each head's dimensions that rotate.
    pub partial_rotary_factor: f64,
    /// The token mixer of every layer.
    pub layer_types: Vec<LayerType>,
    /// Query/key heads of the Gated DeltaNet.
    pub linear_num_key_heads: usize,
    /// Value heads of the Gated DeltaNet.
    pub linear_num_value_heads: usize,
    /// Query/key width per Gated DeltaNet head.
    pub linear_key_head_dim: usize,
    /// Value width per Gated DeltaNet head.
    pub linear_value_head_dim: usize,
    /// Kernel of the Gated DeltaNet's short convolution.
    pub linear_conv_kernel_dim: usize,
    /// Routed experts of a sparse MoE block (0: none).
    pub num_experts: usize,
    /// Experts per token.
    pub num_experts_per_tok: usize,
    /// Whether the top-k router probabilities are renormalised to sum to one.
    pub norm_topk_prob: bool,
    /// Hidden width of each routed expert.
    pub moe_intermediate_size: usize,
    /// Hidden width of the shared expert.
    pub shared_expert_intermediate_size: usize,
    /// A sparse MoE on every `decoder_sparse_step`-th layer (Qwen3-Next).
    pub decoder_sparse_step: usize,
    /// Layers with a dense MLP whatever the other fields say (Qwen3-Next).
    pub mlp_only_layers: Vec<usize>,
    /// End-of-sequence token ids (`eos_token_id`, one or a list), the default stop tokens.
    pub eos_token_ids: Vec<i64>,
    /// `pad_token_id`, if any.
    pub pad_token_id: Option<i64>,
    /// The whole `config.json`.
    pub raw: Value,
}

/// Reads fields of one JSON object, collecting every problem.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    problems: Vec<String>,
}

impl Fields<'_> {
    fn usize_or(&mut self, key: &str, default: Option<usize>) -> usize {
        match self.obj.get(key) {
            Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap() as usize,
            None | Some(Value::Null) => match default {
                Some(d) => d,
                None => {
                    self.problems.push(format!("`{key}` is missing"));
                    0
                }
            },
            Some(v) => {
                self.problems.push(format!("`{key}` should be a non-negative integer, found {v}"));
                0
            }
        }
    }
    fn usize(&mut self, key: &str) -> usize {
        self.usize_or(key, None)
    }
    fn f64_or(&mut self, key: &str, default: f64) -> f64 {
        match self.obj.get(key) {
            Some(Value::Number(n)) => n.as_f64().unwrap_or(default),
            None | Some(Value::Null) => default,
            Some(v) => {
                self.problems.push(format!("`{key}` should be a number, found {v}"));
                default
            }
        }
    }
    fn bool_or(&mut self, key: &str, default: bool) -> bool {
        match self.obj.get(key) {
            Some(Value::Bool(b)) => *b,
            None | Some(Value::Null) => default,
            Some(v) => {
                self.problems.push(format!("`{key}` should be true or false, found {v}"));
                default
            }
        }
    }
    fn ids(&mut self, key: &str) -> Vec<i64> {
        match self.obj.get(key) {
            None | Some(Value::Null) => vec![],
            Some(Value::Number(n)) if n.as_i64().is_some() => vec![n.as_i64().unwrap()],
            Some(Value::Array(items)) if items.iter().all(|i| i.as_i64().is_some()) => {
                items.iter().map(|i| i.as_i64().unwrap()).collect()
            }
            Some(v) => {
                self.problems.push(format!("`{key}` should be an integer or a list of integers, found {v}"));
                vec![]
            }
        }
    }
}

fn bad(msg: String) -> Error {
    Error::Other(format!("config.json: {msg}"))
}

impl ModelConfig {
    /// Parse the text of a `config.json`. Every missing or malformed field is named in the one
    /// `Err`; an unknown `model_type` or an unsupported rotary type is an `Err` too.
    ///
    /// ```
    /// use cotangent_nn::models::{ModelConfig, ModelType, LayerType};
    /// let json = r#"{"model_type": "qwen3_5_text", "vocab_size": 10, "hidden_size": 8,
    ///   "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
    ///   "num_key_value_heads": 1, "head_dim": 8, "linear_num_key_heads": 1,
    ///   "linear_num_value_heads": 2, "linear_key_head_dim": 4, "linear_value_head_dim": 4,
    ///   "full_attention_interval": 2}"#;
    /// let c = ModelConfig::from_json(json).unwrap();
    /// assert_eq!(c.model_type, ModelType::Qwen3_5);
    /// assert_eq!(c.layer_types, [LayerType::LinearAttention, LayerType::FullAttention]);
    /// let err = ModelConfig::from_json(r#"{"model_type": "qwen3_next"}"#).unwrap_err().to_string();
    /// assert!(err.contains("vocab_size") && err.contains("hidden_size"), "{err}");
    /// ```
    pub fn from_json(text: &str) -> Result<ModelConfig> {
        let raw: Value = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let top = raw.as_object().ok_or_else(|| bad("not a JSON object".to_string()))?;
        let top_type = top.get("model_type").and_then(Value::as_str).unwrap_or("");
        let (text_obj, composite) = match top_type {
            "qwen3_next" | "qwen3_5_text" | "qwen3_5_moe_text" => (top, None),
            "qwen3_5" | "qwen3_5_moe" => {
                let t = top
                    .get("text_config")
                    .and_then(Value::as_object)
                    .ok_or_else(|| bad(format!("model_type `{top_type}` needs a `text_config` object")))?;
                (t, Some(top_type.to_string()))
            }
            other => {
                return Err(bad(format!(
                    "model_type `{other}` is not supported (qwen3_next, qwen3_5_text, qwen3_5_moe_text, qwen3_5, \
                     qwen3_5_moe are)"
                )))
            }
        };
        let model_type = match (top_type, text_obj.get("model_type").and_then(Value::as_str)) {
            ("qwen3_next", _) => ModelType::Qwen3Next,
            ("qwen3_5_text", _) | ("qwen3_5", _) => ModelType::Qwen3_5,
            _ => ModelType::Qwen3_5Moe,
        };
        let is_composite = composite.is_some();
        let mut f = Fields { obj: text_obj, problems: Vec::new() };
        let num_hidden_layers = f.usize("num_hidden_layers");
        let layer_types = match text_obj.get("layer_types") {
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v.as_str() {
                    Some("linear_attention") => LayerType::LinearAttention,
                    Some("full_attention") | Some("attention") => LayerType::FullAttention,
                    _ => {
                        f.problems
                            .push(format!("`layer_types[{i}]` = {v} is neither linear_attention nor full_attention"));
                        LayerType::FullAttention
                    }
                })
                .collect(),
            None | Some(Value::Null) => {
                let interval = f.usize_or("full_attention_interval", Some(4)).max(1);
                (0..num_hidden_layers)
                    .map(
                        |i| if (i + 1) % interval != 0 { LayerType::LinearAttention } else { LayerType::FullAttention },
                    )
                    .collect()
            }
            Some(v) => {
                f.problems.push(format!("`layer_types` should be a list, found {v}"));
                vec![]
            }
        };
        if layer_types.len() != num_hidden_layers && f.problems.is_empty() {
            f.problems.push(format!("{} layer_types for {num_hidden_layers} layers", layer_types.len()));
        }
        let rope = text_obj.get("rope_parameters").and_then(Value::as_object).cloned().unwrap_or_default();
        let rope_type = rope.get("rope_type").and_then(Value::as_str).unwrap_or("default");
        if rope_type != "default" {
            f.problems.push(format!("rope_type `{rope_type}` is not supported (only `default`)"));
        }
        let mut rf = Fields { obj: &rope, problems: Vec::new() };
        let top_theta = f.f64_or("rope_theta", 10000.0);
        let rope_theta = rf.f64_or("rope_theta", top_theta);
        let top_partial = f.f64_or("partial_rotary_factor", 0.25);
        let partial_rotary_factor = rf.f64_or("partial_rotary_factor", top_partial);
        f.problems.extend(rf.problems.into_iter().map(|p| format!("rope_parameters: {p}")));
        let hidden_size = f.usize("hidden_size");
        let num_attention_heads = f.usize("num_attention_heads");
        let moe = model_type != ModelType::Qwen3_5;
        let config = ModelConfig {
            model_type,
            composite,
            vocab_size: f.usize("vocab_size"),
            hidden_size,
            intermediate_size: f.usize_or("intermediate_size", (model_type == ModelType::Qwen3_5Moe).then_some(0)),
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads: f.usize("num_key_value_heads"),
            head_dim: f.usize_or("head_dim", Some(256)),
            attention_bias: f.bool_or("attention_bias", false),
            rms_norm_eps: f.f64_or("rms_norm_eps", 1e-6),
            tie_word_embeddings: {
                let inner = f.bool_or("tie_word_embeddings", false);
                match top.get("tie_word_embeddings") {
                    Some(Value::Bool(b)) if is_composite => *b || inner,
                    _ => inner,
                }
            },
            rope_theta,
            partial_rotary_factor,
            layer_types,
            linear_num_key_heads: f.usize("linear_num_key_heads"),
            linear_num_value_heads: f.usize("linear_num_value_heads"),
            linear_key_head_dim: f.usize("linear_key_head_dim"),
            linear_value_head_dim: f.usize("linear_value_head_dim"),
            linear_conv_kernel_dim: f.usize_or("linear_conv_kernel_dim", Some(4)),
            num_experts: if moe { f.usize_or("num_experts", Some(0)) } else { 0 },
            num_experts_per_tok: if moe { f.usize_or("num_experts_per_tok", Some(1)) } else { 0 },
            norm_topk_prob: model_type == ModelType::Qwen3_5Moe || f.bool_or("norm_topk_prob", true),
            moe_intermediate_size: if moe { f.usize_or("moe_intermediate_size", Some(0)) } else { 0 },
            shared_expert_intermediate_size: if moe {
                f.usize_or("shared_expert_intermediate_size", Some(0))
            } else {
                0
            },
            decoder_sparse_step: if model_type == ModelType::Qwen3Next {
                f.usize_or("decoder_sparse_step", Some(1))
            } else {
                1
            },
            mlp_only_layers: match (model_type, text_obj.get("mlp_only_layers")) {
                (ModelType::Qwen3Next, Some(Value::Array(items))) => {
                    items.iter().filter_map(|v| v.as_u64().map(|u| u as usize)).collect()
                }
                _ => vec![],
            },
            eos_token_ids: f.ids("eos_token_id"),
            pad_token_id: f.ids("pad_token_id").first().copied(),
            raw: raw.clone(),
        };
        let mut problems = f.problems;
        if problems.is_empty() {
            problems.extend(config.size_problems());
        }
        if !problems.is_empty() {
            return Err(bad(problems.join("; ")));
        }
        Ok(config)
    }

    fn size_problems(&self) -> Vec<String> {
        let c = self;
        let mut p = Vec::new();
        for (name, v) in [
            ("vocab_size", c.vocab_size),
            ("hidden_size", c.hidden_size),
            ("num_attention_heads", c.num_attention_heads),
            ("num_key_value_heads", c.num_key_value_heads),
            ("head_dim", c.head_dim),
            ("linear_num_key_heads", c.linear_num_key_heads),
            ("linear_num_value_heads", c.linear_num_value_heads),
            ("linear_key_head_dim", c.linear_key_head_dim),
            ("linear_value_head_dim", c.linear_value_head_dim),
            ("linear_conv_kernel_dim", c.linear_conv_kernel_dim),
        ] {
            if v == 0 {
                p.push(format!("`{name}` must be positive"));
            }
        }
        if p.is_empty() {
            if !c.num_attention_heads.is_multiple_of(c.num_key_value_heads) {
                p.push("`num_attention_heads` must be a multiple of `num_key_value_heads`".into());
            }
            if !c.linear_num_value_heads.is_multiple_of(c.linear_num_key_heads) {
                p.push("`linear_num_value_heads` must be a multiple of `linear_num_key_heads`".into());
            }
        }
        for i in 0..c.num_hidden_layers {
            if c.is_sparse_layer(i) && (c.num_experts_per_tok == 0 || c.num_experts_per_tok > c.num_experts) {
                p.push(format!("`num_experts_per_tok` = {} with {} experts", c.num_experts_per_tok, c.num_experts));
                break;
            }
        }
        if (0..c.num_hidden_layers).any(|i| !c.is_sparse_layer(i)) && c.intermediate_size == 0 {
            p.push("`intermediate_size` is needed for the dense MLP layers".into());
        }
        if !(0.0..=1.0).contains(&c.partial_rotary_factor) || !c.rotary_dim().is_multiple_of(2) {
            p.push(format!(
                "partial_rotary_factor {} gives {} rotary dimensions of head_dim {} (must be even, at most head_dim)",
                c.partial_rotary_factor,
                c.rotary_dim(),
                c.head_dim
            ));
        }
        p
    }

    /// Whether layer `i` has a sparse MoE block (else a dense MLP), as transformers decides.
    pub fn is_sparse_layer(&self, i: usize) -> bool {
        match self.model_type {
            ModelType::Qwen3_5 => false,
            ModelType::Qwen3_5Moe => true,
            ModelType::Qwen3Next => {
                !self.mlp_only_layers.contains(&i)
                    && self.num_experts > 0
                    && (i + 1).is_multiple_of(self.decoder_sparse_step.max(1))
            }
        }
    }

    /// Rotating dimensions per head: `int(head_dim · partial_rotary_factor)`.
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim as f64 * self.partial_rotary_factor) as usize
    }

    /// The prefix of the text model's weights: `model.` or, for composite folders,
    /// `model.language_model.`.
    pub fn weight_prefix(&self) -> &'static str {
        if self.composite.is_some() {
            "model.language_model."
        } else {
            "model."
        }
    }

    /// The fields of the Gated DeltaNet layers.
    pub fn linear_attention(&self) -> crate::qwen3_next::Qwen3NextConfig {
        crate::qwen3_next::Qwen3NextConfig {
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            linear_num_key_heads: self.linear_num_key_heads,
            linear_num_value_heads: self.linear_num_value_heads,
            linear_key_head_dim: self.linear_key_head_dim,
            linear_value_head_dim: self.linear_value_head_dim,
            linear_conv_kernel_dim: self.linear_conv_kernel_dim,
            rms_norm_eps: self.rms_norm_eps,
            recurrence: crate::RecurrenceMode::Chunked(64),
        }
    }
}
