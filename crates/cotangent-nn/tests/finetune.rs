//! Whole-model training (issue 43): per-decoder-layer checkpointing in `CausalLm` gives the
//! same loss and gradients; the `qwen3_next_finetune` example's training (its logic,
//! `examples/qwen3_next_finetune/finetune.rs`, is included here) gives bit-identical losses
//! with 1 and 2 CPU threads (each in a child process: the kernel pool is sized once per
//! process) and continues bit for bit from a checkpoint with `resume`.
use cotangent::{self as ct, Array, DType};
use cotangent_nn::models::CausalLm;
use cotangent_nn::{self as nn, Freeze, Module};

#[allow(dead_code)]
#[path = "../examples/qwen3_next_finetune/finetune.rs"]
mod finetune;

fn tiny_model(dtype: DType) -> CausalLm {
    // 4 layers: three Gated DeltaNet layers and one gated full-attention layer
    CausalLm::new(&ct::random::key(5), finetune::random_config(32, 4, 64).unwrap(), dtype)
}

fn ids(b: usize, t: usize) -> Array {
    finetune::Data::Random { seed: 3, vocab: 64 }.batch(0, b, t).unwrap()
}

#[test]
fn checkpointed_layers_give_the_same_loss_and_gradients() {
    // t = 70: one segment of 64 steps plus a shorter one in the linear layers
    let x = ids(2, 70);
    for dtype in [DType::F32, DType::F64] {
        let mut model = Freeze::new(tiny_model(dtype), &["model.embed_tokens"]);
        let vg = nn::value_and_grad(|m: &Freeze<CausalLm>, b: &[Array]| m.loss(&b[0], &b[0]));
        let (plain_loss, plain) = vg(&model, &[x.clone()]).unwrap();
        model.module.set_gradient_checkpointing(true);
        let (ckpt_loss, ckpt) = vg(&model, &[x.clone()]).unwrap();
        assert_eq!(plain_loss[0].item::<f32>().unwrap(), ckpt_loss[0].item::<f32>().unwrap(), "{dtype}");
        assert_eq!(plain.names(), ckpt.names());
        assert!(!plain.names().iter().any(|n| n.starts_with("model.embed_tokens")));
        // the same computation, recomputed: equal bit for bit on the CPU
        let exact = ct::default_device() == ct::Device::Cpu;
        for ((name, a), (_, b)) in plain.flatten().iter().zip(ckpt.flatten()) {
            let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
            if exact {
                assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{dtype} `{name}` differs");
            } else {
                let scale = a.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
                let err = a.iter().zip(&b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale;
                assert!(err <= 1e-5, "{dtype} `{name}`: relative difference {err}");
            }
        }
    }
}

fn small_options(out: &std::path::Path) -> finetune::Options {
    finetune::Options {
        out: out.to_path_buf(),
        steps: 20,
        seq_len: 32,
        batch: 2,
        accum: 2,
        hidden: 32,
        layers: 4,
        vocab: 64,
        warmup: 4,
        save_every: 10,
        checkpoint_layers: true,
        ..finetune::Options::default()
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cotangent_finetune_{name}_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const CHILD: &str = "COTANGENT_NN_FINETUNE_CHILD";

/// Prints the example's first 20 losses (f32 bits) when run as a child of
/// `finetune_losses_are_bit_identical_across_thread_counts`.
#[test]
fn print_finetune_losses_in_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let dir = temp_dir(&format!("child_{}", std::env::var("COTANGENT_NUM_THREADS").unwrap_or_default()));
    let mut trainer = finetune::Trainer::new(finetune::Options { save_every: 0, ..small_options(&dir) }).unwrap();
    for _ in 0..20 {
        let log = trainer.step().unwrap();
        println!("LOSS {} {:08x}", log.step, log.loss.to_bits());
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn finetune_losses_are_bit_identical_across_thread_counts() {
    let exe = std::env::current_exe().unwrap();
    let run = |threads: &str| -> Vec<String> {
        let out = std::process::Command::new(&exe)
            .args(["--exact", "print_finetune_losses_in_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("COTANGENT_NUM_THREADS", threads)
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .expect("run the test binary as a child");
        assert!(out.status.success(), "child with {threads} threads failed: {}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.find("LOSS ").map(|i| l[i..].to_string()))
            .collect();
        assert_eq!(lines.len(), 20, "child with {threads} threads printed {lines:?}");
        lines
    };
    let one = run("1");
    let two = run("2");
    if ct::default_device() == ct::Device::Cpu {
        assert_eq!(one, two, "1 thread against 2");
    }
    let loss = |line: &str| f32::from_bits(u32::from_str_radix(line.split(' ').nth(2).unwrap(), 16).unwrap());
    let mean = |lines: &[String]| lines.iter().map(|l| loss(l)).sum::<f32>() / lines.len() as f32;
    let (first, last) = (mean(&one[..3]), mean(&one[15..]));
    assert!(first.is_finite() && last < first - 0.1, "mean losses {first} -> {last}: the run does not train");
}

#[test]
fn resume_continues_with_the_same_losses() {
    let dir = temp_dir("resume");
    let mut straight = finetune::Trainer::new(small_options(&dir)).unwrap();
    for _ in 0..20 {
        straight.step().unwrap();
    }
    let checkpoint = straight.checkpoint_dir(10);
    assert!(checkpoint.join("optimizer.safetensors").exists());
    let mut resumed =
        finetune::Trainer::new(finetune::Options { resume: Some(checkpoint), ..small_options(&dir) }).unwrap();
    assert_eq!(resumed.step, 10);
    assert_eq!(resumed.optimizer.steps().unwrap(), 10);
    while resumed.step < 20 {
        resumed.step().unwrap();
    }
    let bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    if ct::default_device() == ct::Device::Cpu {
        assert_eq!(bits(&resumed.losses), bits(&straight.losses));
        let params = |t: &finetune::Trainer| {
            t.model.trainable_parameters().leaves().iter().flat_map(|a| a.to_f64_vec().unwrap()).collect::<Vec<_>>()
        };
        let (a, b) = (params(&resumed), params(&straight));
        assert!(a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "parameters differ");
    }
    std::fs::remove_dir_all(&dir).ok();
}
