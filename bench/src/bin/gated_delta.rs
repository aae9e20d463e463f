//! Gated delta rule recurrence (DESIGN §1): gradient time and peak memory, differentiated
//! op by op versus chunked (a `ct::checkpoint` per chunk of `--chunk` steps, whose VJP recomputes
//! the chunk from its inputs).
//!
//! Per head (B = 1 batch, H = 4 heads, state `S` of d_k × d_v = 64 × 64), for t = 0..T:
//! ```text
//! S   = exp(g_t) · S                          (gate, g_t < 0)
//! u   = β_t · (v_t − kᵀ_t S)                  (delta rule)
//! S   = S + k_t uᵀ
//! o_t = qᵀ_t S
//! loss = Σ_t Σ o_t² / T
//! ```
//! The inputs are given per step (`q_t`, `k_t`: B×H×d_k, `v_t`: B×H×d_v, `β_t`, `g_t`: B×H; k
//! L2-normalised, β = sigmoid(N(0,1)), exp(g) in [0.9, 1)), so neither variant pays for slicing a
//! B×H×T×d array; the gradient is taken with respect to all 5 T inputs. Vector–matrix products are
//! written as broadcast multiply + sum over d_k.
//!
//! Each (T, mode) runs in its own process (VmHWM is per process). Reported per run, as
//! `checkpoint_memory.py` does: `s_per_grad` (median of `--reps` calls after `--warmup`), RSS
//! before, peak RSS during the measured calls (VmHWM reset through /proc/self/clear_refs), their
//! difference, the lifetime `ru_maxrss`, the loss and the gradient norm.
use cotangent::{self as ct, Array, DType};
use cotangent_bench::{self as cb, serde_json::json, Args, Rng};

const B: usize = 1;

/// A boxed value_and_grad function.
type ValueAndGrad = Box<dyn Fn(&[Array]) -> ct::Result<(Vec<Array>, Vec<Array>)>>;

#[derive(Clone, Copy)]
struct Dims {
    h: usize,
    dk: usize,
    dv: usize,
}

/// One step of the recurrence on state `s` (B×H×dk×dv); returns (o_t, new state).
fn step(d: Dims, s: &Array, q: &Array, k: &Array, v: &Array, beta: &Array, g: &Array) -> (Array, Array) {
    let Dims { h, dk, dv } = d;
    let (bi, hi, dki, dvi) = (B as isize, h as isize, dk as isize, dv as isize);
    let s = s * g.exp().reshape(&[bi, hi, 1, 1]);
    let kc = k.reshape(&[bi, hi, dki, 1]);
    let ks = (&kc * &s).sum(&[-2], false); // B×H×dv
    let u = (v - ks) * beta.reshape(&[bi, hi, 1]);
    let s = s + kc * u.reshape(&[bi, hi, 1, dvi]);
    let o = (q.reshape(&[bi, hi, dki, 1]) * &s).sum(&[-2], false);
    (o, s)
}

/// Inputs layout: [q_0..q_{T-1}, k_.., v_.., beta_.., g_..].
fn inputs(t: usize, d: Dims) -> Vec<Array> {
    let mut rng = Rng::new(0);
    let Dims { h, dk, dv } = d;
    let mut out = Vec::with_capacity(5 * t);
    let scale = 1.0 / (dk as f64).sqrt();
    for _ in 0..t {
        out.push(Array::from_vec(rng.normal_f32(B * h * dk, scale), &[B, h, dk]));
    }
    for _ in 0..t {
        let mut k = rng.normal_f32(B * h * dk, 1.0);
        for row in k.chunks_mut(dk) {
            let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            row.iter_mut().for_each(|x| *x /= n);
        }
        out.push(Array::from_vec(k, &[B, h, dk]));
    }
    for _ in 0..t {
        out.push(Array::from_vec(rng.normal_f32(B * h * dv, 1.0), &[B, h, dv]));
    }
    for _ in 0..t {
        let b: Vec<f32> = (0..B * h).map(|_| (1.0 / (1.0 + (-rng.normal()).exp())) as f32).collect();
        out.push(Array::from_vec(b, &[B, h]));
    }
    for _ in 0..t {
        let g: Vec<f32> = (0..B * h).map(|_| (0.9 + 0.1 * rng.uniform()).ln() as f32).collect();
        out.push(Array::from_vec(g, &[B, h]));
    }
    out
}

/// Loss with the recurrence applied op by op.
fn loss_op_by_op(x: &[Array], t: usize, d: Dims) -> Array {
    let mut s = ct::zeros(&[B, d.h, d.dk, d.dv], DType::F32);
    let mut loss = ct::zeros(&[], DType::F32);
    for i in 0..t {
        let (o, s2) = step(d, &s, &x[i], &x[t + i], &x[2 * t + i], &x[3 * t + i], &x[4 * t + i]);
        s = s2;
        loss = loss + (&o * &o).sum_all();
    }
    loss * (1.0 / t as f64)
}

/// Loss with one checkpointed function per chunk of `c` steps: inputs [S, q.., k.., v.., beta..,
/// g..] of the chunk, outputs [o.., S_out].
fn loss_chunked(
    x: &[Array],
    t: usize,
    c: usize,
    chunk_fn: &(impl Fn(&[Array]) -> ct::Result<Vec<Array>> + ?Sized),
    d: Dims,
) -> ct::Result<Array> {
    let mut s = ct::zeros(&[B, d.h, d.dk, d.dv], DType::F32);
    let mut loss = ct::zeros(&[], DType::F32);
    let mut start = 0;
    while start < t {
        let len = c.min(t - start);
        let mut args = Vec::with_capacity(1 + 5 * len);
        args.push(s.clone());
        for f in 0..5 {
            args.extend_from_slice(&x[f * t + start..f * t + start + len]);
        }
        let mut out = chunk_fn(&args)?;
        s = out.pop().expect("state output");
        for o in &out {
            loss = loss + (o * o).sum_all();
        }
        start += len;
    }
    Ok(loss * (1.0 / t as f64))
}

fn chunk_body(d: Dims) -> impl Fn(&[Array]) -> Vec<Array> + Send + Sync + Clone + 'static {
    move |a: &[Array]| {
        let len = (a.len() - 1) / 5;
        let mut s = a[0].clone();
        let mut outs = Vec::with_capacity(len + 1);
        for i in 0..len {
            let (o, s2) =
                step(d, &s, &a[1 + i], &a[1 + len + i], &a[1 + 2 * len + i], &a[1 + 3 * len + i], &a[1 + 4 * len + i]);
            s = s2;
            outs.push(o);
        }
        outs.push(s);
        outs
    }
}

fn child(a: &Args, t: usize, mode: &str, d: Dims, c: usize) -> ct::Result<serde_json::Value> {
    let reps: usize = a.num("reps", 3);
    let warmup: usize = a.num("warmup", 1);
    let x = inputs(t, d);
    ct::eval(&x)?;
    let vg: ValueAndGrad = if mode == "op_by_op" {
        Box::new(ct::value_and_grad(move |x: &[Array]| loss_op_by_op(x, t, d)))
    } else {
        let chunk = ct::checkpoint(chunk_body(d));
        Box::new(ct::value_and_grad(move |x: &[Array]| loss_chunked(x, t, c, &chunk, d)))
    };
    let call = |x: &[Array]| -> ct::Result<(Vec<Array>, Vec<Array>)> {
        let (v, g) = vg(x)?;
        let mut all = v.clone();
        all.extend(g.iter().cloned());
        ct::eval(&all)?;
        Ok((v, g))
    };
    let rss_setup = cb::rss_mib();
    let (first, r) = cb::timed_once(|| call(&x));
    drop(r?);
    for _ in 1..warmup {
        drop(call(&x)?);
    }
    cb::trim_heap();
    let rss_before = cb::rss_mib();
    let reset_ok = cb::reset_peak_rss();
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..reps {
        drop(last.take()); // release the previous result before the next call
        let (dt, r) = cb::timed_once(|| call(&x));
        times.push(dt);
        last = Some(r?);
    }
    let peak = cb::hwm_mib();
    let (v, g) = last.expect("reps >= 1");
    let loss = v[0].item::<f32>()?;
    let mut gn = 0.0f64;
    for gi in &g {
        gn += gi.to_f64_vec()?.iter().map(|x| x * x).sum::<f64>();
    }
    let delta = match (peak, rss_before) {
        (Some(p), Some(b)) if reset_ok => Some(p - b),
        _ => None,
    };
    Ok(json!({
        "s_per_grad": cb::median(&times), "first_call_s": first,
        "rss_after_setup_mib": rss_setup, "rss_before_mib": rss_before,
        "peak_rss_run_mib": if reset_ok { peak } else { None }, "delta_rss_run_mib": delta,
        "maxrss_mib": cb::maxrss_mib(), "loss": loss, "grad_norm": gn.sqrt(),
    }))
}

fn main() -> ct::Result<()> {
    let a = Args::parse();
    let ts: Vec<usize> = a.nums("t", &[256, 1024, 2048]);
    let d = Dims { h: a.num("heads", 4), dk: a.num("dk", 64), dv: a.num("dv", 64) };
    let c: usize = a.num("chunk", 64);
    let modes = a.strs("modes", &["op_by_op", "chunked"]);
    if let Some(mode) = a.str("mode") {
        let t: usize = a.num("child-t", 0);
        let r = child(&a, t, &mode, d, c)?;
        cb::emit(&json!({"mode": mode, "t": t, "results": cb::r3(r)}));
        return Ok(());
    }
    let mut results = serde_json::Map::new();
    for &t in &ts {
        let mut per = serde_json::Map::new();
        for mode in &modes {
            let r = cb::run_child(&["--mode".into(), mode.clone(), "--child-t".into(), t.to_string()]);
            per.insert(mode.clone(), r.get("results").cloned().unwrap_or(r));
        }
        results.insert(t.to_string(), per.into());
    }
    let state_mib = (B * d.h * d.dk * d.dv * 4) as f64 / (1 << 20) as f64;
    cb::emit(&json!({
        "bench": "gated_delta", "framework": "cotangent", "version": cb::version(),
        "params": {"t": ts, "batch": B, "heads": d.h, "dk": d.dk, "dv": d.dv, "chunk": c,
                   "reps": a.num::<usize>("reps", 3), "warmup": a.num::<usize>("warmup", 1)},
        "theory": {"state_mib": state_mib, "all_states_mib_at_max_t": state_mib * *ts.iter().max().unwrap_or(&0) as f64},
        "results": results, "machine": cb::env_info(None),
    }));
    Ok(())
}
