//! f32 products with a transposed right operand, `A (m×k) @ Wᵀ` with `W` stored `n×k`: the
//! backward product of a dense layer (`g @ Wᵀ`). cotangent-only (no peer script): it tracks the
//! two layouts `backend::cpu::matmul` chooses between (a short product computed column-major and
//! transposed, a tall one with the operand copied row-major first).
//!
//! `--shapes m,k,n ...` (default `32,256,256 64,256,256 128,512,512 256,256,256`); one JSON line
//! with, per shape, the median and best µs per product and GFLOP/s of the median.
use cotangent::{self as ct, Array};
use cotangent_bench::{self as cb, serde_json::json, Args, Rng};

fn main() -> ct::Result<()> {
    let a = Args::parse();
    let shapes: Vec<String> = a.strs("shapes", &["32,256,256", "64,256,256", "128,512,512", "256,256,256"]);
    let reps: usize = a.num("reps", 10);
    let min_time: f64 = a.num("min-time", 0.2);
    let mut rng = Rng::new(0);
    let mut res = serde_json::Map::new();
    for shape in &shapes {
        let dims: Vec<usize> = shape.split(',').filter_map(|s| s.trim().parse().ok()).collect();
        let [m, k, n] = dims[..] else {
            return Err(ct::Error::Eval(format!("--shapes wants m,k,n triples, got {shape:?}")));
        };
        let x = Array::from_vec(rng.normal_f32(m * k, 1.0), &[m, k]);
        let w = Array::from_vec(rng.normal_f32(n * k, 1.0), &[n, k]);
        ct::eval(&[x.clone(), w.clone()])?;
        let t = cb::time_fn(|| x.matmul(&w.t()).eval().expect("eval"), 2, reps, min_time);
        let flop = 2.0 * (m * n * k) as f64;
        res.insert(
            shape.clone(),
            json!({"us": t.median_s * 1e6, "best_us": t.min_s * 1e6, "gflops": flop / t.median_s / 1e9, "inner": t.inner}),
        );
    }
    cb::emit(&cb::record(
        "matmul_transposed",
        json!({"shapes": shapes, "dtype": "float32", "reps": reps, "min_time": min_time}),
        res.into(),
    ));
    Ok(())
}
