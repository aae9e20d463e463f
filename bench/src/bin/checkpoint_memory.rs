//! Peak memory of grad through a deep tanh chain, with and without checkpointing (peers:
//! `bench/peers/checkpoint_memory.py`).
//!
//! `h_0 = x` (B×D), `h_{i+1} = tanh(h_i @ W_i)` for i < L, `loss = mean(h_L²)`; gradient with
//! respect to all W_i. Configurations, each in its own process: `none` (plain reverse mode),
//! `segment` (`ct::checkpoint` around every `--segment` consecutive layers), `layer` (around
//! every layer). Reported per configuration as the peer script does: VmHWM during the measured
//! grad call(s) after setup + warm-up (reset through /proc/self/clear_refs), RSS before, their
//! difference, lifetime ru_maxrss, time per grad, loss and gradient norm.
use cotangent::{self as ct, Array};
use cotangent_bench::{self as cb, serde_json::json, Args, Rng};

fn block(a: &[Array]) -> Array {
    let mut h = a[0].clone();
    for w in &a[1..] {
        h = h.matmul(w).tanh();
    }
    h
}

fn child(a: &Args, config: &str) -> ct::Result<serde_json::Value> {
    let (l, d, b): (usize, usize, usize) = (a.num("layers", 64), a.num("width", 1024), a.num("batch", 256));
    let k: usize = a.num("segment", 8);
    let reps: usize = a.num("reps", 1);
    let warmup: usize = a.num("warmup", 1);
    let seg = match config {
        "none" => l,
        "segment" => k,
        "layer" => 1,
        other => panic!("unknown config {other}"),
    };
    let mut rng = Rng::new(0);
    let mut args: Vec<Array> =
        (0..l).map(|_| Array::from_vec(rng.normal_f32(d * d, 1.0 / (d as f64).sqrt()), &[d, d])).collect();
    args.push(Array::from_vec(rng.normal_f32(b * d, 1.0), &[b, d]));
    ct::eval(&args)?;
    let blk = ct::checkpoint(block);
    let loss = move |a: &[Array]| -> ct::Result<Array> {
        let mut h = a[l].clone();
        for i in (0..l).step_by(seg) {
            let mut inp = vec![h];
            inp.extend_from_slice(&a[i..(i + seg).min(l)]);
            h = if seg == l { block(&inp) } else { blk(&inp)?.remove(0) };
        }
        Ok((&h * &h).mean_all())
    };
    let argnums: Vec<usize> = (0..l).collect();
    let vg = ct::value_and_grad_argnums(loss, &argnums);
    let call = || -> ct::Result<(Vec<Array>, Vec<Array>)> {
        let (v, g) = vg(&args)?;
        let mut all = v.clone();
        all.extend(g.iter().cloned());
        ct::eval(&all)?;
        Ok((v, g))
    };
    cb::trim_heap();
    let rss_params = cb::rss_mib();
    let (first, r) = cb::timed_once(call);
    drop(r?);
    for _ in 1..warmup {
        drop(call()?);
    }
    cb::trim_heap();
    let rss_before = cb::rss_mib();
    let reset_ok = cb::reset_peak_rss();
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..reps {
        drop(last.take());
        let (dt, r) = cb::timed_once(call);
        times.push(dt);
        last = Some(r?);
    }
    let peak = cb::hwm_mib();
    let (v, g) = last.expect("reps >= 1");
    let mut gn = 0.0f64;
    for gi in &g {
        gn += gi.to_f64_vec()?.iter().map(|x| x * x).sum::<f64>();
    }
    Ok(json!({
        "s_per_grad": cb::median(&times), "first_call_s": first,
        "rss_after_setup_mib": rss_params, "rss_before_mib": rss_before,
        "peak_rss_run_mib": if reset_ok { peak } else { None },
        "delta_rss_run_mib": match (peak, rss_before) { (Some(p), Some(b)) if reset_ok => Some(p - b), _ => None },
        "maxrss_mib": cb::maxrss_mib(), "loss": v[0].item::<f32>()?, "grad_norm": gn.sqrt(),
    }))
}

fn main() -> ct::Result<()> {
    let a = Args::parse();
    if let Some(config) = a.str("config") {
        let r = child(&a, &config)?;
        cb::emit(&json!({"mode": "eager", "config": config, "results": cb::r3(r)}));
        return Ok(());
    }
    let (l, d, b): (usize, usize, usize) = (a.num("layers", 64), a.num("width", 1024), a.num("batch", 256));
    let configs = a.strs("configs", &["none", "segment", "layer"]);
    let mut per = serde_json::Map::new();
    for cfg in &configs {
        let r = cb::run_child(&["--config".into(), cfg.clone()]);
        per.insert(cfg.clone(), r.get("results").cloned().unwrap_or(r));
    }
    let mib = (1 << 20) as f64;
    cb::emit(&json!({
        "bench": "checkpoint_memory", "framework": "cotangent", "version": cb::version(),
        "params": {"layers": l, "width": d, "batch": b, "segment": a.num::<usize>("segment", 8),
                   "reps": a.num::<usize>("reps", 1), "warmup": a.num::<usize>("warmup", 1)},
        "theory": cb::r3(json!({"params_mib": (l * d * d * 4) as f64 / mib,
                                "activation_mib_each": (b * d * 4) as f64 / mib,
                                "all_activations_mib": (l * b * d * 4) as f64 / mib})),
        "results": {"eager": per}, "machine": cb::env_info(None),
    }));
    Ok(())
}
