//! Soak (issue 21, item 4): the main job's model and training step (`examples/mqar/model.rs`,
//! included here) at a small size. After a warm-up, the resident memory of the process (VmRSS)
//! after every step stays within 1 MiB of its value at the end of the warm-up: nothing a step
//! allocates (graphs, buffers, caches, optimizer state) outlives it or accumulates. On a GPU
//! (`COTANGENT_DEVICE=cuda`) the same holds for device memory: the bytes of live arrays after
//! every step stay within 1 MiB of the baseline, and the allocator's cache of freed blocks stops
//! growing after the warm-up.
//!
//! CI runs 300 steps (`soak_memory_is_flat`); the full 10,000 steps print the memory curve
//! (`cargo test --release -p cotangent-nn --test soak -- --ignored --nocapture`; see the README's
//! development section). The two never run at once (a lock), since both read this process's
//! memory.
use std::sync::Mutex;

#[allow(dead_code)]
#[path = "../examples/mqar/model.rs"]
mod model;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The resident memory of this process in KiB (`VmRSS` of `/proc/self/status`).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// The small model: width 32, 2 heads, sequences of 32 tokens, batches of 8.
fn small(steps: usize) -> model::Config {
    model::Config { vocab: 32, pairs: 4, seq_len: 32, dim: 32, batch: 8, chunk: 8, steps, ..Default::default() }
}

/// Trains `steps` steps after `warmup` steps; asserts VmRSS after each stays within
/// `tolerance_kib` of the value after the warm-up, printing `(step, KiB)` every `print_every`
/// steps and at the extremes.
fn soak(warmup: usize, steps: usize, tolerance_kib: u64, print_every: usize) {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut training = model::Training::new(&small(warmup + steps));
    let start = rss_kib();
    let mut first_loss = 0.0;
    for _ in 0..warmup {
        let loss = training.step().unwrap().loss;
        if training.step == 1 {
            first_loss = loss;
        }
    }
    let baseline = rss_kib();
    let device = cotangent::default_device();
    let device_baseline = device.memory_stats();
    println!("soak: RSS {start} KiB before training, {baseline} KiB after {warmup} warm-up steps (the baseline)");
    if let Some(m) = device_baseline {
        println!("soak: {device} after the warm-up: {} KiB in use, {} KiB cached", m.in_use / 1024, m.cached / 1024);
    }
    println!("step,rss_kib");
    let (mut low, mut high) = ((warmup, baseline), (warmup, baseline));
    let mut last_loss = 0.0;
    for step in warmup + 1..=warmup + steps {
        last_loss = training.step().unwrap().loss;
        let rss = rss_kib();
        if rss < low.1 {
            low = (step, rss);
        }
        if rss > high.1 {
            high = (step, rss);
        }
        if step % print_every == 0 {
            println!("{step},{rss}");
        }
        assert!(
            rss.abs_diff(baseline) <= tolerance_kib,
            "step {step}: RSS {rss} KiB, {} KiB from the baseline {baseline} KiB (lowest {low:?}, highest {high:?})",
            rss as i64 - baseline as i64
        );
        if let (Some(base), Some(now)) = (device_baseline, device.memory_stats()) {
            let (in_use, base_in_use) = (now.in_use as u64 / 1024, base.in_use as u64 / 1024);
            assert!(
                in_use.abs_diff(base_in_use) <= tolerance_kib,
                "step {step}: {in_use} KiB of live arrays on {device}, baseline {base_in_use} KiB"
            );
            // every step allocates the same blocks: once the warm-up has filled the cache with
            // them, what the allocator holds (live and cached) no longer grows
            let (held, base_held) = ((now.cached + now.in_use) / 1024, (base.cached + base.in_use) / 1024);
            assert!(
                held as u64 <= base_held as u64 + tolerance_kib,
                "step {step}: {device} allocator holds {held} KiB (live and cached), {base_held} KiB after the warm-up"
            );
        }
    }
    println!(
        "soak: {steps} steps after the warm-up; RSS from {} KiB (step {}) to {} KiB (step {}), baseline {baseline} KiB; loss {first_loss} → {last_loss}",
        low.1, low.0, high.1, high.0
    );
    assert!(last_loss < first_loss, "the model trains: loss {first_loss} → {last_loss}");
}

#[test]
fn soak_memory_is_flat() {
    soak(100, 300, 1024, 50);
}

#[test]
#[ignore = "10,000 steps: run in release with --ignored --nocapture"]
fn soak_memory_is_flat_full() {
    soak(200, 10_000, 1024, 250);
}
