//! Reduction timings: `cargo run --release --example reduce_timing`.
//!
//! Prints the best time (of a few repetitions) of the whole-array sum of 10^7 `f32`, and of sums,
//! softmax and variance over the rows and columns of a `[4096, 4096]` `f32` matrix, with the
//! value computed, so accuracy and speed can be compared before and after a kernel change.
//!
//! Measured on the 2-core development machine (shared with another build, load 4-6, so only
//! large differences mean anything), median of three runs of best-of-10/20, milliseconds,
//! before → after the blocked pairwise sums (`backend::cpu::sum`), `COTANGENT_NUM_THREADS=1`
//! and `2`:
//!
//! | | 1 thread | 2 threads |
//! |---|---|---|
//! | sum_all of 10^7 `f32` | 8.38 → 2.01 | 8.44 → 1.89 |
//! | mean_all of 10^7 `f32` | 8.36 → 1.76 | 8.36 → 1.88 |
//! | sum over rows, [4096, 4096] | 13.9 → 3.37 | 13.9 → 3.01 |
//! | sum over columns, [4096, 4096] (median of 8) | 4.38 → 3.98 | 4.59 → 4.08 |
//! | sum over rows of the transpose | 139 → 4.70 | 128 → 5.29 |
//! | softmax over rows | 159 → 122 | 134 → 123 |
//! | logsumexp over rows | 85 → 80 | 82 → 76 |
//! | var over rows | 85 → 66 | 79 → 66 |
//! | cumsum over rows | 80 → 62 | 87 → 72 |
//!
//! The values changed too: the sum of 10^7 × 0.1 went from 1087937 to 1000000.125, and the
//! softmax rows' total from 4163.8 to 4096.
use cotangent::Array;
use std::time::Instant;

fn best(reps: usize, mut f: impl FnMut() -> f64) -> (f64, f64) {
    let mut t_best = f64::INFINITY;
    let mut v = 0.0;
    for _ in 0..reps {
        let t = Instant::now();
        v = f();
        t_best = t_best.min(t.elapsed().as_secs_f64());
    }
    (t_best * 1e3, v)
}

fn main() {
    println!("threads: {}", rayon::current_num_threads());
    let n = 10_000_000;
    let x = Array::from_vec(vec![0.1f32; n], &[n]);
    x.eval().unwrap();
    let (ms, v) = best(20, || x.sum_all().item::<f32>().unwrap() as f64);
    println!("sum_all 1e7 f32 x 0.1        {ms:8.3} ms  value {v}");
    let (ms, v) = best(20, || x.mean_all().item::<f32>().unwrap() as f64);
    println!("mean_all 1e7 f32             {ms:8.3} ms  value {v}");

    let m = 4096;
    let a = Array::from_vec((0..m * m).map(|i| ((i % 97) as f32) * 0.01).collect::<Vec<f32>>(), &[m, m]);
    a.eval().unwrap();
    let (ms, v) = best(20, || a.sum(&[-1], false).sum_all().item::<f32>().unwrap() as f64);
    println!("sum rows [4096,4096]         {ms:8.3} ms  value {v}");
    let (ms, v) = best(20, || a.sum(&[0], false).sum_all().item::<f32>().unwrap() as f64);
    println!("sum cols [4096,4096]         {ms:8.3} ms  value {v}");
    let (ms, v) = best(20, || a.t().sum(&[-1], false).sum_all().item::<f32>().unwrap() as f64);
    println!("sum rows of transposed       {ms:8.3} ms  value {v}");
    let (ms, v) = best(10, || a.softmax(&[-1]).sum_all().item::<f32>().unwrap() as f64);
    println!("softmax rows [4096,4096]     {ms:8.3} ms  value {v}");
    let (ms, v) = best(10, || a.logsumexp(&[-1], false).sum_all().item::<f32>().unwrap() as f64);
    println!("logsumexp rows [4096,4096]   {ms:8.3} ms  value {v}");
    let (ms, v) = best(10, || a.var(&[-1], false, 0).sum_all().item::<f32>().unwrap() as f64);
    println!("var rows [4096,4096]         {ms:8.3} ms  value {v}");
    let (ms, v) = best(10, || a.cumsum(-1).sum_all().item::<f32>().unwrap() as f64);
    println!("cumsum rows [4096,4096]      {ms:8.3} ms  value {v}");
}
