//! The matrix products of a training step, timed one by one through `Array::matmul` (graph build,
//! eval and kernel), with the operands laid out as the step has them (transposed views where a
//! backward pass reads `hᵀ` or `Wᵀ`):
//!
//! `cargo run --release --example step_products [mlp|recurrence ...]` (default: both).
//!
//! - `mlp`: the eight products of one step of the 784-512-512-10 MLP at batch 128 (forward,
//!   weight gradients, hidden-state gradients; the input's gradient is not needed).
//! - `recurrence`: the three products of one step of `h = f(h @ W + u)` at batch 32, width 256,
//!   and its backward pass (the `custom_vjp` benchmark's loop).
//!
//! Prints each product's best and median time over 1000 evaluations with its GFLOP/s, and the
//! sums: the sum of the best times bounds what any implementation running these products can
//! reach for the whole step.
use cotangent::Array;
use std::time::Instant;

/// One product `a @ b` of a step: `a` is `m × k`, `b` is `k × n`, each stored transposed when
/// its flag is set (and then read through a transposed view).
struct Product {
    label: &'static str,
    m: usize,
    k: usize,
    n: usize,
    a_transposed: bool,
    b_transposed: bool,
}

const fn product(label: &'static str, m: usize, k: usize, n: usize, a_transposed: bool, b_transposed: bool) -> Product {
    Product { label, m, k, n, a_transposed, b_transposed }
}

const MLP: [Product; 8] = [
    product("x·W1", 128, 784, 512, false, false),
    product("h1·W2", 128, 512, 512, false, false),
    product("h2·W3", 128, 512, 10, false, false),
    product("h2ᵀ·g3 (dW3)", 512, 128, 10, true, false),
    product("g3·W3ᵀ (dh2)", 128, 10, 512, false, true),
    product("h1ᵀ·g2 (dW2)", 512, 128, 512, true, false),
    product("g2·W2ᵀ (dh1)", 128, 512, 512, false, true),
    product("xᵀ·g1 (dW1)", 784, 128, 512, true, false),
];

const RECURRENCE: [Product; 3] = [
    product("h·W", 32, 256, 256, false, false),
    product("g·Wᵀ (dh)", 32, 256, 256, false, true),
    product("hᵀ·g (dW)", 256, 32, 256, true, false),
];

/// An `rows × cols` matrix of small distinct values.
fn fill(rows: usize, cols: usize, seed: usize) -> Array {
    Array::from_vec((0..rows * cols).map(|i| ((i * seed % 17) as f32) * 0.01).collect::<Vec<f32>>(), &[rows, cols])
}

/// Best and median seconds of 1000 evaluations of `a @ b`.
fn time(a: &Array, b: &Array) -> (f64, f64) {
    let mut ts: Vec<f64> = (0..1000)
        .map(|_| {
            let t = Instant::now();
            a.matmul(b).eval().unwrap();
            t.elapsed().as_secs_f64()
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    (ts[0], ts[ts.len() / 2])
}

fn run(name: &str, products: &[Product]) {
    println!("{name} (threads: {})", rayon::current_num_threads());
    let (mut best_sum, mut median_sum) = (0.0, 0.0);
    for p in products {
        let a = if p.a_transposed { fill(p.k, p.m, 3).t() } else { fill(p.m, p.k, 3) };
        let b = if p.b_transposed { fill(p.n, p.k, 5).t() } else { fill(p.k, p.n, 5) };
        cotangent::eval(&[a.clone(), b.clone()]).unwrap();
        let flops = 2.0 * (p.m * p.k * p.n) as f64;
        let (best, median) = time(&a, &b);
        best_sum += best;
        median_sum += median;
        println!(
            "  {:14} best {:7.1} µs ({:5.1} GFLOP/s)  median {:7.1} µs ({:5.1} GFLOP/s)",
            p.label,
            best * 1e6,
            flops / best / 1e9,
            median * 1e6,
            flops / median / 1e9
        );
    }
    println!("  sum            best {:7.1} µs  median {:7.1} µs", best_sum * 1e6, median_sum * 1e6);
}

fn main() {
    let chosen: Vec<String> = std::env::args().skip(1).collect();
    let wants = |name: &str| chosen.is_empty() || chosen.iter().any(|c| c == name);
    if wants("mlp") {
        run("mlp", &MLP);
    }
    if wants("recurrence") {
        run("recurrence", &RECURRENCE);
    }
}
