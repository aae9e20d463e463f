//! LoRA (low-rank adaptation) of a model's [`Linear`] layers, in the layout of PEFT.
//!
//! [`apply`] gives every targeted layer an adapter ([`LoraAdapter`]): matrices
//! `A [r, in]` (kaiming-uniform, as PEFT) and `B [out, r]` (zeros), so the layer computes
//!
//! `y = base(x) + dropout(x) · Aᵀ · Bᵀ · (alpha / r)`.
//!
//! While a model holds adapters it trains only them: [`Module::trainable_parameters`] names
//! just the `….lora_A` / `….lora_B` matrices, so [`value_and_grad`](crate::value_and_grad)
//! returns no gradient for the base and an optimizer keeps no state for it. The base stays in
//! its dtype (bf16 for a bf16 model); the adapters, their gradients and hence the optimizer
//! state are f32 (f64 for an f64 base): the adapter path casts `x` to the adapters' dtype and
//! the sum back to the base output's dtype.
//!
//! [`merge`] folds the adapters into the weights (`W += (alpha / r) · B · A`) and removes them;
//! [`save_adapters`] / [`load_adapters`] write and read PEFT's files
//! (`adapter_model.safetensors` with `base_model.model.<module>.lora_A.weight` `[r, in]` and
//! `.lora_B.weight` `[out, r]`, and `adapter_config.json`), so adapters trained here load in
//! PEFT and the other way round. Parameter `model.layers.0.self_attn.q_proj.lora_A` is tensor
//! `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`.
//!
//! Dropout: adapters apply dropout only when given a key with [`set_dropout_key`] (a training
//! step sets a fresh one); without one they are deterministic (evaluation).
//!
//! The adapters are parameters of the model ([`Module::parameters`] lists them), so load the
//! base (`from_pretrained`, [`io::load_into`]) before [`apply`], and [`merge`] before writing
//! a whole model whose file should hold only the base's names.
//!
//! Every computation here is made of existing cotangent ops (matmul, casts, additions,
//! random masks), so adapters run on whatever device the base's weights are on, CUDA included.
//!
//! ```
//! use cotangent::{self as ct, Array, DType};
//! use cotangent_nn::{self as nn, lora, Mlp, Activation, Module};
//! let mut model = Mlp::new(&ct::random::key(0), 4, 8, Activation::Relu, DType::BF16);
//! let config = lora::LoraConfig::new(2, 4.0, &["fc1"]);
//! let adapted = lora::apply(&mut model, &config, &ct::random::key(1)).unwrap();
//! assert_eq!(adapted, ["fc1"]);
//! assert_eq!(model.trainable_parameters().names(), ["fc1.lora_A", "fc1.lora_B"]);
//! let vg = nn::value_and_grad(|m: &Mlp, b: &[Array]| m.forward(&b[0]).astype(DType::F32).sum_all());
//! let x = ct::ones(&[3, 4], DType::BF16);
//! let (_, grads) = vg(&model, &[x]).unwrap();
//! assert_eq!(grads.get("fc1.lora_A").unwrap().dtype(), DType::F32);
//! ```
use crate::{init, io, Dropout, Linear, Module, Tree, Visitor};
use cotangent::{self as ct, Array, DType, Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Which layers get adapters, and their rank, scale and dropout.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    /// The rank `r` of `A [r, in]` and `B [out, r]`.
    pub rank: usize,
    /// The scale numerator: the adapter's term is multiplied by `alpha / rank`.
    pub alpha: f64,
    /// Dropout probability on the adapter's input, in `[0, 1)` (see [`set_dropout_key`]).
    pub dropout: f64,
    /// Name patterns of the targeted [`Linear`] layers. A pattern is a dotted sequence of
    /// components that must equal the last components of a layer's name, `*` matching any one
    /// component: `"q_proj"` matches `model.layers.3.self_attn.q_proj`, `"experts.*.up_proj"`
    /// every expert's `up_proj`, `"layers.0.mlp.down_proj"` one layer's.
    pub targets: Vec<String>,
}

impl LoraConfig {
    /// Rank `rank`, scale `alpha / rank`, no dropout, the layers matching `targets`.
    ///
    /// ```
    /// use cotangent_nn::lora::LoraConfig;
    /// let c = LoraConfig::new(8, 16.0, &["q_proj", "v_proj"]);
    /// assert_eq!((c.rank, c.scale(), c.dropout), (8, 2.0, 0.0));
    /// ```
    pub fn new(rank: usize, alpha: f64, targets: &[&str]) -> Self {
        LoraConfig { rank, alpha, dropout: 0.0, targets: targets.iter().map(|s| s.to_string()).collect() }
    }

    /// The same with dropout probability `p` on the adapters' input.
    ///
    /// ```
    /// use cotangent_nn::lora::LoraConfig;
    /// assert_eq!(LoraConfig::new(4, 8.0, &["o_proj"]).with_dropout(0.1).dropout, 0.1);
    /// ```
    pub fn with_dropout(mut self, p: f64) -> Self {
        self.dropout = p;
        self
    }

    /// `alpha / rank`.
    ///
    /// ```
    /// use cotangent_nn::lora::LoraConfig;
    /// assert_eq!(LoraConfig::new(4, 8.0, &["o_proj"]).scale(), 2.0);
    /// ```
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// Whether the layer named `name` (dotted) is targeted.
    ///
    /// ```
    /// use cotangent_nn::lora::LoraConfig;
    /// let c = LoraConfig::new(4, 8.0, &["q_proj", "experts.*.up_proj"]);
    /// assert!(c.matches("model.layers.1.self_attn.q_proj"));
    /// assert!(c.matches("model.layers.0.mlp.experts.3.up_proj"));
    /// assert!(!c.matches("model.layers.0.mlp.shared_expert.up_proj"));
    /// assert!(!c.matches("model.layers.1.self_attn.q_proj_extra"));
    /// ```
    pub fn matches(&self, name: &str) -> bool {
        let parts: Vec<&str> = name.split('.').collect();
        self.targets.iter().any(|t| {
            let pattern: Vec<&str> = t.split('.').collect();
            pattern.len() <= parts.len()
                && pattern.iter().zip(&parts[parts.len() - pattern.len()..]).all(|(p, c)| *p == "*" || p == c)
        })
    }

    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.rank == 0 {
            p.push("the rank is 0".to_string());
        }
        if !self.alpha.is_finite() {
            p.push(format!("alpha is {}", self.alpha));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            p.push(format!("dropout is {}, not in [0, 1)", self.dropout));
        }
        if self.targets.is_empty() {
            p.push("no target patterns are given".to_string());
        }
        for t in &self.targets {
            if t.split('.').any(str::is_empty) {
                p.push(format!("target pattern `{t}` has an empty component"));
            }
        }
        p
    }
}

/// The dtype of the adapters of a layer whose weight is in `base`: f64 for an f64 base, else
/// f32.
///
/// ```
/// use cotangent::DType;
/// use cotangent_nn::lora::adapter_dtype;
/// assert_eq!(adapter_dtype(DType::BF16), DType::F32);
/// assert_eq!(adapter_dtype(DType::F64), DType::F64);
/// ```
pub fn adapter_dtype(base: DType) -> DType {
    if base == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// The adapter of one [`Linear`] layer: its output gains `dropout(x) · Aᵀ · Bᵀ · (alpha / r)`.
///
/// ```
/// use cotangent::{self as ct, Array, DType};
/// use cotangent_nn::lora::LoraAdapter;
/// let mut adapter = LoraAdapter::new(&ct::random::key(0), 3, 2, 1, 2.0, DType::F32);
/// assert_eq!((adapter.a.shape(), adapter.b.shape()), (&[1, 3][..], &[2, 1][..]));
/// adapter.b = Array::from_slice(&[1.0f32, -1.0], &[2, 1]);
/// let x = Array::from_slice(&[1.0f32, 0.0, 0.0], &[1, 3]);
/// let base = ct::zeros(&[1, 2], DType::F32);
/// let y = adapter.forward(&x, &base).to_vec::<f32>().unwrap();
/// let a0 = adapter.a.to_vec::<f32>().unwrap()[0];
/// assert_eq!(y, vec![2.0 * a0, -2.0 * a0]);
/// ```
#[derive(Clone, Debug)]
pub struct LoraAdapter {
    /// `[r, in_features]`, parameter `lora_A`.
    pub a: Array,
    /// `[out_features, r]`, parameter `lora_B`.
    pub b: Array,
    /// The scale numerator (`alpha / r` multiplies the term).
    pub alpha: f64,
    /// Dropout probability on the adapter's input.
    pub dropout: f64,
    /// The dropout key of the current step (see [`set_dropout_key`]); `None`: no dropout.
    pub key: Option<Array>,
}

impl LoraAdapter {
    /// An adapter for a layer `in_features -> out_features` with `A ~ U(-1/√in, 1/√in)`
    /// (PyTorch's `kaiming_uniform_(a=√5)`, as PEFT) and `B = 0`, in `dtype`.
    ///
    /// ```
    /// use cotangent::{self as ct, DType};
    /// use cotangent_nn::lora::LoraAdapter;
    /// let a = LoraAdapter::new(&ct::random::key(0), 16, 8, 4, 8.0, DType::F32);
    /// assert!(a.a.to_vec::<f32>().unwrap().iter().all(|v| v.abs() <= 0.25));
    /// assert!(a.b.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    /// ```
    pub fn new(key: &Array, in_features: usize, out_features: usize, rank: usize, alpha: f64, dtype: DType) -> Self {
        let bound = 1.0 / (in_features.max(1) as f64).sqrt();
        LoraAdapter {
            a: init::uniform(key, &[rank, in_features], -bound, bound, dtype),
            b: ct::zeros(&[out_features, rank], dtype),
            alpha,
            dropout: 0.0,
            key: None,
        }
    }

    /// The rank `r`.
    ///
    /// ```
    /// use cotangent::{self as ct, DType};
    /// use cotangent_nn::lora::LoraAdapter;
    /// assert_eq!(LoraAdapter::new(&ct::random::key(0), 4, 4, 2, 1.0, DType::F32).rank(), 2);
    /// ```
    pub fn rank(&self) -> usize {
        self.a.shape()[0]
    }

    /// `alpha / r`.
    ///
    /// ```
    /// use cotangent::{self as ct, DType};
    /// use cotangent_nn::lora::LoraAdapter;
    /// assert_eq!(LoraAdapter::new(&ct::random::key(0), 4, 4, 2, 1.0, DType::F32).scale(), 0.5);
    /// ```
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank() as f64
    }

    /// The weight change `(alpha / r) · B · A`, `[out, in]`, in the adapters' dtype.
    ///
    /// ```
    /// use cotangent::{self as ct, Array, DType};
    /// use cotangent_nn::lora::LoraAdapter;
    /// let mut ad = LoraAdapter::new(&ct::random::key(0), 2, 2, 1, 3.0, DType::F64);
    /// ad.a = Array::from_slice(&[1.0f64, 2.0], &[1, 2]);
    /// ad.b = Array::from_slice(&[1.0f64, -1.0], &[2, 1]);
    /// assert_eq!(ad.delta_weight().to_vec::<f64>().unwrap(), vec![3.0, 6.0, -3.0, -6.0]);
    /// ```
    pub fn delta_weight(&self) -> Array {
        self.b.matmul(&self.a) * self.scale()
    }

    /// `base + dropout(x) · Aᵀ · Bᵀ · (alpha / r)` for `x: [..., in]` and the base layer's
    /// output `base: [..., out]`, computed in the adapters' dtype and returned in `base`'s.
    /// Dropout applies when the adapter has a key and a positive probability.
    ///
    /// ```
    /// use cotangent::{self as ct, Array, DType};
    /// use cotangent_nn::lora::LoraAdapter;
    /// let mut ad = LoraAdapter::new(&ct::random::key(0), 2, 1, 1, 1.0, DType::F32);
    /// ad.a = Array::from_slice(&[1.0f32, 1.0], &[1, 2]);
    /// ad.b = Array::from_slice(&[0.5f32], &[1, 1]);
    /// // a bf16 base output gets the f32 term and stays bf16
    /// let base = Array::from_slice(&[1.0f32, 2.0], &[2, 1]).astype(DType::BF16);
    /// let x = Array::from_slice(&[1.0f32, 1.0, 2.0, 2.0], &[2, 2]).astype(DType::BF16);
    /// let y = ad.forward(&x, &base);
    /// assert_eq!(y.dtype(), DType::BF16);
    /// assert_eq!(y.astype(DType::F32).to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn forward(&self, x: &Array, base: &Array) -> Array {
        let (r, in_f, out_f) = (self.rank(), self.a.shape()[1], self.b.shape()[0]);
        assert!(
            x.ndim() >= 1 && x.shape()[x.ndim() - 1] == in_f && self.b.shape()[1] == r,
            "cotangent_nn::lora::LoraAdapter::forward: the adapter (A {:?}, B {:?}) does not fit an input of \
             shape {:?}; its last axis must be {in_f}",
            self.a.shape(),
            self.b.shape(),
            x.shape()
        );
        let dtype = self.a.dtype();
        let lead = &x.shape()[..x.ndim() - 1];
        let mut xf = x.astype(dtype).reshape_exact(&[lead.iter().product(), in_f]);
        if let (Some(key), true) = (&self.key, self.dropout > 0.0) {
            xf = Dropout::new(self.dropout).forward(&xf, Some(key));
        }
        let mut shape = lead.to_vec();
        shape.push(out_f);
        let delta = (xf.matmul(&self.a.t()).matmul(&self.b.t()) * self.scale()).reshape_exact(&shape);
        (base.astype(dtype) + delta).astype(base.dtype())
    }
}

/// Calls `f(name, layer)` for every [`Linear`] layer of a module, with its dotted name.
struct Layers<F: FnMut(&str, &mut Linear)> {
    path: Vec<String>,
    f: F,
}

impl<F: FnMut(&str, &mut Linear)> Visitor for Layers<F> {
    fn visit_param(&mut self, _name: &str, _value: &mut Array, _frozen: bool) {}
    fn enter(&mut self, name: &str) {
        self.path.push(name.to_string());
    }
    fn leave(&mut self) {
        self.path.pop();
    }
    fn visit_linear(&mut self, linear: &mut Linear) {
        (self.f)(&self.path.join("."), linear);
    }
}

/// Visit every [`Linear`] layer of `model` (in visit order) with its dotted name.
fn for_each_linear<M: Module>(model: &mut M, f: impl FnMut(&str, &mut Linear)) {
    model.visit(&mut Layers { path: Vec::new(), f });
}

fn config_error(context: &str, problems: Vec<String>) -> Error {
    Error::Other(format!("{context}: the LoRA configuration is invalid: {}.", problems.join("; ")))
}

/// Give every [`Linear`] layer of `model` whose name matches `config.targets` an adapter
/// (`A [r, in]` kaiming-uniform from `key`, one split per layer; `B [out, r]` zero, so the
/// model computes what it did) and freeze every other parameter; returns the adapted layers'
/// names in visit order.
///
/// An invalid configuration, no matching layer, or a matching layer that already has an
/// adapter is an `Err` (and the model is left unchanged).
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::{lora, Module, MultiHeadAttention};
/// let mut attn = MultiHeadAttention::new(&ct::random::key(0), 8, 2, DType::F32);
/// let names = lora::apply(&mut attn, &lora::LoraConfig::new(4, 8.0, &["q_proj", "v_proj"]), &ct::random::key(1)).unwrap();
/// assert_eq!(names, ["q_proj", "v_proj"]);
/// assert_eq!(attn.trainable_parameters().names(), ["q_proj.lora_A", "q_proj.lora_B", "v_proj.lora_A", "v_proj.lora_B"]);
/// let err = lora::apply(&mut attn, &lora::LoraConfig::new(4, 8.0, &["gate_proj"]), &ct::random::key(1));
/// assert!(err.unwrap_err().to_string().contains("no Linear layer matches"));
/// ```
pub fn apply<M: Module>(model: &mut M, config: &LoraConfig, key: &Array) -> Result<Vec<String>> {
    let problems = config.problems();
    if !problems.is_empty() {
        return Err(config_error("lora::apply", problems));
    }
    let (mut targeted, mut all, mut already) = (Vec::new(), Vec::new(), Vec::new());
    for_each_linear(model, |name, layer| {
        all.push(name.to_string());
        if config.matches(name) {
            if layer.lora.is_some() {
                already.push(name.to_string());
            }
            targeted.push(name.to_string());
        }
    });
    if targeted.is_empty() {
        let shown: Vec<&str> = all.iter().take(12).map(String::as_str).collect();
        return Err(Error::Other(format!(
            "lora::apply: no Linear layer matches the targets {:?}; the model's {} Linear layers include {}{}.",
            config.targets,
            all.len(),
            if shown.is_empty() { "none".to_string() } else { shown.join(", ") },
            if all.len() > shown.len() { ", …" } else { "" }
        )));
    }
    if !already.is_empty() {
        return Err(Error::Other(format!(
            "lora::apply: the layers {} already have adapters; merge or remove them first.",
            already.join(", ")
        )));
    }
    let keys = ct::random::split_keys(key, targeted.len());
    let mut next = 0;
    for_each_linear(model, |name, layer| {
        if config.matches(name) {
            let (out_f, in_f) = (layer.weight.shape()[0], layer.weight.shape()[1]);
            let dtype = adapter_dtype(layer.weight.dtype());
            let mut adapter = LoraAdapter::new(&keys[next], in_f, out_f, config.rank, config.alpha, dtype);
            adapter.dropout = config.dropout;
            let device = layer.weight.device();
            adapter.a = adapter.a.to_device(device);
            adapter.b = adapter.b.to_device(device);
            layer.lora = Some(Box::new(adapter));
            next += 1;
        }
    });
    Ok(targeted)
}

/// The adapters of `model` with their layers' names, in visit order.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::{lora, Mlp, Activation};
/// let mut mlp = Mlp::new(&ct::random::key(0), 4, 8, Activation::Relu, DType::F32);
/// lora::apply(&mut mlp, &lora::LoraConfig::new(2, 2.0, &["fc2"]), &ct::random::key(1)).unwrap();
/// let adapters = lora::adapters(&mut mlp);
/// assert_eq!(adapters.len(), 1);
/// assert_eq!((adapters[0].0.as_str(), adapters[0].1.b.shape()), ("fc2", &[4, 2][..]));
/// ```
pub fn adapters<M: Module>(model: &mut M) -> Vec<(String, LoraAdapter)> {
    let mut found = Vec::new();
    for_each_linear(model, |name, layer| {
        if let Some(a) = &layer.lora {
            found.push((name.to_string(), LoraAdapter::clone(a)));
        }
    });
    found
}

/// Fold every adapter into its layer's weight, `W += (alpha / r) · B · A` (computed in the
/// adapters' dtype, stored in the weight's), remove the adapters, and evaluate the new weights.
/// The model then computes what the adapted one did, and all its parameters are trainable
/// again. A model without adapters is left as it is.
///
/// ```
/// use cotangent::{self as ct, Array, DType};
/// use cotangent_nn::{lora, Activation, Mlp, Module};
/// let mut mlp = Mlp::new(&ct::random::key(0), 3, 4, Activation::Tanh, DType::F32);
/// lora::apply(&mut mlp, &lora::LoraConfig::new(2, 4.0, &["fc1"]), &ct::random::key(1)).unwrap();
/// let b = ct::random::normal(&ct::random::key(2), &[4, 2], DType::F32);
/// mlp.fc1.lora.as_mut().unwrap().b = b;
/// let x = ct::random::normal(&ct::random::key(3), &[5, 3], DType::F32);
/// let adapted = mlp.forward(&x).to_vec::<f32>().unwrap();
/// lora::merge(&mut mlp).unwrap();
/// assert!(mlp.fc1.lora.is_none());
/// assert_eq!(mlp.trainable_parameters().names().len(), 4);
/// let merged = mlp.forward(&x).to_vec::<f32>().unwrap();
/// assert!(adapted.iter().zip(&merged).all(|(a, m)| (a - m).abs() < 1e-5));
/// ```
pub fn merge<M: Module>(model: &mut M) -> Result<()> {
    let mut weights = Vec::new();
    for_each_linear(model, |_, layer| {
        if let Some(adapter) = layer.lora.take() {
            let dtype = adapter.a.dtype();
            layer.weight = (layer.weight.astype(dtype) + adapter.delta_weight()).astype(layer.weight.dtype());
            weights.push(layer.weight.clone());
        }
    });
    ct::eval(&weights)
}

/// Set the dropout key of every adapter for the next forward pass: adapter `i` (in visit
/// order) draws its mask from `fold_in(key, i)`. `None` turns dropout off (evaluation). A
/// training step sets a fresh key before computing the loss; adapters whose dropout is 0
/// ignore it.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::{lora, Activation, Mlp};
/// let mut mlp = Mlp::new(&ct::random::key(0), 4, 4, Activation::Tanh, DType::F32);
/// let config = lora::LoraConfig::new(2, 4.0, &["fc1"]).with_dropout(0.5);
/// lora::apply(&mut mlp, &config, &ct::random::key(1)).unwrap();
/// mlp.fc1.lora.as_mut().unwrap().b = ct::ones(&[4, 2], DType::F32);
/// let x = ct::ones(&[2, 4], DType::F32);
/// let eval = mlp.forward(&x).to_vec::<f32>().unwrap();
/// lora::set_dropout_key(&mut mlp, Some(&ct::random::key(7)));
/// let train = mlp.forward(&x).to_vec::<f32>().unwrap();
/// assert_ne!(eval, train);
/// lora::set_dropout_key(&mut mlp, None);
/// assert_eq!(mlp.forward(&x).to_vec::<f32>().unwrap(), eval);
/// ```
pub fn set_dropout_key<M: Module>(model: &mut M, key: Option<&Array>) {
    let mut i = 0u32;
    for_each_linear(model, |_, layer| {
        if let Some(adapter) = &mut layer.lora {
            adapter.key = key.map(|k| ct::random::fold_in(k, i));
            i += 1;
        }
    });
}

/// The prefix PEFT gives module names in its files.
const PEFT_PREFIX: &str = "base_model.model.";

/// PEFT's `target_modules`: a list of names when no pattern has a `*`, else the equivalent
/// regular expression (which PEFT matches against whole module names).
fn target_modules_json(targets: &[String]) -> serde_json::Value {
    if targets.iter().all(|t| !t.contains('*')) {
        return serde_json::Value::from(targets.to_vec());
    }
    let alternatives: Vec<String> = targets
        .iter()
        .map(|t| t.split('.').map(|c| if c == "*" { "[^.]+" } else { c }).collect::<Vec<_>>().join("\\."))
        .collect();
    serde_json::Value::from(format!("(.*\\.)?({})", alternatives.join("|")))
}

/// The patterns of a `target_modules` value (the inverse of [`target_modules_json`] for the
/// regular expressions it writes; any other string is kept as one pattern).
fn targets_from_json(value: Option<&serde_json::Value>) -> Vec<String> {
    match value {
        Some(serde_json::Value::Array(items)) => items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
        Some(serde_json::Value::String(s)) => match s.strip_prefix("(.*\\.)?(").and_then(|r| r.strip_suffix(')')) {
            Some(body) => body.split('|').map(|alt| alt.replace("[^.]+", "*").replace("\\.", ".")).collect(),
            None => vec![s.clone()],
        },
        _ => Vec::new(),
    }
}

/// Write `model`'s adapters into `dir` (created if needed) in PEFT's layout:
/// `adapter_model.safetensors` (tensors `base_model.model.<layer>.lora_A.weight` and
/// `.lora_B.weight`, in the adapters' dtype) and `adapter_config.json` (`peft_type: "LORA"`,
/// `r`, `lora_alpha`, `lora_dropout`, `target_modules`, `bias: "none"`, `task_type:
/// "CAUSAL_LM"`). A model without adapters, or whose adapters' rank differs from
/// `config.rank`, is an `Err`.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::{lora, Activation, Mlp};
/// let dir = std::env::temp_dir().join(format!("doc_lora_save_{}", std::process::id()));
/// let mut mlp = Mlp::new(&ct::random::key(0), 4, 4, Activation::Tanh, DType::F32);
/// let config = lora::LoraConfig::new(2, 4.0, &["fc1", "fc2"]);
/// lora::apply(&mut mlp, &config, &ct::random::key(1)).unwrap();
/// lora::save_adapters(&mlp, &config, &dir).unwrap();
/// let mut fresh = Mlp::new(&ct::random::key(0), 4, 4, Activation::Tanh, DType::F32);
/// assert_eq!(lora::load_adapters(&mut fresh, &dir).unwrap(), config);
/// assert_eq!(fresh.fc2.lora.unwrap().a.to_vec::<f32>().unwrap(), mlp.fc2.lora.unwrap().a.to_vec::<f32>().unwrap());
/// # std::fs::remove_dir_all(&dir).ok();
/// ```
pub fn save_adapters<M: Module>(model: &M, config: &LoraConfig, dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    let found = adapters(&mut model.clone());
    if found.is_empty() {
        return Err(Error::Other("lora::save_adapters: the model has no adapters to save.".to_string()));
    }
    let other_rank: Vec<String> = found
        .iter()
        .filter(|(_, a)| a.rank() != config.rank)
        .map(|(n, a)| format!("`{n}` has rank {}", a.rank()))
        .collect();
    if !other_rank.is_empty() {
        return Err(Error::Other(format!(
            "lora::save_adapters: the configuration says rank {} but {}.",
            config.rank,
            other_rank.join(", ")
        )));
    }
    let mut items = Vec::with_capacity(2 * found.len());
    for (name, adapter) in &found {
        items.push((format!("{PEFT_PREFIX}{name}.lora_A.weight"), Tree::leaf(adapter.a.clone())));
        items.push((format!("{PEFT_PREFIX}{name}.lora_B.weight"), Tree::leaf(adapter.b.clone())));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    io::save_with_metadata(dir.join("adapter_model.safetensors"), &Tree::Dict(items), None, &meta)?;
    let alpha = if config.alpha.fract() == 0.0 && config.alpha.abs() < 1e15 {
        serde_json::Value::from(config.alpha as i64)
    } else {
        serde_json::Value::from(config.alpha)
    };
    let json = serde_json::json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": config.rank,
        "lora_alpha": alpha,
        "lora_dropout": config.dropout,
        "target_modules": target_modules_json(&config.targets),
        "bias": "none",
        "fan_in_fan_out": false,
        "use_rslora": false,
        "use_dora": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "modules_to_save": null,
        "base_model_name_or_path": null,
    });
    let text = serde_json::to_string_pretty(&json).map_err(|e| Error::Other(e.to_string()))?;
    let path = dir.join("adapter_config.json");
    std::fs::write(&path, text).map_err(|e| Error::Io(format!("{}: {e}", path.display())))
}

/// Read `adapter_config.json` into a [`LoraConfig`], refusing what this crate does not compute.
fn read_config(path: &Path) -> Result<LoraConfig> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    let bad = |m: String| Error::Other(format!("{}: {m}.", path.display()));
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON ({e})")))?;
    let obj = value.as_object().ok_or_else(|| bad("not a JSON object".to_string()))?;
    let mut problems = Vec::new();
    match obj.get("peft_type").and_then(|v| v.as_str()) {
        Some("LORA") => {}
        other => problems.push(format!("peft_type is {other:?}, not \"LORA\"")),
    }
    let rank = match obj.get("r").and_then(|v| v.as_u64()) {
        Some(r) if r > 0 => r as usize,
        _ => {
            problems.push(format!("r is {:?}, not a positive integer", obj.get("r")));
            0
        }
    };
    let alpha = match obj.get("lora_alpha").and_then(|v| v.as_f64()) {
        Some(a) => a,
        None => {
            problems.push(format!("lora_alpha is {:?}, not a number", obj.get("lora_alpha")));
            0.0
        }
    };
    let dropout = obj.get("lora_dropout").and_then(|v| v.as_f64()).unwrap_or(0.0);
    match obj.get("bias").and_then(|v| v.as_str()) {
        None | Some("none") => {}
        Some(b) => problems.push(format!("bias is \"{b}\"; only \"none\" is supported")),
    }
    for pattern in ["rank_pattern", "alpha_pattern"] {
        if obj.get(pattern).and_then(|v| v.as_object()).is_some_and(|o| !o.is_empty()) {
            problems.push(format!("{pattern} gives some layers their own values, which is not supported"));
        }
    }
    for flag in ["use_rslora", "use_dora", "fan_in_fan_out"] {
        if obj.get(flag).and_then(|v| v.as_bool()) == Some(true) {
            problems.push(format!("{flag} is true, which is not supported"));
        }
    }
    if !problems.is_empty() {
        return Err(bad(problems.join("; ")));
    }
    let targets = targets_from_json(obj.get("target_modules"));
    Ok(LoraConfig { rank, alpha, dropout, targets })
}

/// Load adapters saved in PEFT's layout (by [`save_adapters`] or by PEFT) from `dir` into
/// `model`, replacing any adapters it had, and return the configuration. Tensors are
/// converted to the adapters' dtype ([`adapter_dtype`] of each layer's weight).
///
/// Every tensor whose name does not have PEFT's form or names no [`Linear`] layer of `model`,
/// every `A` not `[r, in]` and `B` not `[out, r]`, and every layer with only one of the two is
/// named in one `Err`; the model is then left unchanged. So are configurations this crate does
/// not compute (`bias` other than `"none"`, `use_rslora`, `use_dora`, `fan_in_fan_out`).
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::{lora, Activation, Mlp};
/// let dir = std::env::temp_dir().join(format!("doc_lora_load_{}", std::process::id()));
/// let mut small = Mlp::new(&ct::random::key(0), 4, 4, Activation::Tanh, DType::F32);
/// let config = lora::LoraConfig::new(2, 4.0, &["fc1"]);
/// lora::apply(&mut small, &config, &ct::random::key(1)).unwrap();
/// lora::save_adapters(&small, &config, &dir).unwrap();
/// let mut wider = Mlp::new(&ct::random::key(0), 6, 4, Activation::Tanh, DType::F32);
/// let err = lora::load_adapters(&mut wider, &dir).unwrap_err().to_string();
/// assert!(err.contains("fc1.lora_A.weight` has shape [2, 4]"), "{err}");
/// # std::fs::remove_dir_all(&dir).ok();
/// ```
pub fn load_adapters<M: Module>(model: &mut M, dir: impl AsRef<Path>) -> Result<LoraConfig> {
    let dir = dir.as_ref();
    let config = read_config(&dir.join("adapter_config.json"))?;
    let path = dir.join("adapter_model.safetensors");
    let bytes = std::fs::read(&path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    let tensors =
        io::named_tensors_from_bytes(&bytes, |_| true).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    let mut problems = Vec::new();
    let mut only_shapes = true;
    // layer name -> (A, B)
    let mut pairs: BTreeMap<String, (Option<Array>, Option<Array>)> = BTreeMap::new();
    for (name, array) in tensors {
        let module = name.strip_prefix(PEFT_PREFIX);
        let (layer, is_a) = match module {
            Some(m) if m.ends_with(".lora_A.weight") => (m.trim_end_matches(".lora_A.weight"), true),
            Some(m) if m.ends_with(".lora_B.weight") => (m.trim_end_matches(".lora_B.weight"), false),
            _ => {
                only_shapes = false;
                problems.push(format!(
                    "tensor `{name}` is not named `{PEFT_PREFIX}<layer>.lora_A.weight` or `….lora_B.weight`"
                ));
                continue;
            }
        };
        let entry = pairs.entry(layer.to_string()).or_default();
        if is_a {
            entry.0 = Some(array);
        } else {
            entry.1 = Some(array);
        }
    }
    let r = config.rank;
    let mut seen = Vec::new();
    for_each_linear(model, |name, layer| {
        let Some((a, b)) = pairs.get(name) else { return };
        seen.push(name.to_string());
        let (out_f, in_f) = (layer.weight.shape()[0], layer.weight.shape()[1]);
        for (which, array, want) in [("A", a, [r, in_f]), ("B", b, [out_f, r])] {
            match array {
                None => {
                    only_shapes = false;
                    problems.push(format!("`{name}` has no lora_{which} tensor"))
                }
                Some(t) if t.shape() != want => problems.push(format!(
                    "`{PEFT_PREFIX}{name}.lora_{which}.weight` has shape {:?} but the layer (weight {:?}) needs \
                     {want:?} at rank {r}",
                    t.shape(),
                    layer.weight.shape()
                )),
                Some(t) if !t.dtype().is_float() => {
                    only_shapes = false;
                    problems.push(format!("`{PEFT_PREFIX}{name}.lora_{which}.weight` is {}, not a float", t.dtype()))
                }
                Some(_) => {}
            }
        }
    });
    for name in pairs.keys().filter(|n| !seen.iter().any(|s| s == *n)) {
        only_shapes = false;
        problems
            .push(format!("`{name}` (tensors `{PEFT_PREFIX}{name}.lora_*.weight`) is not a Linear layer of the model"));
    }
    if pairs.is_empty() && problems.is_empty() {
        only_shapes = false;
        problems.push("the file holds no adapters".to_string());
    }
    if !problems.is_empty() {
        let message = if problems.len() == 1 {
            format!("{}: {}.", path.display(), problems[0])
        } else {
            format!("{}: {} problems:\n  {}", path.display(), problems.len(), problems.join("\n  "))
        };
        return Err(if only_shapes { Error::Shape(message) } else { Error::Other(message) });
    }
    let mut arrays = Vec::new();
    for_each_linear(model, |name, layer| {
        layer.lora = pairs.get(name).map(|(a, b)| {
            let dtype = adapter_dtype(layer.weight.dtype());
            let device = layer.weight.device();
            let cast = |t: &Option<Array>| t.as_ref().expect("checked").astype(dtype).to_device(device);
            let adapter =
                LoraAdapter { a: cast(a), b: cast(b), alpha: config.alpha, dropout: config.dropout, key: None };
            arrays.extend([adapter.a.clone(), adapter.b.clone()]);
            Box::new(adapter)
        });
    });
    ct::eval(&arrays)?;
    Ok(config)
}
