//! Custom-VJP function inside a 200-step loop: value_and_grad time and peak RSS (peers:
//! `bench/peers/custom_vjp.py`).
//!
//! Custom function: stable softplus `y = max(x, 0) + log1p(exp(-|x|))` whose VJP uses only the
//! saved output: `dx = g · (−expm1(−y))`. Recurrence over T = `--steps` steps (batch B, width D):
//! `h_0 = 0, h_{t+1} = softplus(h_t @ W + u_t)`, `loss = mean(h_T)`; value_and_grad with respect
//! to W. Modes, each in its own process: `eager` (the custom function), `compiled`
//! (`compile(value_and_grad)` of the same, traced before timing) and `eager_plain` (autodiff
//! of the same expression, the reference for `grad_rel_diff_vs_plain`). `u` (T×B×D) is a fixed
//! input indexed `u[t]` (slice + squeeze) inside the loss, as the peers do.
use cotangent::{self as ct, Array, DType};
use cotangent_bench::{self as cb, serde_json::json, Args, Rng};
use std::sync::Arc;

type Sp = Arc<dyn Fn(&Array) -> ct::Result<Array> + Send + Sync>;

fn softplus_expr(x: &Array) -> Array {
    x.maximum(0.0) + (-x.abs()).exp().log1p()
}

fn child(a: &Args, mode: &str) -> ct::Result<serde_json::Value> {
    let (b, d, t): (usize, usize, usize) = (a.num("batch", 32), a.num("width", 256), a.num("steps", 200));
    let reps: usize = a.num("reps", 5);
    let warmup: usize = a.num("warmup", 2);
    let min_time: f64 = a.num("min-time", 0.0);
    let mut rng = Rng::new(0);
    let w = Array::from_vec(rng.normal_f32(d * d, 0.4 / (d as f64).sqrt()), &[d, d]);
    let u = Array::from_vec(rng.normal_f32(t * b * d, 0.5), &[t, b, d]);
    let args = vec![w, u];
    ct::eval(&args)?;
    let sp: Sp = if mode.ends_with("_plain") {
        Arc::new(|x: &Array| Ok(softplus_expr(x)))
    } else {
        let f = ct::custom_function(|x: &[Array]| softplus_expr(&x[0]))
            .vjp(|_primals, cotangents, outputs| vec![&cotangents[0] * (-(-&outputs[0]).expm1())])
            .name("softplus")
            .build();
        Arc::new(move |x: &Array| Ok(f(std::slice::from_ref(x))?.remove(0)))
    };
    let loss = move |a: &[Array]| -> ct::Result<Array> {
        let mut h = ct::zeros(&[b, d], DType::F32);
        for i in 0..t as isize {
            let ut = a[1].slice_axis(0, Some(i), Some(i + 1), 1).squeeze(&[0]);
            h = sp(&(h.matmul(&a[0]) + ut))?;
        }
        Ok(h.mean_all())
    };
    let vg = ct::value_and_grad_argnums(loss, &[0]);
    let vg: Box<ValueAndGrad> = if mode == "compiled" {
        let c = ct::compile(vg);
        Box::new(move |x: &[Array]| c(x).map(|mut v| (v.drain(..1).collect(), v)))
    } else {
        Box::new(vg)
    };
    let out = std::cell::RefCell::new(None);
    let call = || {
        let (v, g) = vg(&args).expect("value_and_grad");
        ct::eval(&[v[0].clone(), g[0].clone()]).expect("eval");
        *out.borrow_mut() = Some((v, g));
    };
    let (first, ()) = cb::timed_once(call);
    for _ in 1..warmup {
        call();
    }
    cb::trim_heap();
    let rss_before = cb::rss_mib();
    let reset_ok = cb::reset_peak_rss();
    let tm = cb::time_fn(call, 0, reps, min_time);
    let peak = cb::hwm_mib();
    let (v, g) = out.borrow_mut().take().expect("a result");
    let gv = g[0].to_vec::<f32>()?;
    if let Some(path) = a.str("grad-out") {
        let bytes: Vec<u8> = gv.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| ct::Error::Eval(e.to_string()))?;
    }
    Ok(json!({
        "s_per_call": tm.median_s, "min_s": tm.min_s, "inner": tm.inner, "first_call_s": first,
        "rss_before_mib": rss_before, "peak_rss_run_mib": if reset_ok { peak } else { None },
        "delta_rss_run_mib": match (peak, rss_before) { (Some(p), Some(b)) if reset_ok => Some(p - b), _ => None },
        "maxrss_mib": cb::maxrss_mib(), "loss": v[0].item::<f32>()?,
        "grad_fro": gv.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>().sqrt(),
    }))
}

fn read_f32(path: &std::path::Path) -> Option<Vec<f64>> {
    let b = std::fs::read(path).ok()?;
    Some(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect())
}

/// A function returning the loss and the gradients (eager or compiled).
type ValueAndGrad = dyn Fn(&[Array]) -> ct::Result<(Vec<Array>, Vec<Array>)>;
fn main() -> ct::Result<()> {
    let a = Args::parse();
    if let Some(mode) = a.str("mode") {
        let r = child(&a, &mode)?;
        cb::emit(&json!({"mode": mode, "version": cb::version(), "results": cb::r3(r)}));
        return Ok(());
    }
    let modes = a.strs("modes", &["eager", "compiled", "eager_plain"]);
    let dir = std::env::temp_dir().join(format!("cotangent-bench-custom-vjp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ct::Error::Eval(e.to_string()))?;
    let mut res = serde_json::Map::new();
    let mut grads = Vec::new();
    for mode in &modes {
        let gpath = dir.join(format!("{mode}.f32"));
        let r = cb::run_child(&["--mode".into(), mode.clone(), "--grad-out".into(), gpath.display().to_string()]);
        res.insert(mode.clone(), r.get("results").cloned().unwrap_or(r));
        if let Some(g) = read_f32(&gpath) {
            grads.push((mode.clone(), g));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Some((_, reference)) = grads.iter().find(|(m, _)| m.ends_with("_plain")) {
        let scale = reference.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
        for (mode, g) in grads.iter().filter(|(m, _)| !m.ends_with("_plain")) {
            let diff = g.iter().zip(reference).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
            if let Some(serde_json::Value::Object(o)) = res.get_mut(mode) {
                o.insert("grad_rel_diff_vs_plain".into(), cb::r3(json!(diff / scale)));
            }
        }
    }
    cb::emit(&json!({
        "bench": "custom_vjp", "framework": "cotangent", "version": cb::version(),
        "params": {"batch": a.num::<usize>("batch", 32), "width": a.num::<usize>("width", 256),
                   "steps": a.num::<usize>("steps", 200), "reps": a.num::<usize>("reps", 5),
                   "warmup": a.num::<usize>("warmup", 2), "min_time": a.num::<f64>("min-time", 0.0)},
        "results": res, "machine": cb::env_info(None),
    }));
    Ok(())
}
