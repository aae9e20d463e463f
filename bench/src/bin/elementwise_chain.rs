//! Allocation-bound element-wise chain (cotangent only, no peer script): `x -> sin(x) * 1.01 +
//! 0.1` repeated N times (3 primitive ops per link) on a large vector, built lazily and
//! evaluated once per call; the input is held by the caller, so the first `sin` allocates and
//! every later op may write into its input's buffer (buffer donation). Reports the per-call
//! time, per-op time, effective bandwidth (one read + one write of the vector per op) and the
//! minor page faults per call (fresh buffers that the allocator takes from the OS fault in
//! page by page).
//!
//! `elementwise_chain [--n 1000] [--size 1000000] [--reps 3] [--warmup 1] [--min-time 0]`
use cotangent::{self as ct, Array, DType};
use cotangent_bench::{self as cb, serde_json::json, Args};

fn minor_faults() -> u64 {
    // /proc/self/stat field 10 (minflt); the command name (field 2) may contain spaces.
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_whitespace().nth(7).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn main() -> ct::Result<()> {
    let a = Args::parse();
    let n: usize = a.num("n", 1000);
    let size: usize = a.num("size", 1_000_000);
    let reps: usize = a.num("reps", 3);
    let warmup: usize = a.num("warmup", 1);
    let min_time: f64 = a.num("min-time", 0.0);
    let x = ct::linspace(-1.0, 1.0, size, DType::F32);
    x.eval()?;
    let chain = |x: &Array| {
        let mut y = x.clone();
        for _ in 0..n {
            y = y.sin() * 1.01 + 0.1;
        }
        y.eval().expect("eval");
        y
    };
    let value = chain(&x).sum_all().item::<f32>()?;
    let f0 = minor_faults();
    let t = cb::time_fn(
        || {
            chain(&x);
        },
        warmup,
        reps,
        min_time,
    );
    let calls = (warmup + reps * t.inner).max(1) as f64;
    let faults = (minor_faults() - f0) as f64 / calls;
    let ops = (3 * n) as f64;
    let results = json!({
        "call_ms": t.median_s * 1e3,
        "min_call_ms": t.min_s * 1e3,
        "per_op_us": t.median_s / ops * 1e6,
        "gb_per_s": 2.0 * 4.0 * size as f64 * ops / t.median_s / 1e9,
        "minor_faults_per_call": faults,
        "inner": t.inner,
        "value": value,
    });
    cb::emit(&cb::record(
        "elementwise_chain",
        json!({"n": n, "size": size, "reps": reps, "warmup": warmup, "min_time": min_time}),
        results,
    ));
    Ok(())
}
