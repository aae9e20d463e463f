//! Single-thread throughput of the vectorised f32 kernels (`cotangent::backend::cpu::vmath`)
//! against the per-element standard library calls the unary kernels made before (cotangent
//! only, no peer). For each function and size, ns per element of: `std` (`f32::exp` etc. in a
//! loop, the previous kernels' scalar bodies) and each instruction-set variant this CPU runs
//! (out of place, `src -> dst`). Median of `--reps` timings of at least `--min-time` seconds.
//!
//! `vmath [--sizes 8192,1048576] [--reps 7] [--min-time 0.02]`
use cotangent::backend::cpu::vmath::{self, Func, Isa};
use cotangent_bench::serde_json::{self, json};
use cotangent_bench::Args;
use std::hint::black_box;
use std::time::Instant;

fn std_fn(f: Func) -> fn(f32) -> f32 {
    match f {
        Func::Exp => f32::exp,
        Func::Expm1 => f32::exp_m1,
        Func::Ln => f32::ln,
        Func::Ln1p => f32::ln_1p,
        Func::Tanh => f32::tanh,
        Func::Sigmoid => |v| {
            if v >= 0.0 {
                1.0 / (1.0 + (-v).exp())
            } else {
                let e = v.exp();
                e / (1.0 + e)
            }
        },
    }
}

/// Median ns per element of `run` over `n` elements.
fn time(n: usize, reps: usize, min_time: f64, mut run: impl FnMut()) -> f64 {
    run();
    let mut iters = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..iters {
            run();
        }
        if t.elapsed().as_secs_f64() >= min_time {
            break;
        }
        iters *= 2;
    }
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                run();
            }
            t.elapsed().as_secs_f64() * 1e9 / (iters * n) as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let a = Args::parse();
    let sizes: Vec<usize> = a.nums("sizes", &[8192, 1 << 20]);
    let reps: usize = a.num("reps", 7);
    let min_time: f64 = a.num("min-time", 0.02);
    for &n in &sizes {
        for f in Func::ALL {
            // inputs in the function's domain (log: positive; log1p: above -1)
            let src: Vec<f32> = (0..n)
                .map(|i| {
                    let t = i as f32 / n as f32;
                    match f {
                        Func::Ln => 1e-3 + 100.0 * t,
                        Func::Ln1p => -0.99 + 100.0 * t,
                        _ => -20.0 + 40.0 * t,
                    }
                })
                .collect();
            let mut dst = vec![0f32; n];
            let g = std_fn(f);
            let mut row = serde_json::Map::new();
            row.insert("func".into(), json!(format!("{f:?}")));
            row.insert("n".into(), json!(n));
            let t_std = time(n, reps, min_time, || {
                for (d, &s) in dst.iter_mut().zip(black_box(&src)) {
                    *d = g(s);
                }
                black_box(&mut dst);
            });
            row.insert("std_ns".into(), json!((t_std * 1e3).round() / 1e3));
            for isa in Isa::available() {
                let t = time(n, reps, min_time, || {
                    vmath::apply_with(isa, f, black_box(&src), &mut dst);
                    black_box(&mut dst);
                });
                row.insert(format!("{isa:?}_ns").to_lowercase(), json!((t * 1e3).round() / 1e3));
            }
            println!("{}", serde_json::Value::Object(row));
        }
    }
}
