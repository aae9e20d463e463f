//! Fine-tune a Qwen3-Next / Qwen3.5 causal LM on token ids: the base frozen, AdamW with
//! warm-up and cosine decay, global-norm clipping, gradient accumulation, optional
//! per-layer checkpointing, periodic checkpoints and `--resume`.
//!
//! From the workspace root:
//!
//! ```text
//! cargo run --release -p cotangent-nn --example qwen3_next_finetune -- --steps 50
//! cargo run --release -p cotangent-nn --example qwen3_next_finetune -- \
//!     --model DIR --data ids.jsonl --dtype bf16 --seq-len 1024 --accum 4 --checkpoint-layers
//! cargo run --release -p cotangent-nn --example qwen3_next_finetune -- --resume target/qwen3_next_finetune/checkpoint-000025
//! cargo run --release -p cotangent-nn --example qwen3_next_finetune -- --help
//! ```
//!
//! `--data` is a JSONL file with one `{"ids": [..]}` object or bare `[..]` array of token ids
//! per line; the documents are concatenated and cut into windows of `--seq-len` tokens, taken
//! in order (step `s`, micro-batch `j` reads windows `(s·accum + j)·batch ..`), so a step's data
//! depends only on its number. Without `--model` the example builds a small random
//! Qwen3-Next-shaped model (`--hidden`, `--layers`; three Gated DeltaNet layers to one full
//! attention layer, dense MLPs), and without `--data` it trains on seeded random sequences
//! that repeat a random pattern (a copy task the attention layers can learn).
//!
//! What trains: the LoRA adapters (`--rank`, `--alpha`, `--targets`) once `cotangent_nn::lora`
//! is in the build; in this build, whose library has no LoRA module yet, every parameter but
//! the embedding (frozen with `Freeze`). Progress (loss, tokens/s, memory: the device's bytes
//! on a GPU, the process's resident memory on the CPU) is drawn on stderr by indicatif;
//! `--print-losses` also prints each loss with its f32 bits on stdout. At the end the loss curve
//! is written to `OUT/loss.png` and the trainable parameters to `OUT/trainable.safetensors`;
//! every `--save-every` steps the trainable parameters, the optimizer state (moments, step,
//! learning rate) and the losses so far go to `OUT/checkpoint-NNNNNN/`. `--resume` that folder
//! (with the same other flags) continues bit for bit on the CPU: `tests/finetune.rs` checks
//! it, and that the first 20 losses do not depend on the number of CPU threads.
use cotangent::{self as ct, DType, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;

mod finetune;
#[allow(dead_code)]
#[path = "../mqar/font.rs"]
mod font;
#[allow(dead_code)]
#[path = "../mqar/plot.rs"]
mod plot;

use finetune::{Options, Trainer};

const HELP: &str = "qwen3_next_finetune: fine-tune a Qwen3-Next / Qwen3.5 causal LM on token ids

  --model DIR            Hugging Face folder [default: a random Qwen3-Next-shaped model]
  --data FILE            JSONL of token ids ({\"ids\": [..]} or [..] per line) [default: random]
  --out DIR              checkpoints, loss.png, final trainable parameters [target/qwen3_next_finetune]
  --resume DIR           continue from a checkpoint folder (same other flags)
  --steps N              total optimizer steps [100]
  --seq-len N            tokens per sequence [128]
  --batch N              sequences per micro-batch [2]
  --accum N              micro-batches per step (gradient accumulation) [2]
  --lr X                 peak learning rate [0.002]
  --warmup N             warm-up steps [10]
  --min-lr X             learning rate at the end of the cosine decay [0.0002]
  --weight-decay X       AdamW decoupled weight decay [0]
  --max-grad-norm X      global-norm clipping [1]
  --rank N --alpha X --dropout X --targets a,b,c   LoRA settings [8, 16, 0, q_proj,k_proj,v_proj,o_proj,in_proj_qkvz,in_proj_qkv,in_proj_z,out_proj]
  --checkpoint-layers    recompute each decoder layer in the backward pass
  --recurrent            gated delta recurrence op by op (default: chunked)
  --save-every N         checkpoint every N steps (0: never) [0]
  --dtype f32|bf16|f16   dtype of the base model [f32]
  --hidden N --layers N --vocab N   the random model [64, 4, 256]
  --seed N               seed [0]
  --print-losses         print each loss and its f32 bits on stdout
  --no-progress          no progress bar";

fn parse_args() -> (Options, bool, bool) {
    let mut o = Options::default();
    let (mut print_losses, mut progress) = (false, true);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let mut value = || {
            i += 1;
            args.get(i).cloned().unwrap_or_else(|| panic!("{flag} needs a value; see --help"))
        };
        fn num<T: std::str::FromStr>(flag: &str, s: String) -> T {
            s.parse().unwrap_or_else(|_| panic!("{flag}: `{s}` is not a number; see --help"))
        }
        match flag {
            "--model" => o.model = Some(value().into()),
            "--data" => o.data = Some(value().into()),
            "--out" => o.out = value().into(),
            "--resume" => o.resume = Some(value().into()),
            "--steps" => o.steps = num(flag, value()),
            "--seq-len" => o.seq_len = num(flag, value()),
            "--batch" => o.batch = num(flag, value()),
            "--accum" => o.accum = num(flag, value()),
            "--lr" => o.lr = num(flag, value()),
            "--warmup" => o.warmup = num(flag, value()),
            "--min-lr" => o.min_lr = num(flag, value()),
            "--weight-decay" => o.weight_decay = num(flag, value()),
            "--max-grad-norm" => o.max_grad_norm = num(flag, value()),
            "--rank" => o.rank = num(flag, value()),
            "--alpha" => o.alpha = num(flag, value()),
            "--dropout" => o.dropout = num(flag, value()),
            "--targets" => o.targets = value().split(',').map(String::from).collect(),
            "--checkpoint-layers" => o.checkpoint_layers = true,
            "--recurrent" => o.recurrent = true,
            "--save-every" => o.save_every = num(flag, value()),
            "--dtype" => {
                o.dtype = match value().as_str() {
                    "f32" => DType::F32,
                    "bf16" => DType::BF16,
                    "f16" => DType::F16,
                    other => panic!("--dtype {other}: use f32, bf16 or f16"),
                }
            }
            "--hidden" => o.hidden = num(flag, value()),
            "--layers" => o.layers = num(flag, value()),
            "--vocab" => o.vocab = num(flag, value()),
            "--seed" => o.seed = num(flag, value()),
            "--print-losses" => print_losses = true,
            "--no-progress" => progress = false,
            "--help" | "-h" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            other => panic!("unknown option {other}; see --help"),
        }
        i += 1;
    }
    assert!(o.accum > 0 && o.batch > 0 && o.seq_len > 1, "--accum and --batch must be positive, --seq-len above 1");
    (o, print_losses, progress)
}

fn main() -> Result<()> {
    let (options, print_losses, progress) = parse_args();
    let out: PathBuf = options.out.clone();
    std::fs::create_dir_all(&out).map_err(|e| ct::Error::Io(format!("{}: {e}", out.display())))?;
    let mut trainer = Trainer::new(options)?;
    let o = trainer.options.clone();
    println!("{}", trainer.description);
    println!(
        "{} steps of {} × {} × {} tokens (accum × batch × seq-len), {} recurrence{}, on {:?}{}",
        o.steps,
        o.accum,
        o.batch,
        o.seq_len,
        if o.recurrent { "op-by-op" } else { "chunked" },
        if o.checkpoint_layers { ", checkpointed layers" } else { "" },
        ct::default_device(),
        o.resume.as_ref().map_or(String::new(), |d| format!(", resumed at step {} from {}", trainer.step, d.display())),
    );
    ct::default_device().reset_peak_memory();
    let bar = if progress { ProgressBar::new(o.steps as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise}] {msg}").expect("valid template"),
    );
    bar.set_position(trainer.step as u64);
    let start = Instant::now();
    let (mut tokens, first) = (0usize, trainer.step);
    while trainer.step < o.steps {
        let log = trainer.step()?;
        tokens += log.tokens;
        if print_losses {
            bar.suspend(|| println!("loss {} {:08x} {}", log.step, log.loss.to_bits(), log.loss));
        }
        bar.set_message(format!(
            "loss {:.4}  |g| {:.3}  lr {:.2e}  {:.0} tok/s  {:.0} MiB",
            log.loss,
            log.grad_norm,
            log.lr,
            tokens as f64 / start.elapsed().as_secs_f64(),
            finetune::memory_mib()
        ));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "steps {}..{} in {secs:.1} s: {:.0} tokens/s, peak memory {:.0} MiB ({}); loss {:.4} -> {:.4}",
        first + 1,
        trainer.step,
        tokens as f64 / secs,
        finetune::peak_memory_mib(),
        if ct::default_device().memory_stats().is_some() { "device" } else { "VmHWM" },
        trainer.losses.first().copied().unwrap_or(f32::NAN),
        trainer.losses.last().copied().unwrap_or(f32::NAN),
    );
    let saved = out.join("trainable.safetensors");
    cotangent_nn::io::save(&saved, &finetune::trainable(&trainer.model), None)?;
    let curve: Vec<(usize, f64)> = trainer.losses.iter().enumerate().map(|(i, &l)| (i + 1, l as f64)).collect();
    let png = out.join("loss.png");
    let title = format!("qwen3_next_finetune: {} steps, seq-len {}", trainer.step, o.seq_len);
    match plot::write_curve_png(&png.to_string_lossy(), &title, "training loss", &curve) {
        Ok(()) => println!("wrote {} and {}", png.display(), saved.display()),
        Err(e) => println!("wrote {}; the plot failed: {e}", saved.display()),
    }
    Ok(())
}
