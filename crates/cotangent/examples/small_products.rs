//! The three products of a recurrence step `h = f(h @ W + u)` and its backward pass, timed one by
//! one: `cargo run --release --example small_products [batch width]` (defaults 32 256).
//!
//! Prints the best and median time of `h @ W`, `g @ Wᵀ` (a transposed view) and `hᵀ @ g` (a
//! transposed view) through `Array::matmul` (graph build + eval + kernel), and their GFLOP/s.
use cotangent::Array;
use std::time::Instant;

/// Best and median of 2000 evaluations of `f`.
fn time(label: &str, flops: f64, f: impl Fn() -> Array) {
    let mut ts: Vec<f64> = (0..2000)
        .map(|_| {
            let t = Instant::now();
            f().eval().unwrap();
            t.elapsed().as_secs_f64()
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    let (best, median) = (ts[0], ts[ts.len() / 2]);
    println!(
        "{label:8} best {:6.1} µs ({:5.1} GFLOP/s), median {:6.1} µs ({:5.1} GFLOP/s)",
        best * 1e6,
        flops / best / 1e9,
        median * 1e6,
        flops / median / 1e9
    );
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|s| s.parse().ok()).collect();
    let (b, d) = (args.first().copied().unwrap_or(32), args.get(1).copied().unwrap_or(256));
    let fill =
        |n: usize, s: usize| Array::from_vec((0..n).map(|i| ((i * s % 17) as f32) * 0.01).collect::<Vec<f32>>(), &[n]);
    let h = fill(b * d, 3).reshape(&[b as isize, d as isize]);
    let g = fill(b * d, 5).reshape(&[b as isize, d as isize]);
    let w = fill(d * d, 7).reshape(&[d as isize, d as isize]);
    cotangent::eval(&[h.clone(), g.clone(), w.clone()]).unwrap();
    println!("threads: {}", rayon::current_num_threads());
    let flops = 2.0 * (b * d * d) as f64;
    time("h @ W", flops, || h.matmul(&w));
    time("g @ Wt", flops, || g.matmul(&w.transpose(&[1, 0])));
    time("ht @ g", flops, || h.transpose(&[1, 0]).matmul(&g));
}
