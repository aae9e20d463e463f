//! Differential fuzzing of cotangent for as long as you like: random graphs of ops over random
//! shapes, under random stacks of transforms, checked against an independent `f64` reference
//! interpreter and finite differences (the generator and the checks are those of
//! `tests/fuzz_graphs.rs`).
//!
//! ```text
//! cargo run --release -p cotangent --example fuzz -- --minutes 5 [--seed 42]
//!     [--max-ops 8] [--max-size 256] [--max-dim 24]
//! ```
//!
//! (`--max-size 100000 --max-dim 300` reaches the kernels' multi-threaded paths.)
//!
//! Prints the number of graphs and checks tried and, for every failure, a minimal
//! reproduction: the seed, the inputs and the op sequence as Rust code, and what differed.
//! Exits with status 1 if anything failed.
#[path = "../tests/fuzz_support/mod.rs"]
mod fuzz_support;

use fuzz_support::check::describe;
use fuzz_support::{gen_case, minimise, run_case, GenLimits, Rng, Stats};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let minutes: f64 = value("--minutes").map(|v| v.parse().expect("--minutes N")).unwrap_or(1.0);
    let seed: u64 = value("--seed").map(|v| v.parse().expect("--seed S")).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    let mut lim = GenLimits::default();
    let number = |flag: &str, default: usize| value(flag).map(|v| v.parse().expect(flag)).unwrap_or(default);
    lim.max_ops = number("--max-ops", lim.max_ops);
    lim.max_size = number("--max-size", lim.max_size);
    lim.max_dim = number("--max-dim", lim.max_dim);
    println!("fuzzing for {minutes} minutes from seed {seed}, {lim:?}");
    // a panic inside cotangent is reported as a failure with its message, not printed twice
    std::panic::set_hook(Box::new(|_| {}));
    let deadline = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let mut seeds = Rng(seed);
    let mut stats = Stats::default();
    let mut failures = 0;
    let mut last_report = Instant::now();
    while Instant::now() < deadline {
        let case_seed = seeds.next_u64();
        let case = gen_case(case_seed, lim);
        if let Err(f) = run_case(&case, &mut stats) {
            failures += 1;
            let (small, f) = minimise(&case, &f);
            println!("\n=== failure {failures} ===\n{}\n", describe(&small, &f));
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            println!("{} graphs, {} checks, {failures} failures", stats.graphs, stats.checks());
            last_report = Instant::now();
        }
    }
    println!("{}", stats.summary());
    println!("{failures} failures");
    if failures > 0 {
        std::process::exit(1);
    }
}
