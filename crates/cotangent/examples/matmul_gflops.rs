//! Matrix product throughput: `cargo run --release --example matmul_gflops [n ...]`.
//!
//! Prints GFLOP/s (2·n³ / best time) of `f32` and `f64` `n × n` products through
//! `Array::matmul` (graph build + eval + the `gemm` kernel), for each size given (default 1024,
//! plus a few small sizes that exercise the plain-loop and single-thread paths).
//!
//! Measured on the 2-core development machine (AVX-512, shared with other jobs, load ~7):
//! f32 1024³ 90-130 GFLOP/s, 512³ 150-210; f64 1024³ 33-49, 512³ 75-135.
use cotangent::{Array, DType};
use std::time::Instant;

fn bench(n: usize, dtype: DType) -> f64 {
    let a = Array::from_vec((0..n * n).map(|i| ((i % 17) as f32) * 0.01).collect::<Vec<f32>>(), &[n, n]).astype(dtype);
    let b = Array::from_vec((0..n * n).map(|i| ((i % 13) as f32) * 0.02).collect::<Vec<f32>>(), &[n, n]).astype(dtype);
    a.eval().unwrap();
    b.eval().unwrap();
    let flops = 2.0 * (n * n * n) as f64;
    // enough repetitions for ~0.3 s per size
    let reps = ((3e8 / flops) as usize).clamp(3, 20_000);
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        a.matmul(&b).eval().unwrap();
        best = best.min(t.elapsed().as_secs_f64());
    }
    flops / best / 1e9
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|s| s.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![8, 16, 32, 64, 128, 256, 512, 1024] } else { sizes };
    println!("threads: {}", rayon::current_num_threads());
    for n in sizes {
        println!("n = {n:5}: f32 {:7.1} GFLOP/s   f64 {:7.1} GFLOP/s", bench(n, DType::F32), bench(n, DType::F64));
    }
}
