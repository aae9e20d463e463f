//! Multi-query associative recall (MQAR) with a 2-layer Gated DeltaNet.
//!
//! Each sequence lists key–value pairs, then asks for the values of the keys again (Zoology,
//! Arora et al. 2023):
//!
//! ```text
//! k1 v1 k2 v2 ... kP vP  0 0 k2 v2 0 k1 v1 0 ...
//!                              ^^       ^^  the model must predict these values
//! ```
//!
//! From the workspace root:
//!
//! ```text
//! cargo run --release --example mqar                      # train, plot, save a checkpoint
//! cargo run --release --example mqar -- --eval target/mqar/mqar.safetensors
//! cargo run --release --example mqar -- --recurrent       # recurrence op by op, not chunked
//! cargo run --release --example mqar -- --stop-after 100 --print-losses   # losses, bit for bit
//! cargo run --release --example mqar -- --help
//! COTANGENT_DEVICE=cuda cargo run --release --features cuda --example mqar -- --hard   # on a GPU
//! ```
//!
//! `--hard` is the Zoology-scale setting (64 pairs, length 512, vocabulary 8192, width 128;
//! see `Config::hard` in `model.rs`). Measured on an NVIDIA H200 (2026-12-06, two seeds run at
//! once on the one GPU): 99.07 % held-out accuracy at step 1500 in 137 s (seed 1) and 99.03 % at
//! step 2500 in 184 s (seed 0), 2.4 GiB peak device memory; one process alone trains at 712k
//! tokens/s there, against 3.2k tokens/s on the 2-core CPU. GPU runs are not bit-reproducible
//! (two runs of the default setting differ in the last bit of the loss from step 5; the CUDA
//! scatter-add behind the embedding gradient sums with atomics), so the step at which a
//! seed leaves the plateau varies between runs: seed 0 left it at step 550 in one run and 850
//! in another.
//!
//! Training writes `target/mqar/mqar.png` (loss and held-out accuracy; `plot.rs`, with the
//! pixel font of `font.rs`) and the checkpoint `target/mqar/mqar.safetensors`, in the
//! workspace's `target/` directory whatever the current directory (`--out` changes this).
//! `--eval` needs the model and data flags that trained the checkpoint (`--dim`, `--pairs`, ...).
//!
//! Measured on the 2-core development machine, shared with other builds (times vary up to ×2
//! with their load; one seed each):
//!
//! - The default (4 pairs, width 64, batch 32, lr 0.01, 1500 steps), 2026-12-06: 99.56 % at
//!   step 800 (61 s), 100 % at step 1300 (99 s, 26.9k tokens/s), peak memory (VmHWM) 95 MiB.
//! - `--compile` (the loss and its gradients through `ct::compile`, 2026-12-06): the same
//!   losses bit for bit (test `mqar_data`) and the same 89.26 % at step 300, 5 % *slower* on
//!   this CPU (18.7 / 18.0 s against 19.8 / 18.9 s for 300 steps; the step is bound by its
//!   products and the recurrence, not by per-op cost). Not yet measured on a GPU, where the
//!   step is launch-bound and fusion may pay.
//! - The two 8-pair runs below were measured on 2026-12-03, before the data generator and the
//!   loss took their present form (query positions and answers; logits only at the queries).
//! - 8 pairs at the default width 64 learn too slowly: `--pairs 8` reaches 97.8 % after 1500
//!   steps (251 s), and a longer schedule (`--steps 2000`) only 97.6 % (361 s).
//! - Width is what helps: `--pairs 8 --dim 96 --stop-at 0.99` reaches 99.07 % at step 400
//!   (93 s; a step costs 1.5× that of width 64). Keep the long schedule: with `--steps 600` the
//!   learning rate decays before the jump, and the same model reaches only 91.8 % (194 s).
use cotangent::{self as ct, Result};
use cotangent_nn::{self as nn, Module};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::time::Instant;

mod font;
mod model;
mod plot;

use model::{evaluate, mqar_batch, Batch, Config, LanguageModel, Rng, Training};

// ---------------------------------------------------------------------------------------------
// Settings

const HELP: &str = "mqar: train a 2-layer Gated DeltaNet on multi-query associative recall

options (defaults in brackets):
  --hard           the Zoology-scale setting, for a GPU: 64 pairs, length 512, vocab 8192,
                   width 128, 2 heads of width 128, tied head, chunks of 64, batch 64, lr 0.01,
                   4000 steps, stop at 99 %; later flags still apply
  --vocab N        vocabulary size; keys use the lower half, values the upper [64]
  --pairs N        key-value pairs per sequence [4]
  --seq-len N      sequence length [64]
  --dim N          model width [64]
  --heads N        heads of the delta-rule layers [2]
  --head-dim N     key and value width of each head [dim / heads]
  --tie-head       logits from the embedding matrix instead of an output projection
  --compile        loss and gradients through ct::compile (traced once, then replayed)
  --batch N        sequences per step [32]
  --steps N        training steps [1500]
  --lr X           peak learning rate (AdamW, warmup + cosine) [0.01]
  --seed N         seed for data and initialisation [0]
  --chunk N        chunk length of the recurrence [16]
  --recurrent      run the recurrence op by op instead of chunked
  --test-size N    held-out sequences [512]
  --eval-every N   evaluate every N steps [100]
  --stop-at X      stop once held-out accuracy reaches X [1.0]
  --out PREFIX     writes PREFIX.png and PREFIX.safetensors [target/mqar/mqar]
  --eval FILE      only evaluate the checkpoint FILE on the held-out set
  --stop-after N   stop after N steps, keeping the schedule of --steps [all]
  --print-losses   print every step's loss as `loss STEP BITS VALUE` (BITS: the f32 bits in hex),
                   e.g. to check that runs with different thread counts agree bit for bit";

fn parse_args() -> Config {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // the preset first, so that flags after it (or before it) override its values
    let mut c = if args.iter().any(|a| a == "--hard") { Config::hard() } else { Config::default() };
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let mut value = || {
            i += 1;
            args.get(i).cloned().unwrap_or_else(|| panic!("{flag} needs a value"))
        };
        let num = |s: String| s.parse::<usize>().unwrap_or_else(|_| panic!("{flag}: not a number: {s}"));
        match flag {
            "--vocab" => c.vocab = num(value()),
            "--pairs" => c.pairs = num(value()),
            "--seq-len" => c.seq_len = num(value()),
            "--dim" => c.dim = num(value()),
            "--heads" => c.heads = num(value()),
            "--head-dim" => c.head_dim = Some(num(value())),
            "--tie-head" => c.tie_head = true,
            "--compile" => c.compile = true,
            "--hard" => {}
            "--batch" => c.batch = num(value()),
            "--steps" => c.steps = num(value()),
            "--lr" => c.lr = value().parse().expect("--lr: not a number"),
            "--seed" => c.seed = value().parse().expect("--seed: not a number"),
            "--chunk" => c.chunk = num(value()),
            "--recurrent" => c.recurrent = true,
            "--test-size" => c.test_size = num(value()),
            "--eval-every" => c.eval_every = num(value()),
            "--stop-at" => c.stop_at = value().parse().expect("--stop-at: not a number"),
            "--out" => c.out = value(),
            "--eval" => c.eval = Some(value()),
            "--stop-after" => c.stop_after = Some(num(value())),
            "--print-losses" => c.print_losses = true,
            "--help" | "-h" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            other => panic!("unknown option {other}; see --help"),
        }
        i += 1;
    }
    assert!(c.vocab >= 2 * c.pairs + 2, "--vocab must leave room for {} distinct keys and values", c.pairs);
    assert!(c.seq_len >= 4 * c.pairs, "--seq-len must be at least 4 × pairs");
    c
}

/// Peak resident memory of this process (VmHWM), in MiB.
fn peak_memory_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

// ---------------------------------------------------------------------------------------------

fn main() -> Result<()> {
    let c = parse_args();
    let mut test_rng = Rng(c.seed ^ 0x5EED_7E57);
    let test: Vec<Batch> =
        (0..c.test_size).step_by(128).map(|i| mqar_batch(&mut test_rng, 128.min(c.test_size - i), &c)).collect();

    if let Some(path) = &c.eval {
        let mut model = LanguageModel::new(&ct::random::key(c.seed), &c);
        nn::io::load_into(&mut model, path)?;
        let acc = evaluate(&model, &test)?;
        println!("{path}: held-out query accuracy {:.2}% on {} sequences", 100.0 * acc, c.test_size);
        return Ok(());
    }

    if ct::default_device() == ct::Device::Cpu && c.batch * c.seq_len * c.steps >= 100_000_000 {
        eprintln!(
            "note: {} steps of {} tokens is sized for a GPU (an H200 trains `--hard` at ~700k tokens/s, \
             a 2-core CPU at ~3k); with the `cuda` feature, COTANGENT_DEVICE=cuda runs it there",
            c.steps,
            c.batch * c.seq_len
        );
    }
    let mut training = Training::new(&c);
    training.model.parameters().eval()?;
    println!(
        "MQAR: vocab {}, {} pairs, length {}; 2-layer Gated DeltaNet, dim {}, {} heads of width {}, {} parameters, recurrence {}, on {:?}",
        c.vocab,
        c.pairs,
        c.seq_len,
        c.dim,
        c.heads,
        c.head_dim.unwrap_or(c.dim / c.heads),
        training.model.parameters().num_elements(),
        if c.recurrent { "op by op".to_string() } else { format!("in chunks of {}", c.chunk) },
        ct::default_device()
    );
    ct::default_device().reset_peak_memory();

    let bar = ProgressBar::new(c.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise}] {msg}").expect("valid template"),
    );
    let start = Instant::now();
    let (mut losses, mut accs) = (Vec::new(), Vec::new());
    let mut tokens = 0usize;
    let mut best = 0.0;
    for step in 0..c.steps.min(c.stop_after.unwrap_or(usize::MAX)) {
        let result = training.step()?;
        if c.print_losses {
            // on stdout even beside a progress bar (which draws on stderr), for `| grep '^loss'`
            bar.suspend(|| println!("loss {} {:08x} {}", step + 1, result.loss.to_bits(), result.loss));
        }
        let (loss, train_acc) = (result.loss as f64, result.train_acc);
        tokens += c.batch * c.seq_len;
        losses.push((step + 1, loss));
        let tok_s = tokens as f64 / start.elapsed().as_secs_f64();
        bar.set_message(format!("loss {loss:.4}  query acc {:5.1}%  {tok_s:.0} tok/s", 100.0 * train_acc));
        bar.inc(1);
        if (step + 1) % c.eval_every == 0 || step + 1 == c.steps {
            let acc = evaluate(&training.model, &test)?;
            accs.push((step + 1, acc));
            best = f64::max(best, acc);
            let line = format!(
                "step {:5}  loss {loss:.4}  held-out query accuracy {:6.2}%  ({:.0} s)",
                step + 1,
                100.0 * acc,
                start.elapsed().as_secs_f64()
            );
            if bar.is_hidden() {
                println!("{line}");
            } else {
                bar.println(line);
            }
            if acc >= c.stop_at {
                break;
            }
        }
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    // a run cut short by --stop-after between evaluations is still reported with its accuracy
    if accs.last().map(|a| a.0) != losses.last().map(|l| l.0) {
        let acc = evaluate(&training.model, &test)?;
        accs.push((losses.len(), acc));
        best = f64::max(best, acc);
    }
    let final_acc = accs.last().map_or(0.0, |a| a.1);
    let device_peak = match ct::default_device().memory_stats() {
        Some(m) => format!(", peak device memory {:.0} MiB", m.peak as f64 / (1 << 20) as f64),
        None => String::new(),
    };
    println!(
        "trained {} steps in {secs:.1} s ({:.0} tok/s); held-out query accuracy {:.2}% (best {:.2}%); peak memory (VmHWM) {:.0} MiB{device_peak}",
        losses.len(),
        tokens as f64 / secs,
        100.0 * final_acc,
        100.0 * best,
        peak_memory_mib()
    );

    if let Some(dir) = Path::new(&c.out).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let ckpt = format!("{}.safetensors", c.out);
    nn::io::save(&ckpt, &training.model.parameters(), None)?;
    let png = format!("{}.png", c.out);
    let title = format!(
        "MQAR, {} pairs, length {}: {:.2}% query accuracy after {} steps, {secs:.0} s",
        c.pairs,
        c.seq_len,
        100.0 * final_acc,
        losses.len()
    );
    match plot::write_png(&png, &title, &losses, &accs) {
        Ok(()) => println!("wrote {png} (left: training loss, right: held-out accuracy) and {ckpt}"),
        Err(e) => println!("wrote {ckpt}; plot failed: {e}"),
    }
    // reload the checkpoint and check it evaluates the same
    let mut reloaded = LanguageModel::new(&ct::random::key(c.seed + 1), &c);
    nn::io::load_into(&mut reloaded, &ckpt)?;
    println!("reloaded {ckpt}: held-out query accuracy {:.2}%", 100.0 * evaluate(&reloaded, &test)?);
    let flags: String = std::env::args().skip(1).map(|a| format!(" {a}")).collect();
    println!("evaluate it again with: cargo run --release --example mqar -- --eval {ckpt}{flags}");
    Ok(())
}
