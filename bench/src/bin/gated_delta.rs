//! Gated delta rule recurrence (DESIGN §1): gradient time and peak memory, differentiated
//! op by op versus chunked (a `ct::checkpoint` per chunk of `--chunk` steps, default 64, whose
//! VJP recomputes the chunk from its inputs).
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
//! B×H×T×d array; the gradient is taken with respect to all 5 T inputs.
//!
//! Modes (`--modes`, each (T, mode) in its own process):
//! - `op_by_op`: the recurrence step by step; vector–matrix products are broadcast multiply +
//!   sum over d_k. The backward pass keeps every step's state.
//! - `chunked` (the target row): per chunk, one checkpointed function in chunk-parallel (WY / UT
//!   transform) form, as flash-linear-attention's `chunk_gated_delta_rule`: the chunk's rows are
//!   stacked inside the checkpoint into Q, K (C×d_k), V (C×d_v); with `G = cumsum(g)` in the
//!   chunk, `γ = exp(G)`, `M_ts = exp(G_t − G_s)` for s ≤ t (masked to −∞ before `exp`, 0 above
//!   the diagonal) and `A = diag(β)(K Kᵀ ⊙ M)` strictly lower triangular,
//!   `(I + A) U = diag(β)(V − diag(γ) K S0)`, `O = diag(γ) Q S0 + (Q Kᵀ ⊙ M) U`,
//!   `S_C = γ_C S0 + (K ⊙ exp(G_C − G))ᵀ U`, all with matmuls batched over B×H. U comes from
//!   forward substitution, by blocks of `--sub` rows (default 8; 1 = row by row): inverses of
//!   the diagonal blocks of `I + A` by row forward substitution, all blocks at once, then one
//!   block row at a time. The loss sums O² of the stacked outputs (the same value).
//! - `chunked_stepwise`: the same checkpoint per chunk with the step-wise recurrence of
//!   `op_by_op` as its body (recomputed step by step in the backward pass).
//!
//! Reported per run, as `checkpoint_memory.py` does: `s_per_grad` (median of `--reps` calls after
//! `--warmup`), RSS before, peak RSS during the measured calls (VmHWM reset through
//! /proc/self/clear_refs), their difference, the lifetime `ru_maxrss`, the loss and the gradient
//! norm. Each child writes its gradient (f32) to `--grad-out`; the chunked modes get
//! `grad_rel_diff_vs_op_by_op` = max over all gradient entries of |a − b| / max |b|, b = op by
//! op (when `op_by_op` is among the modes).
//!
//! `--key-corr ρ` (default 0) mixes a direction shared by all steps into the keys, a stress test
//! of the chunked solve for correlated keys (ρ = 0.99: rel diff 6e-7 at T=256 and 5e-7 at 2048).
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

/// Inputs layout: [q_0..q_{T-1}, k_.., v_.., beta_.., g_..]. `corr` > 0 mixes a direction shared
/// by all steps (per head) into the keys before normalising: `k ∝ corr·shared + (1 − corr)·noise`
/// (a stress test of the chunked solve; 0 leaves the inputs as they are).
fn inputs(t: usize, d: Dims, corr: f32) -> Vec<Array> {
    let mut rng = Rng::new(0);
    let Dims { h, dk, dv } = d;
    let mut out = Vec::with_capacity(5 * t);
    let scale = 1.0 / (dk as f64).sqrt();
    let shared = Rng::new(1).normal_f32(B * h * dk, 1.0);
    for _ in 0..t {
        out.push(Array::from_vec(rng.normal_f32(B * h * dk, scale), &[B, h, dk]));
    }
    for _ in 0..t {
        let mut k = rng.normal_f32(B * h * dk, 1.0);
        if corr > 0.0 {
            for (x, y) in k.iter_mut().zip(&shared) {
                *x = corr * y + (1.0 - corr) * *x;
            }
        }
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

/// The step-wise chunk body (`chunked_stepwise`): the recurrence of [`step`] over the chunk.
fn stepwise_body(d: Dims) -> impl Fn(&[Array]) -> Vec<Array> + Send + Sync + Clone + 'static {
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

/// `x[.., r0..r1, c0..c1]` of a `[.., rows, cols]` array (a view).
fn block(x: &Array, r0: usize, r1: usize, c0: usize, c1: usize) -> Array {
    let n = x.ndim() as isize;
    x.slice_axis(n - 2, Some(r0 as isize), Some(r1 as isize), 1).slice_axis(
        n - 1,
        Some(c0 as isize),
        Some(c1 as isize),
        1,
    )
}

/// `x` with rows `r0..r1` of its `[.., rows, cols]` trailing axes replaced by `rows`.
fn set_rows(x: &Array, r0: usize, r1: usize, rows: &Array) -> Array {
    let sh = x.shape();
    let n = sh.len();
    let mut starts = vec![0isize; n];
    let mut stops: Vec<isize> = sh.iter().map(|&e| e as isize).collect();
    starts[n - 2] = r0 as isize;
    stops[n - 2] = r1 as isize;
    x.slice_update(rows, &starts, &stops, &vec![1; n])
}

/// Solve `(I + A) X = R` for a strictly lower-triangular `A` (`[.., n, n]`, batched) by forward
/// substitution over the rows: `x_r = R_r − A[r, :r] X[:r]`, one batched matmul per row.
fn forward_subst(a: &Array, r: &Array) -> Array {
    let n = a.shape()[a.ndim() - 1];
    let mut x = r.clone();
    for t in 1..n {
        let xt = block(r, t, t + 1, 0, r.shape()[r.ndim() - 1])
            - block(a, t, t + 1, 0, t).matmul(&block(&x, 0, t, 0, x.shape()[x.ndim() - 1]));
        x = set_rows(&x, t, t + 1, &xt);
    }
    x
}

/// The chunk body in chunk-parallel (WY / UT transform) form (`chunked`), same inputs and
/// outputs as [`stepwise_body`] except that the outputs are `[O, S_out]` with `O` the chunk's
/// outputs stacked (B×H×C×d_v). With `G = cumsum(g)` inside the chunk, `γ = exp(G)`,
/// `M_ts = exp(G_t − G_s)` for `s ≤ t` (0 above the diagonal, masked before `exp`) and
/// `A = diag(β) (K Kᵀ ⊙ M)` strictly below the diagonal:
/// ```text
/// (I + A) U = diag(β) (V − diag(γ) K S0)        forward substitution
/// O   = diag(γ) Q S0 + (Q Kᵀ ⊙ M) U
/// S_C = γ_C S0 + (K ⊙ exp(G_C − G))ᵀ U
/// ```
/// `sub` > 1 solves for `U` by blocks of `sub` rows: the inverses of the `sub × sub` diagonal
/// blocks of `I + A` by forward substitution (all blocks at once), then block forward
/// substitution `U_i = (I + A_ii)⁻¹ (R_i − A[i, :i] U[:i])`; `sub` = 1 is row by row.
fn wy_body(sub: usize) -> impl Fn(&[Array]) -> Vec<Array> + Send + Sync + Clone + 'static {
    move |a: &[Array]| {
        let len = (a.len() - 1) / 5;
        let s0 = &a[0];
        let part = |f: usize| &a[1 + f * len..1 + (f + 1) * len];
        // stack the steps' rows: B×H×d each → B×H×(C·d) → B×H×C×d (one concatenate, one
        // reshape: half the nodes of `ct::stack`, which adds an expand_dims per step)
        let rows = |f: usize| {
            let sh = a[1 + f * len].shape();
            let (b, h, d) = (sh[0] as isize, sh[1] as isize, sh[2] as isize);
            ct::concatenate(part(f), 2).reshape(&[b, h, len as isize, d])
        };
        // B×H each → B×(C·H) → B×C×H → B×H×C
        let scalars = |f: usize| {
            let sh = a[1 + f * len].shape();
            ct::concatenate(part(f), 1).reshape(&[sh[0] as isize, len as isize, sh[1] as isize]).swapaxes(1, 2)
        };
        let (q, k, v, beta, g) = (rows(0), rows(1), rows(2), scalars(3), scalars(4));
        let gc = g.cumsum(-1);
        let lower = ct::tri(len, len, 0, DType::Bool);
        let strict = ct::tri(len, len, -1, DType::F32);
        let mask_exp = |gc: &Array, lower: &Array| {
            let diff = gc.expand_dims(&[-1]) - gc.expand_dims(&[-2]); // G_t − G_s
            ct::select(lower, &diff, f64::NEG_INFINITY).exp()
        };
        let m = mask_exp(&gc, &lower);
        let kt = k.swapaxes(-1, -2);
        let bcol = beta.expand_dims(&[-1]);
        let a_mat = k.matmul(&kt) * &m * &strict * &bcol;
        let gam = gc.exp().expand_dims(&[-1]);
        let rhs = &bcol * (&v - &gam * k.matmul(s0));
        let u = if sub <= 1 || !len.is_multiple_of(sub) || len <= sub {
            forward_subst(&a_mat, &rhs)
        } else {
            let nb = len / sub;
            let sh = k.shape().to_vec();
            let (bb, hh, dk) = (sh[0] as isize, sh[1] as isize, sh[3] as isize);
            let (nbi, si) = (nb as isize, sub as isize);
            // diagonal blocks of A, computed from the blocked inputs
            let kb = k.reshape(&[bb, hh, nbi, si, dk]);
            let gb = gc.reshape(&[bb, hh, nbi, si]);
            let bb_col = beta.reshape(&[bb, hh, nbi, si, 1]);
            let ad = kb.matmul(&kb.swapaxes(-1, -2))
                * mask_exp(&gb, &ct::tri(sub, sub, 0, DType::Bool))
                * ct::tri(sub, sub, -1, DType::F32)
                * bb_col;
            let eye = ct::eye(sub, sub, 0, DType::F32);
            let tinv = forward_subst(&ad, &eye.broadcast_to(ad.shape())); // (I + A_ii)⁻¹
            let dv = rhs.shape()[3];
            let mut u = rhs.clone();
            for i in 0..nb {
                let (r0, r1) = (i * sub, (i + 1) * sub);
                let mut ri = block(&rhs, r0, r1, 0, dv);
                if i > 0 {
                    ri = ri - block(&a_mat, r0, r1, 0, r0).matmul(&block(&u, 0, r0, 0, dv));
                }
                let ti = tinv.slice_axis(2, Some(i as isize), Some(i as isize + 1), 1).squeeze(&[2]);
                u = set_rows(&u, r0, r1, &ti.matmul(&ri));
            }
            u
        };
        let o = &gam * q.matmul(s0) + (q.matmul(&kt) * &m).matmul(&u);
        let g_last = gc.slice_axis(-1, Some(len as isize - 1), None, 1); // B×H×1
        let tail = (&g_last - &gc).exp().expand_dims(&[-1]); // exp(G_C − G_t), B×H×C×1
        let s = g_last.exp().expand_dims(&[-1]) * s0 + kt.matmul(&(tail * &u));
        vec![o, s]
    }
}

fn child(a: &Args, t: usize, mode: &str, d: Dims, c: usize, sub: usize) -> ct::Result<serde_json::Value> {
    let reps: usize = a.num("reps", 3);
    let warmup: usize = a.num("warmup", 1);
    let x = inputs(t, d, a.num("key-corr", 0.0));
    ct::eval(&x)?;
    let vg: ValueAndGrad = match mode {
        "op_by_op" => Box::new(ct::value_and_grad(move |x: &[Array]| loss_op_by_op(x, t, d))),
        "chunked" => {
            let chunk = ct::checkpoint(wy_body(sub));
            Box::new(ct::value_and_grad(move |x: &[Array]| loss_chunked(x, t, c, &chunk, d)))
        }
        "chunked_stepwise" => {
            let chunk = ct::checkpoint(stepwise_body(d));
            Box::new(ct::value_and_grad(move |x: &[Array]| loss_chunked(x, t, c, &chunk, d)))
        }
        _ => return Err(ct::Error::Eval(format!("unknown mode {mode:?}"))),
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
    let mut bytes = Vec::new();
    for gi in &g {
        let gv = gi.to_vec::<f32>()?;
        gn += gv.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>();
        bytes.extend(gv.iter().flat_map(|x| x.to_le_bytes()));
    }
    if let Some(path) = a.str("grad-out") {
        std::fs::write(path, bytes).map_err(|e| ct::Error::Eval(e.to_string()))?;
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

fn read_f32(path: &std::path::Path) -> Option<Vec<f64>> {
    let b = std::fs::read(path).ok()?;
    Some(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect())
}

fn main() -> ct::Result<()> {
    let a = Args::parse();
    let ts: Vec<usize> = a.nums("t", &[256, 1024, 2048]);
    let d = Dims { h: a.num("heads", 4), dk: a.num("dk", 64), dv: a.num("dv", 64) };
    let c: usize = a.num("chunk", 64);
    let sub: usize = a.num("sub", 8);
    let modes = a.strs("modes", &["op_by_op", "chunked", "chunked_stepwise"]);
    if let Some(mode) = a.str("mode") {
        let t: usize = a.num("child-t", 0);
        let r = child(&a, t, &mode, d, c, sub)?;
        cb::emit(&json!({"mode": mode, "t": t, "results": cb::r3(r)}));
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("cotangent-bench-gated-delta-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ct::Error::Eval(e.to_string()))?;
    let mut results = serde_json::Map::new();
    for &t in &ts {
        let mut per = serde_json::Map::new();
        let mut grads = Vec::new();
        for mode in &modes {
            let gpath = dir.join(format!("{mode}-{t}.f32"));
            let _ = std::fs::remove_file(&gpath);
            let r = cb::run_child(&[
                "--mode".into(),
                mode.clone(),
                "--child-t".into(),
                t.to_string(),
                "--grad-out".into(),
                gpath.display().to_string(),
            ]);
            per.insert(mode.clone(), r.get("results").cloned().unwrap_or(r));
            if let Some(g) = read_f32(&gpath) {
                grads.push((mode.clone(), g));
            }
            let _ = std::fs::remove_file(&gpath);
        }
        // max |a − b| / max |b| over all gradient entries, b = op by op
        if let Some((_, reference)) = grads.iter().find(|(m, _)| m == "op_by_op") {
            let scale = reference.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
            for (mode, g) in grads.iter().filter(|(m, _)| m != "op_by_op") {
                let diff = g.iter().zip(reference).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
                if let Some(serde_json::Value::Object(o)) = per.get_mut(mode) {
                    o.insert("grad_rel_diff_vs_op_by_op".into(), cb::r3(json!(diff / scale)));
                }
            }
        }
        results.insert(t.to_string(), per.into());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let state_mib = (B * d.h * d.dk * d.dv * 4) as f64 / (1 << 20) as f64;
    cb::emit(&json!({
        "bench": "gated_delta", "framework": "cotangent", "version": cb::version(),
        "params": {"t": ts, "batch": B, "heads": d.h, "dk": d.dk, "dv": d.dv, "chunk": c, "sub": sub,
                   "reps": a.num::<usize>("reps", 3), "warmup": a.num::<usize>("warmup", 1)},
        "theory": {"state_mib": state_mib, "all_states_mib_at_max_t": state_mib * *ts.iter().max().unwrap_or(&0) as f64},
        "results": results, "machine": cb::env_info(None),
    }));
    Ok(())
}
