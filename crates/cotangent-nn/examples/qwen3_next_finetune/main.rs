//! Fine-tune a Qwen3-Next linear-attention decoder layer loaded from a Hugging Face-layout
//! safetensors checkpoint.
//!
//! From the workspace root:
//!
//! ```text
//! cargo run --release --example qwen3_next_finetune
//! cargo run --release --example qwen3_next_finetune -- \
//!     --checkpoint crates/cotangent-nn/tests/qwen3_next/decoder_grouped_t70.safetensors
//! cargo run --release --example qwen3_next_finetune -- --help
//! ```
//!
//! Without `--checkpoint` it first writes a randomly initialised layer as a checkpoint would
//! hold it — tensors `model.layers.0.linear_attn.in_proj_qkvz.weight`, ... in bf16, the
//! `Qwen3NextConfig` fields in the metadata — to `target/qwen3_next/random_layer.safetensors`.
//! It then reads the config from the file's metadata, loads the layer's tensors by name
//! (converted to f32; a missing, extra or mis-shaped tensor stops it with all of them named),
//! puts a fresh embedding and output head around it and trains all of it with AdamW on a toy
//! recall task: at every position, predict the token seen `--lag` steps earlier (by default 4,
//! one step further back than the kernel-4 convolution reaches, so the delta-rule state must
//! carry it). It prints the loss and accuracy as they improve and saves the fine-tuned layer in
//! the same layout to `target/qwen3_next/finetuned_layer.safetensors`. Arrays live on the
//! default device (`COTANGENT_DEVICE`).
//!
//! Measured on the shared 2-core development machine (built with `--profile test`, 2026-12-03):
//! the default run goes from loss 2.90 (chance 2.77) to 1.09 at step 100 and 0.0065 at step
//! 300 (99.8 % accuracy), 46 s. With `--lag 6` the same 300 steps stay at chance: the layer
//! starts with transformers' init `A = U(0.01, 16)`, whose decay forgets within a step or two.
use cotangent::{self as ct, Array, DType, Result};
use cotangent_nn::losses::{cross_entropy, Reduction};
use cotangent_nn::optim::{clip_grad_norm, schedules, AdamW, Optimizer};
use cotangent_nn::qwen3_next::{Qwen3NextConfig, Qwen3NextDecoderLayer, Qwen3NextRMSNorm};
use cotangent_nn::{self as nn, io, Embedding, Linear, Module, RecurrenceMode, Tree, Visitor};
use std::path::{Path, PathBuf};
use std::time::Instant;

const HELP: &str = "qwen3_next_finetune: fine-tune a Qwen3-Next decoder layer from a safetensors checkpoint

  --checkpoint FILE  Hugging Face-layout safetensors with the config in its metadata
                     [default: write a random layer to target/qwen3_next/random_layer.safetensors]
  --prefix P         tensor name prefix of the layer [model.layers.0.]
  --hidden N         width of the random layer written without --checkpoint [64]
  --vocab N          vocabulary of the toy task [16]
  --lag N            predict the token seen N steps earlier [4]
  --seq-len N        sequence length [64]
  --batch N          sequences per step [16]
  --steps N          training steps [300]
  --lr X             peak learning rate (AdamW, warmup + cosine) [0.01]
  --chunk N          chunk length of the gated delta rule; 0 = op by op [64]
  --seed N           seed [0]";

struct Options {
    checkpoint: Option<PathBuf>,
    prefix: String,
    hidden: usize,
    vocab: usize,
    lag: usize,
    seq_len: usize,
    batch: usize,
    steps: usize,
    lr: f64,
    chunk: usize,
    seed: u64,
}

fn parse_args() -> Options {
    let mut o = Options {
        checkpoint: None,
        prefix: "model.layers.0.".into(),
        hidden: 64,
        vocab: 16,
        lag: 4,
        seq_len: 64,
        batch: 16,
        steps: 300,
        lr: 1e-2,
        chunk: 64,
        seed: 0,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let mut value = || {
            i += 1;
            args.get(i).cloned().unwrap_or_else(|| panic!("{flag} needs a value"))
        };
        let number = |s: String| s.parse::<usize>().unwrap_or_else(|_| panic!("{flag}: not a number: {s}"));
        match flag {
            "--checkpoint" => o.checkpoint = Some(value().into()),
            "--prefix" => o.prefix = value(),
            "--hidden" => o.hidden = number(value()),
            "--vocab" => o.vocab = number(value()),
            "--lag" => o.lag = number(value()),
            "--seq-len" => o.seq_len = number(value()),
            "--batch" => o.batch = number(value()),
            "--steps" => o.steps = number(value()),
            "--lr" => o.lr = value().parse().expect("--lr: not a number"),
            "--chunk" => o.chunk = number(value()),
            "--seed" => o.seed = value().parse().expect("--seed: not a number"),
            "--help" | "-h" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            other => panic!("unknown option {other}; see --help"),
        }
        i += 1;
    }
    assert!(o.lag < o.seq_len, "--lag must be below --seq-len");
    o
}

/// The fine-tuned model: a new embedding and head around the loaded decoder layer.
#[derive(Clone)]
struct Model {
    embed: Embedding,
    layer: Qwen3NextDecoderLayer,
    norm: Qwen3NextRMSNorm,
    head: Linear,
}

impl Model {
    /// Logits `[B, T, vocab]` for tokens `[B, T]`.
    fn forward(&self, tokens: &Array) -> Result<Array> {
        let h = self.layer.forward(&self.embed.forward(tokens))?;
        Ok(self.head.forward(&self.norm.forward(&h)))
    }
}

impl Module for Model {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("embed", &mut self.embed);
        v.child("layer", &mut self.layer);
        v.child("norm", &mut self.norm);
        v.child("head", &mut self.head);
    }
}

/// The layer's parameters under `prefix`, as a checkpoint names them.
fn checkpoint_tree(layer: &Qwen3NextDecoderLayer, prefix: &str) -> Result<Tree> {
    Tree::unflatten(layer.parameters().flatten().into_iter().map(|(n, a)| (format!("{prefix}{n}"), a)))
}

/// The workspace's `target/qwen3_next/` directory.
fn output_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("crates/cotangent-nn");
    let dir = workspace.join("target/qwen3_next");
    std::fs::create_dir_all(&dir).expect("creating target/qwen3_next");
    dir
}

/// Write a randomly initialised layer as a bf16 checkpoint with its config in the metadata.
fn write_random_checkpoint(o: &Options) -> Result<PathBuf> {
    let config = Qwen3NextConfig::small(o.hidden);
    let layer = Qwen3NextDecoderLayer::new(&ct::random::key(o.seed + 1000), config, DType::F32);
    let path = output_dir().join("random_layer.safetensors");
    io::save_with_metadata(&path, &checkpoint_tree(&layer, &o.prefix)?, Some(DType::BF16), &config.to_fields())?;
    println!("wrote a random layer ({config:?}) to {}", path.display());
    Ok(path)
}

/// Tokens `[B, T]` and the targets at positions `lag..T`: the tokens `lag` steps earlier.
fn batch(key: &Array, o: &Options) -> (Array, Array) {
    let tokens = ct::random::randint(key, 0, o.vocab as i64, &[o.batch, o.seq_len], DType::I32);
    let targets = tokens.slice_axis(1, Some(0), Some((o.seq_len - o.lag) as isize), 1);
    (tokens, targets)
}

/// Mean cross-entropy over the positions that have a target, and their accuracy.
fn loss_and_accuracy(model: &Model, data: &[Array], lag: usize) -> Result<Vec<Array>> {
    let logits = model.forward(&data[0])?.slice_axis(1, Some(lag as isize), None, 1);
    let loss = cross_entropy(&logits, &data[1], 0.0, Reduction::Mean);
    let correct = logits.argmax(-1, false).astype(DType::I32).equal(&data[1]).astype(DType::F32).mean_all();
    Ok(vec![loss, ct::stop_gradient(&correct)])
}

fn main() -> Result<()> {
    let o = parse_args();
    let path = match &o.checkpoint {
        Some(p) => p.clone(),
        None => write_random_checkpoint(&o)?,
    };
    let meta = io::load_metadata(&path)?;
    let mut config = Qwen3NextConfig::from_fields(|k| meta.get(k).cloned())?;
    config.recurrence = if o.chunk == 0 { RecurrenceMode::Recurrent } else { RecurrenceMode::Chunked(o.chunk) };
    let keys = ct::random::split_keys(&ct::random::key(o.seed), 4);
    let mut layer = Qwen3NextDecoderLayer::new(&keys[0], config, DType::F32);
    io::load_into_with_prefix(&mut layer, &path, &o.prefix)?;
    println!(
        "loaded {} tensors ({} values) under `{}` from {}",
        layer.parameters().len(),
        layer.parameters().num_elements(),
        o.prefix,
        path.display()
    );

    let hidden = config.hidden_size;
    let mut model = Model {
        embed: Embedding::new(&keys[1], o.vocab, hidden, DType::F32),
        layer,
        norm: Qwen3NextRMSNorm::new(hidden, config.rms_norm_eps, DType::F32),
        head: Linear::new(&keys[2], hidden, o.vocab, false, DType::F32),
    };
    let lag = o.lag;
    let value_and_grad = nn::value_and_grad(move |m: &Model, data: &[Array]| loss_and_accuracy(m, data, lag));
    let mut optimizer = AdamW::new(o.lr, 0.01);
    let schedule = schedules::warmup_cosine(o.lr, o.steps / 20 + 1, o.steps, o.lr / 20.0);
    let chance = (o.vocab as f64).ln();
    println!("task: predict the token {lag} steps back (chance loss {chance:.3}), {} steps", o.steps);
    let start = Instant::now();
    let (mut first, mut recent) = (None, Vec::new());
    for step in 0..o.steps {
        let (tokens, targets) = batch(&ct::random::fold_in(&keys[3], step as u32), &o);
        let (outs, grads) = value_and_grad(&model, &[tokens, targets])?;
        let (grads, _) = clip_grad_norm(&grads, 1.0);
        optimizer.set_lr(schedule(step));
        optimizer.update(&mut model, &grads)?;
        let (loss, accuracy) = (outs[0].item::<f32>()?, outs[1].item::<f32>()?);
        first.get_or_insert(loss);
        recent.push((loss, accuracy));
        if (step + 1) % 25 == 0 || step + 1 == o.steps {
            let n = recent.len() as f32;
            let (l, a) = recent.drain(..).fold((0.0, 0.0), |(l, a), (x, y)| (l + x / n, a + y / n));
            println!(
                "step {:>4}  loss {l:.4}  accuracy {:>5.1} %  ({:.1} s)",
                step + 1,
                100.0 * a,
                start.elapsed().as_secs_f64()
            );
        }
    }
    let out = output_dir().join("finetuned_layer.safetensors");
    io::save_with_metadata(&out, &checkpoint_tree(&model.layer, &o.prefix)?, None, &config.to_fields())?;
    println!("first loss {:.4}; saved the fine-tuned layer to {}", first.unwrap_or(f32::NAN), out.display());
    Ok(())
}
