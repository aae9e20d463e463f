//! f32 products in each operand layout a dense layer's forward and backward passes produce:
//! `nn` (`A (m×k) @ B (k×n)`, both stored as used), `nt` (`A @ Wᵀ` with `W` stored `n×k`: the
//! backward product `g @ Wᵀ`), `tn` (`Xᵀ @ G` with `X` stored `k×m`: a weight gradient) and `tt`.
//! cotangent-only; `bench/gpu/products.py` times the same shapes and layouts with PyTorch.
//!
//! `--shapes m,k,n[,layout] ...` (layout `nt` when left out; default `32,256,256 64,256,256
//! 128,512,512 256,256,256`); `--device cpu|cuda`. One JSON line with, per shape, the median and
//! best µs per product and GFLOP/s of the median.
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
        let parts: Vec<&str> = shape.split(',').map(str::trim).collect();
        let dims: Vec<usize> = parts.iter().take(3).filter_map(|s| s.parse().ok()).collect();
        let layout = parts.get(3).copied().unwrap_or("nt");
        let ([m, k, n], true) =
            (<[usize; 3]>::try_from(dims).unwrap_or([0; 3]), ["nn", "nt", "tn", "tt"].contains(&layout))
        else {
            return Err(ct::Error::Eval(format!("--shapes wants m,k,n[,nn|nt|tn|tt], got {shape:?}")));
        };
        // each operand stored as the layout says; a `t` operand is the transposed view of its store
        let operand = |rng: &mut Rng, rows: usize, cols: usize, transposed: bool| {
            if transposed {
                Array::from_vec(rng.normal_f32(rows * cols, 1.0), &[cols, rows]).t()
            } else {
                Array::from_vec(rng.normal_f32(rows * cols, 1.0), &[rows, cols])
            }
        };
        let x = operand(&mut rng, m, k, layout.starts_with('t'));
        let w = operand(&mut rng, k, n, layout.ends_with('t'));
        ct::eval(&[x.clone(), w.clone()])?;
        let t = cb::time_fn(|| x.matmul(&w).eval().expect("eval"), 2, reps, min_time);
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
