//! Square matmul throughput, GFLOP/s = 2 n³ / t (peers: `bench/peers/matmul.py`,
//! `bench/gpu/anchors.py`).
//!
//! For each n in `--sizes` (default 256 1024 2048): `C = A @ B` with A, B ~ N(0, 1) in `--dtype`
//! (default float32; bfloat16 and float16 accumulate in f32), evaluated every call (a fresh output
//! each call; inputs reused). Rows 0..4 are checked against a float64 product of the rounded
//! inputs. `--device cuda` runs on the GPU (f32 exact, TF32 off).
use cotangent::{self as ct, Array};
use cotangent_bench::{self as cb, serde_json::json, Args, Rng};

fn main() -> ct::Result<()> {
    let a = Args::parse();
    let sizes: Vec<usize> = a.nums("sizes", &[256, 1024, 2048]);
    let reps: usize = a.num("reps", 5);
    let warmup: usize = a.num("warmup", 1);
    let min_time: f64 = a.num("min-time", 0.2);
    let dtype_name = a.str("dtype").unwrap_or_else(|| "float32".into());
    let dtype = match dtype_name.as_str() {
        "float32" | "f32" => ct::DType::F32,
        "bfloat16" | "bf16" => ct::DType::BF16,
        "float16" | "f16" => ct::DType::F16,
        other => panic!("--dtype {other}: expected float32, bfloat16 or float16"),
    };
    let mut rng = Rng::new(0);
    let mut res = serde_json::Map::new();
    for &n in &sizes {
        let av = rng.normal_f32(n * n, 1.0);
        let bv = rng.normal_f32(n * n, 1.0);
        let (x, y) = (Array::from_slice(&av, &[n, n]).astype(dtype), Array::from_slice(&bv, &[n, n]).astype(dtype));
        ct::eval(&[x.clone(), y.clone()])?;
        // the reference multiplies the inputs as rounded to `dtype`
        let (av, bv) = (x.astype(ct::DType::F32).to_vec::<f32>()?, y.astype(ct::DType::F32).to_vec::<f32>()?);
        let t = cb::time_fn(|| x.matmul(&y).eval().expect("eval"), warmup, reps, min_time);
        let flop = 2.0 * (n as f64).powi(3);
        let c = x.matmul(&y).astype(ct::DType::F32).to_vec::<f32>()?;
        let (mut err, mut scale) = (0.0f64, 0.0f64);
        for i in 0..4.min(n) {
            for j in 0..n {
                let r: f64 = (0..n).map(|k| av[i * n + k] as f64 * bv[k * n + j] as f64).sum();
                err = err.max((c[i * n + j] as f64 - r).abs());
                scale = scale.max(r.abs());
            }
        }
        res.insert(
            n.to_string(),
            json!({"gflops": flop / t.median_s / 1e9, "best_gflops": flop / t.min_s / 1e9,
                   "ms": t.median_s * 1e3, "inner": t.inner, "rel_err": err / scale}),
        );
    }
    cb::emit(&cb::record(
        "matmul",
        json!({"sizes": sizes, "dtype": dtype_name, "device": ct::default_device().to_string(), "reps": reps, "warmup": warmup, "min_time": min_time}),
        res.into(),
    ));
    Ok(())
}
