//! The training logic of the `qwen3_next_finetune` example, without the command line, the
//! progress bar and the plot (`main.rs`), so `tests/finetune.rs` runs it too.
//!
//! A [`Trainer`] holds the model (a [`CausalLm`] with its base frozen), AdamW with warm-up and
//! cosine decay, the data and the step count. Each [`Trainer::step`] accumulates the gradients
//! of `accum` micro-batches of `batch` windows of `seq_len` tokens, clips them to a global norm
//! and updates the trainable parameters. [`Trainer::save_checkpoint`] writes the trainable
//! parameters, the optimizer state and the step to `out/checkpoint-NNNNNN/`; a trainer made
//! with `resume` set to such a folder continues from it bit for bit on the CPU (the data of a
//! step and its learning rate depend only on the step number).
use cotangent::{self as ct, Array, DType, Error, Result};
use cotangent_nn::lora::{self, LoraConfig};
use cotangent_nn::models::{from_pretrained, CausalLm, ModelConfig};
use cotangent_nn::optim::{self, clip_grad_norm, schedules, AdamW, Optimizer};
use cotangent_nn::{self as nn, io, Freeze, Module, RecurrenceMode, Tree};
use std::path::{Path, PathBuf};

/// Everything a run depends on (the command-line flags).
#[derive(Clone, Debug)]
pub struct Options {
    /// A Hugging Face folder; `None`: a random Qwen3-Next-shaped model.
    pub model: Option<PathBuf>,
    /// A JSONL file of token ids; `None`: random, seeded, learnable data.
    pub data: Option<PathBuf>,
    /// Where checkpoints, the loss curve and the final adapters go.
    pub out: PathBuf,
    /// A checkpoint folder to continue from.
    pub resume: Option<PathBuf>,
    /// Total optimizer steps (a resumed run counts the steps done before).
    pub steps: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Sequences per micro-batch.
    pub batch: usize,
    /// Micro-batches per step (gradient accumulation).
    pub accum: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Warm-up steps (linear from 0).
    pub warmup: usize,
    /// Learning rate at the end of the cosine decay.
    pub min_lr: f64,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f64,
    /// Global-norm clipping threshold.
    pub max_grad_norm: f64,
    /// LoRA rank.
    pub rank: usize,
    /// LoRA alpha.
    pub alpha: f64,
    /// LoRA dropout.
    pub dropout: f64,
    /// LoRA target name patterns.
    pub targets: Vec<String>,
    /// Checkpoint each decoder layer (recompute it in the backward pass).
    pub checkpoint_layers: bool,
    /// The gated delta recurrence op by op instead of in chunks.
    pub recurrent: bool,
    /// Save a checkpoint every this many steps (0: only at the end).
    pub save_every: usize,
    /// Seed of the random model, the adapters' init and the random data.
    pub seed: u64,
    /// The base model's dtype.
    pub dtype: DType,
    /// Width of the random model.
    pub hidden: usize,
    /// Decoder layers of the random model (every fourth one full attention).
    pub layers: usize,
    /// Vocabulary of the random model and data.
    pub vocab: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            model: None,
            data: None,
            out: PathBuf::from("target/qwen3_next_finetune"),
            resume: None,
            steps: 100,
            seq_len: 128,
            batch: 2,
            accum: 2,
            lr: 2e-3,
            warmup: 10,
            min_lr: 2e-4,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
            rank: 8,
            alpha: 16.0,
            dropout: 0.0,
            targets: ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkvz", "in_proj_qkv", "in_proj_z", "out_proj"]
                .map(String::from)
                .to_vec(),
            checkpoint_layers: false,
            recurrent: false,
            save_every: 0,
            seed: 0,
            dtype: DType::F32,
            hidden: 64,
            layers: 4,
            vocab: 256,
        }
    }
}

/// A small random Qwen3-Next: `layers` decoder layers, three Gated DeltaNet layers to one
/// gated full-attention layer, dense MLPs, heads of 32 (64 from width 256 on).
pub fn random_config(hidden: usize, layers: usize, vocab: usize) -> Result<ModelConfig> {
    let head = if hidden >= 256 { 64 } else { 32 };
    let heads = (hidden / head).max(1);
    let types: Vec<String> = (0..layers)
        .map(|i| if i % 4 == 3 { "\"full_attention\"" } else { "\"linear_attention\"" }.to_string())
        .collect();
    ModelConfig::from_json(&format!(
        r#"{{"model_type": "qwen3_next", "vocab_size": {vocab}, "hidden_size": {hidden},
        "intermediate_size": {inter}, "num_hidden_layers": {layers}, "layer_types": [{types}],
        "num_attention_heads": {heads}, "num_key_value_heads": {kv}, "head_dim": {head},
        "linear_num_key_heads": {kv}, "linear_num_value_heads": {heads}, "linear_key_head_dim": {head},
        "linear_value_head_dim": {head}, "linear_conv_kernel_dim": 4, "num_experts": 0, "rms_norm_eps": 1e-6,
        "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}},
        "tie_word_embeddings": false}}"#,
        inter = 3 * hidden,
        types = types.join(", "),
        kv = (heads / 2).max(1),
    ))
}

/// Training tokens: a file's ids concatenated, or random sequences that repeat a random
/// pattern of 4 to 16 ids drawn with a skew towards small ids (learnable: first the ids'
/// frequencies, then, from the second repetition on, the next token is a copy).
#[derive(Clone, Debug)]
pub enum Data {
    /// All ids of the file, one document after the other.
    Tokens(Vec<i64>),
    /// Seeded random windows over a vocabulary.
    Random {
        /// The seed.
        seed: u64,
        /// Ids are in `0..vocab`.
        vocab: usize,
    },
}

/// splitmix64: a small seeded generator for the random data.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Data {
    /// Read a JSONL file: one `{"ids": [..]}` object or bare `[..]` array of token ids per
    /// line (blank lines are skipped).
    pub fn from_jsonl(path: &Path) -> Result<Data> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        let mut ids = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = |why: String| Error::Other(format!("{}:{}: {why}", path.display(), n + 1));
            let value: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
            let list = match &value {
                serde_json::Value::Array(a) => a,
                serde_json::Value::Object(o) => match o.get("ids") {
                    Some(serde_json::Value::Array(a)) => a,
                    _ => return Err(bad("an object line needs an \"ids\" array".into())),
                },
                _ => return Err(bad("expected {\"ids\": [..]} or [..]".into())),
            };
            for v in list {
                ids.push(v.as_i64().ok_or_else(|| bad(format!("token id {v} is not an integer")))?);
            }
        }
        Ok(Data::Tokens(ids))
    }

    /// Window `w` of `t` tokens.
    fn window(&self, w: usize, t: usize) -> Result<Vec<i64>> {
        match self {
            Data::Tokens(ids) => {
                let n = ids.len() / t;
                if n == 0 {
                    return Err(Error::Other(format!("the data has {} tokens, fewer than --seq-len {t}", ids.len())));
                }
                let i = w % n;
                Ok(ids[i * t..(i + 1) * t].to_vec())
            }
            Data::Random { seed, vocab } => {
                let base = splitmix(seed ^ splitmix(w as u64));
                let period = 4 + (base % 13) as usize;
                // ids skewed towards small ones (u³ of a uniform u), so the frequencies are
                // learnt in a few steps before the copying
                let pattern: Vec<i64> = (0..period)
                    .map(|j| {
                        let u = (splitmix(base.wrapping_add(j as u64)) >> 11) as f64 / (1u64 << 53) as f64;
                        ((u * u * u * *vocab as f64) as i64).min(*vocab as i64 - 1)
                    })
                    .collect();
                Ok((0..t).map(|j| pattern[j % period]).collect())
            }
        }
    }

    /// Micro-batch `index`: windows `index·b .. index·b + b`, as `[b, t]` i64 ids.
    pub fn batch(&self, index: usize, b: usize, t: usize) -> Result<Array> {
        let mut ids = Vec::with_capacity(b * t);
        for r in 0..b {
            ids.extend(self.window(index * b + r, t)?);
        }
        Ok(Array::from_vec(ids, &[b, t]))
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug)]
pub struct StepLog {
    /// The step (1-based).
    pub step: usize,
    /// The mean loss over the step's micro-batches.
    pub loss: f32,
    /// The global gradient norm before clipping.
    pub grad_norm: f32,
    /// The learning rate used.
    pub lr: f64,
    /// Tokens in the step.
    pub tokens: usize,
}

type Vg = Box<dyn Fn(&Freeze<CausalLm>, &[Array]) -> Result<nn::module::ValueAndGrad>>;

/// A training run in progress.
pub struct Trainer {
    /// The run's options.
    pub options: Options,
    /// The model; its frozen parameters are the base.
    pub model: Freeze<CausalLm>,
    /// AdamW over the trainable parameters.
    pub optimizer: AdamW,
    /// The training tokens.
    pub data: Data,
    /// Steps done.
    pub step: usize,
    /// The loss of every step done (also those before a resume).
    pub losses: Vec<f32>,
    /// What the base model and adapters are, for the log.
    pub description: String,
    value_and_grad: Vg,
}

const TRAINABLE: &str = "trainable.safetensors";
const OPTIMIZER: &str = "optimizer.safetensors";
const STATE: &str = "trainer_state.json";

impl Trainer {
    /// Build the model (loaded or random), freeze its base, set up the optimizer and the data,
    /// and continue from `options.resume` if set.
    pub fn new(options: Options) -> Result<Trainer> {
        let o = &options;
        let key = ct::random::key(o.seed);
        let mut base = match &o.model {
            Some(dir) => from_pretrained(dir, o.dtype)?,
            None => CausalLm::new(&ct::random::fold_in(&key, 1), random_config(o.hidden, o.layers, o.vocab)?, o.dtype),
        };
        base.set_gradient_checkpointing(o.checkpoint_layers);
        if o.recurrent {
            base.set_recurrence(RecurrenceMode::Recurrent);
        }
        let (model, what) = adapt(base, o, &ct::random::fold_in(&key, 2))?;
        let data = match &o.data {
            Some(path) => Data::from_jsonl(path)?,
            None => Data::Random { seed: o.seed, vocab: model.config.vocab_size },
        };
        let description = format!(
            "{} ({} layers, hidden {}, vocab {}), {what}: {} trainable of {} parameters",
            o.model.as_ref().map_or("a random Qwen3-Next".to_string(), |d| d.display().to_string()),
            model.config.num_hidden_layers,
            model.config.hidden_size,
            model.config.vocab_size,
            model.trainable_parameters().num_elements(),
            model.parameters().num_elements(),
        );
        let mut trainer = Trainer {
            optimizer: AdamW::new(o.lr, o.weight_decay),
            model,
            data,
            step: 0,
            losses: Vec::new(),
            description,
            value_and_grad: Box::new(nn::value_and_grad(|m: &Freeze<CausalLm>, b: &[Array]| m.loss(&b[0], &b[0]))),
            options,
        };
        if let Some(dir) = trainer.options.resume.clone() {
            trainer.load_checkpoint(&dir)?;
        }
        Ok(trainer)
    }

    /// The learning rate of step `s` (0-based): warm-up, then cosine decay to `min_lr`.
    pub fn lr_at(&self, s: usize) -> f64 {
        let o = &self.options;
        schedules::warmup_cosine(o.lr, o.warmup, o.steps, o.min_lr)(s)
    }

    /// Tokens per step.
    pub fn tokens_per_step(&self) -> usize {
        self.options.accum * self.options.batch * self.options.seq_len
    }

    /// One optimizer step over `accum` micro-batches; saves a checkpoint when `save_every`
    /// says so.
    pub fn step(&mut self) -> Result<StepLog> {
        let o = &self.options;
        let s = self.step;
        let lr = self.lr_at(s);
        self.optimizer.set_lr(lr);
        if o.dropout > 0.0 {
            // a fresh dropout mask per step, from the seed and the step (a resumed run draws the same)
            let key = ct::random::fold_in(&ct::random::key(o.seed ^ 0x5eed), s as u32);
            lora::set_dropout_key(&mut self.model.module, Some(&key));
        }
        let micro = (0..o.accum)
            .map(|j| Ok(vec![self.data.batch(s * o.accum + j, o.batch, o.seq_len)?]))
            .collect::<Result<Vec<_>>>()?;
        let (outs, grads) = optim::accumulate_gradients(&self.value_and_grad, &self.model, &micro)?;
        let (grads, norm) = clip_grad_norm(&grads, o.max_grad_norm);
        self.optimizer.update(&mut self.model, &grads)?;
        let (loss, grad_norm) = (outs[0].item::<f32>()?, norm.astype(DType::F32).item::<f32>()?);
        self.step += 1;
        self.losses.push(loss);
        if self.options.save_every > 0 && self.step.is_multiple_of(self.options.save_every) {
            self.save_checkpoint()?;
        }
        Ok(StepLog { step: self.step, loss, grad_norm, lr, tokens: self.tokens_per_step() })
    }

    /// The folder of the checkpoint after `step` steps.
    pub fn checkpoint_dir(&self, step: usize) -> PathBuf {
        self.options.out.join(format!("checkpoint-{step:06}"))
    }

    /// Write the trainable parameters (every array in its dtype), the optimizer state and the
    /// step and losses so far to `out/checkpoint-NNNNNN/`; returns the folder.
    pub fn save_checkpoint(&self) -> Result<PathBuf> {
        let dir = self.checkpoint_dir(self.step);
        std::fs::create_dir_all(&dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
        io::save(dir.join(TRAINABLE), &self.model.trainable_parameters(), None)?;
        self.optimizer.save_state(dir.join(OPTIMIZER))?;
        save_adapters(&self.model, &self.options, &dir)?;
        let state = serde_json::json!({ "step": self.step, "losses": self.losses });
        let path = dir.join(STATE);
        std::fs::write(&path, state.to_string()).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        Ok(dir)
    }

    /// Continue from a folder written by [`save_checkpoint`](Trainer::save_checkpoint).
    fn load_checkpoint(&mut self, dir: &Path) -> Result<()> {
        let trainable = io::load(dir.join(TRAINABLE))?;
        let expected = self.model.trainable_parameters().names();
        if trainable.names() != expected {
            return Err(Error::Other(format!(
                "{}: the checkpoint's trainable parameters are not this model's (run with the flags that wrote it)",
                dir.display()
            )));
        }
        self.model.update(&trainable)?;
        self.optimizer.init(&self.model.trainable_parameters());
        self.optimizer.load_state_file(dir.join(OPTIMIZER))?;
        let path = dir.join(STATE);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        let state: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::Other(format!("{}: {e}", path.display())))?;
        let bad = || Error::Other(format!("{}: needs \"step\" and \"losses\"", path.display()));
        self.step = state["step"].as_u64().ok_or_else(bad)? as usize;
        self.losses = state["losses"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|v| v.as_f64().map(|x| x as f32).ok_or_else(bad))
            .collect::<Result<_>>()?;
        Ok(())
    }
}

/// LoRA adapters on the layers `o.targets` names; the rest of the model (the base) is frozen:
/// a module holding adapters trains only them.
fn adapt(mut base: CausalLm, o: &Options, key: &Array) -> Result<(Freeze<CausalLm>, String)> {
    let targets: Vec<&str> = o.targets.iter().map(String::as_str).collect();
    let config = lora_config(o, &targets);
    let adapted = lora::apply(&mut base, &config, key)?;
    let what = format!("LoRA rank {} alpha {} on {} layers, base frozen", o.rank, o.alpha, adapted.len());
    Ok((Freeze::new(base, &[]), what))
}

fn lora_config(o: &Options, targets: &[&str]) -> LoraConfig {
    LoraConfig::new(o.rank, o.alpha, targets).with_dropout(o.dropout)
}

/// The adapters in PEFT's layout (`adapter_model.safetensors`, `adapter_config.json`).
fn save_adapters(model: &Freeze<CausalLm>, o: &Options, dir: &Path) -> Result<()> {
    let targets: Vec<&str> = o.targets.iter().map(String::as_str).collect();
    lora::save_adapters(&model.module, &lora_config(o, &targets), dir)
}

/// Peak resident memory of this process (VmHWM) in MiB, or the device's peak on a GPU.
pub fn peak_memory_mib() -> f64 {
    if let Some(m) = ct::default_device().memory_stats() {
        return m.peak as f64 / (1u64 << 20) as f64;
    }
    proc_status_kib("VmHWM:") / 1024.0
}

/// Resident memory now (VmRSS) in MiB, or the device's bytes in use on a GPU.
pub fn memory_mib() -> f64 {
    if let Some(m) = ct::default_device().memory_stats() {
        return m.in_use as f64 / (1u64 << 20) as f64;
    }
    proc_status_kib("VmRSS:") / 1024.0
}

fn proc_status_kib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .unwrap_or(f64::NAN)
}

/// The trainable parameters as a tree (for the final save).
pub fn trainable(model: &Freeze<CausalLm>) -> Tree {
    model.trainable_parameters()
}
