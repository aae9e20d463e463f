//! The eight products of one training step of the 784-512-512-10 MLP at batch 128 (forward,
//! weight gradients, hidden-state gradients; the input's gradient is not needed), timed one by
//! one through `Array::matmul` with the operands laid out as the step has them (transposed
//! views where the backward pass reads `hᵀ` or `Wᵀ`):
//! `cargo run --release --example mlp_products`.
//!
//! Prints each product's best and median time and GFLOP/s, and the step's product total: the
//! sum of the best times bounds the steps per second any implementation on the same products
//! can reach.
use cotangent::Array;
use std::time::Instant;
/// An `r × c` matrix of small distinct values.
fn fill(r: usize, c: usize, s: usize) -> Array {
    Array::from_vec((0..r * c).map(|i| ((i * s % 17) as f32) * 0.01).collect::<Vec<f32>>(), &[r, c])
}
/// Best and median of 400 evaluations of `f`.
fn time(label: &str, flops: f64, f: impl Fn() -> Array) {
    let mut ts: Vec<f64> = (0..400)
        .map(|_| {
            let t = Instant::now();
            f().eval().unwrap();
            t.elapsed().as_secs_f64()
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    println!(
        "{label:28} best {:7.1} µs ({:5.1} GFLOP/s) median {:7.1} µs ({:5.1})",
        ts[0] * 1e6,
        flops / ts[0] / 1e9,
        ts[200] * 1e6,
        flops / ts[200] / 1e9
    );
}
fn main() {
    // (label, m, k, n, a transposed (stored k x m), b transposed (stored n x k))
    let cases = [
        ("x@W1", 128, 784, 512, false, false),
        ("h1@W2", 128, 512, 512, false, false),
        ("h2@W3", 128, 512, 10, false, false),
        ("h2t@g3 (dW3)", 512, 128, 10, true, false),
        ("g3@W3t (dh2)", 128, 10, 512, false, true),
        ("h1t@g2 (dW2)", 512, 128, 512, true, false),
        ("g2@W2t (dh1)", 128, 512, 512, false, true),
        ("xt@g1 (dW1)", 784, 128, 512, true, false),
    ];
    let mut total = 0.0;
    for (l, m, k, n, ta, tb) in cases {
        let a = if ta { fill(k, m, 3) } else { fill(m, k, 3) };
        let b = if tb { fill(n, k, 5) } else { fill(k, n, 5) };
        cotangent::eval(&[a.clone(), b.clone()]).unwrap();
        let a = if ta { a.transpose(&[1, 0]) } else { a };
        let b = if tb { b.transpose(&[1, 0]) } else { b };
        let fl = 2.0 * (m * k * n) as f64;
        total += fl;
        time(l, fl, || a.matmul(&b));
    }
    println!("total {:.3} GFLOP", total / 1e9);
}
