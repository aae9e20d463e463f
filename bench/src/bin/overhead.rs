//! Per-operation overhead of a chain of tiny element-wise ops (peers: `bench/peers/overhead.py`).
//!
//! Workload (float32 vector of `--size` elements, default 16): `x -> sin(x) * 1.01 + 0.1`
//! repeated N times (3 primitive ops per link), `loss = sum(x)`, for every N in `--n`
//! (default 100 1000). Modes: `fwd_eager` (build + evaluate the chain) and `grad_eager`
//! (build + evaluate d loss / d x, forward included), and the same through `ct::compile`:
//! `fwd_compiled` (`compile(f)`) and `grad_compiled` (`compile(grad(f))`), traced before
//! timing. Per-op numbers divide the per-call time by 3 N.
use cotangent::{self as ct, Array, DType};
use cotangent_bench::{self as cb, serde_json::json, Args, Timing};

fn per_op(t: Timing, n: usize) -> serde_json::Value {
    json!({
        "call_ms": t.median_s * 1e3,
        "per_op_us": t.median_s / (3 * n) as f64 * 1e6,
        "per_link_us": t.median_s / n as f64 * 1e6,
        "min_call_ms": t.min_s * 1e3,
        "inner": t.inner,
    })
}

fn chain(x: &Array, n: usize) -> Array {
    let mut x = x.clone();
    for _ in 0..n {
        x = x.sin() * 1.01 + 0.1;
    }
    x.sum_all()
}

fn main() -> ct::Result<()> {
    let a = Args::parse();
    let ns: Vec<usize> = a.nums("n", &[100, 1000]);
    let size: usize = a.num("size", 16);
    let reps: usize = a.num("reps", 5);
    let warmup: usize = a.num("warmup", 2);
    let min_time: f64 = a.num("min-time", 0.1);
    // `--modes fwd_eager` or `--modes grad_eager` runs one mode only (for profiling).
    let modes = a.strs("modes", &["fwd_eager", "grad_eager", "fwd_compiled", "grad_compiled"]);
    let x = ct::linspace(-1.0, 1.0, size, DType::F32);
    x.eval()?;
    let mut results = serde_json::Map::new();
    for &n in &ns {
        let g = ct::grad(move |xs: &[Array]| chain(&xs[0], n));
        let args = [x.clone()];
        let mut r = serde_json::Map::new();
        if modes.iter().any(|m| m == "fwd_eager") {
            let t = cb::time_fn(|| chain(&x, n).eval().expect("eval"), warmup, reps, min_time);
            r.insert("fwd_eager".into(), per_op(t, n));
        }
        if modes.iter().any(|m| m == "grad_eager") {
            let t = cb::time_fn(|| g(&args).expect("grad")[0].eval().expect("eval"), warmup, reps, min_time);
            r.insert("grad_eager".into(), per_op(t, n));
        }
        if modes.iter().any(|m| m == "fwd_compiled") {
            let cf = ct::compile(move |xs: &[Array]| chain(&xs[0], n));
            let t = cb::time_fn(|| cf(&args).expect("compiled")[0].eval().expect("eval"), warmup, reps, min_time);
            r.insert("fwd_compiled".into(), per_op(t, n));
        }
        if modes.iter().any(|m| m == "grad_compiled") {
            let cg = ct::compile(g.clone());
            let t = cb::time_fn(|| cg(&args).expect("compiled grad")[0].eval().expect("eval"), warmup, reps, min_time);
            r.insert("grad_compiled".into(), per_op(t, n));
        }
        r.insert("value".into(), json!(chain(&x, n).item::<f32>()?));
        r.insert("grad_sum".into(), json!(g(&args)?[0].sum_all().item::<f32>()?));
        results.insert(n.to_string(), r.into());
    }
    cb::emit(&cb::record(
        "overhead",
        json!({"n": ns, "size": size, "reps": reps, "warmup": warmup, "min_time": min_time}),
        results.into(),
    ));
    Ok(())
}
