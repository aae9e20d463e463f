//! The gated delta rule, differentiated two ways: op by op, and chunked with a custom function
//! whose VJP recomputes each chunk from its inputs (ordered after the forward with `depends`).
//!
//! The recurrence, per batch element and head (state S is d_k × d_v, zero at the start; q and k
//! are L2-normalised):
//!
//! ```text
//! g_t = exp(-softplus(a_t)),  β_t = sigmoid(b_t)
//! S   = S · g_t                       decay
//! kv  = k_tᵀ S                        what the state predicts for k_t
//! δ   = (v_t − kv) · β_t              the correction (the delta rule)
//! S   = S + k_t ⊗ δ                   write it back
//! y_t = q_tᵀ S                        read out
//! ```
//!
//! The loss is `sum(y · w)` for a fixed `w`; we differentiate it with respect to q, k, v, a, b.
//!
//! * **op by op**: reverse mode keeps every intermediate of every step alive until the backward
//!   pass reaches it, a few d_k × d_v states per step: memory grows with T.
//! * **chunked**: the sequence is cut into chunks of C steps. Each chunk is one custom function
//!   `(S_in, q_c, k_c, v_c, a_c, b_c) -> (y_c, S_out)` whose forward keeps only its inputs and
//!   outputs. Its 3-argument VJP `(primals, cotangents, outputs)` recomputes the chunk op by op on
//!   `depends(primals, outputs)` (so the recomputation cannot run before the forward produced
//!   the outputs) and differentiates that with `ct::vjp`. Memory: the chunk boundaries plus one
//!   chunk's intermediates. Since the chunk's forward and rule each build hundreds of nodes,
//!   cotangent keeps one node per chunk in the graph and builds each chunk's recomputation
//!   only while evaluating it, so the graph itself stays small too.
//!
//! Run (release): `cargo run --release --example gated_delta -- [--t 2048] [--chunk 64]
//! [--mode both|opbyop|chunked] [--check]`. Peak memory is the process high-water mark (VmHWM in
//! /proc/self/status), so each mode runs in its own process: the example re-executes itself.
use cotangent::{self as ct, Array, DType};
use std::time::Instant;

/// Problem size.
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    h: usize,
    t: usize,
    dk: usize,
    dv: usize,
}

/// The inputs of the loss: q, k `[B,H,T,dk]`, v `[B,H,T,dv]`, a, b `[B,H,T]`; and the fixed
/// weighting w `[B,H,T,dv]`.
struct Inputs {
    qkvab: Vec<Array>,
    w: Array,
}

/// Deterministic pseudo-random inputs (a small LCG, so the example needs nothing else).
fn make_inputs(d: Dims) -> Inputs {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = |shape: &[usize], lo: f32, hi: f32| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                lo + (hi - lo) * ((state >> 40) as f32 / (1u64 << 24) as f32)
            })
            .collect();
        Array::from_vec(v, shape)
    };
    let (b, h, t, dk, dv) = (d.b, d.h, d.t, d.dk, d.dv);
    let q = uniform(&[b, h, t, dk], -1.0, 1.0);
    let k = uniform(&[b, h, t, dk], -1.0, 1.0);
    let v = uniform(&[b, h, t, dv], -1.0, 1.0);
    let a = uniform(&[b, h, t], -3.0, 3.0);
    let bb = uniform(&[b, h, t], -3.0, 3.0);
    let w = uniform(&[b, h, t, dv], -1.0, 1.0);
    Inputs { qkvab: vec![q, k, v, a, bb], w }
}

/// `x / ||x||` along the last axis.
fn l2_normalize(x: &Array) -> Array {
    x * (x.square().sum(&[-1], true) + 1e-6).rsqrt()
}

/// `exp(-softplus(a)) = 1 / (1 + e^a)`, written as the definition.
fn decay(a: &Array) -> Array {
    let softplus = (a.exp() + 1.0).log();
    (-softplus).exp()
}

/// The recurrence over the steps of `q, k [B,H,C,dk]` (not yet normalised), `v [B,H,C,dv]`, `a, b [B,H,C]` from
/// state `s [B,H,dk,dv]`: returns `[y [B,H,C,dv], S_out]`. Plain ops only, so `ct::vjp` can
/// differentiate it; the op-by-op mode runs it on the whole sequence, the chunked mode on one
/// chunk. Each step works on rows: `x_t = x[.., t:t+1, :]` is `[B,H,1,d]`, so `kᵀ_t S` is the
/// matrix product `k_t @ S` and `k_t ⊗ δ` is `k_tᵀ @ δ`.
fn recurrence(x: &[Array]) -> Vec<Array> {
    // q and k are normalised here, row by row, so that a chunk normalises its own rows and the
    // normalised sequence is never stored whole
    let (mut s, q, k, v) = (x[0].clone(), &l2_normalize(&x[1]), &l2_normalize(&x[2]), &x[3]);
    let g = decay(&x[4]).expand_dims(&[-1]); // [B,H,C,1]
    let beta = x[5].sigmoid().expand_dims(&[-1]); // [B,H,C,1]
    let steps = q.dim(2);
    let mut ys = Vec::with_capacity(steps);
    for t in 0..steps as isize {
        let row = |x: &Array| x.slice_axis(2, Some(t), Some(t + 1), 1);
        let (q_t, k_t, v_t) = (row(q), row(k), row(v)); // [B,H,1,dk], [B,H,1,dk], [B,H,1,dv]
        let (g_t, beta_t) = (row(&g), row(&beta)); // [B,H,1,1], broadcast over S
        s = &s * &g_t; // S = S · g_t
        let kv = k_t.matmul(&s); // kᵀ S: [B,H,1,dv]
        let delta = (&v_t - &kv) * &beta_t; // [B,H,1,dv]
        s = &s + k_t.swapaxes(-1, -2).matmul(&delta); // S + k ⊗ δ
        ys.push(q_t.matmul(&s)); // qᵀ S: [B,H,1,dv]
    }
    vec![ct::concatenate(&ys, 2), s]
}

/// One chunk as a custom function: the forward is `recurrence`; the VJP recomputes it on
/// `depends(primals, outputs)` and differentiates the recomputation. (This is what
/// `ct::checkpoint(recurrence)` does; spelled out here because it is the pattern.)
fn chunk_function() -> impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync + Clone + 'static {
    ct::custom_function(recurrence)
        .vjp(|primals, cotangents, outputs| {
            let inputs = ct::depends(primals, outputs);
            ct::vjp(recurrence, &inputs, cotangents).map(|(_, grads)| grads)
        })
        .name("gated_delta_chunk")
        .build()
}

/// `sum(y · w)` computed op by op (`chunk = None`) or chunk by chunk.
fn loss(x: &[Array], w: &Array, dims: Dims, chunk: Option<usize>) -> ct::Result<Array> {
    let (q, k) = (x[0].clone(), x[1].clone());
    let s0 = ct::zeros(&[dims.b, dims.h, dims.dk, dims.dv], x[0].dtype());
    let y = match chunk {
        None => recurrence(&[s0, q, k, x[2].clone(), x[3].clone(), x[4].clone()]).remove(0),
        Some(c) => {
            let f = chunk_function();
            let mut s = s0;
            let mut ys = Vec::new();
            for start in (0..dims.t).step_by(c) {
                let cut = |x: &Array| x.slice_axis(2, Some(start as isize), Some((start + c) as isize), 1);
                let mut out = f(&[s, cut(&q), cut(&k), cut(&x[2]), cut(&x[3]), cut(&x[4])])?;
                s = out.pop().expect("S_out");
                ys.push(out.pop().expect("y_c"));
            }
            ct::concatenate(&ys, 2)
        }
    };
    Ok((y * w).sum_all())
}

/// Gradients of the loss with respect to q, k, v, a, b, evaluated.
fn gradients(inputs: &Inputs, dims: Dims, chunk: Option<usize>) -> ct::Result<Vec<Array>> {
    let w = inputs.w.clone();
    let grad = ct::grad(move |x: &[Array]| loss(x, &w, dims, chunk));
    let g = grad(&inputs.qkvab)?;
    ct::eval(&g)?;
    Ok(g)
}

/// The process's peak resident memory (VmHWM) in bytes.
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Largest difference between two gradients relative to the largest magnitude of the second.
fn max_rel_diff(a: &Array, b: &Array) -> f64 {
    let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    a.iter().zip(&b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
}

struct Args {
    t: usize,
    chunk: usize,
    mode: String,
    check: bool,
    child: bool,
}

fn parse_args() -> Args {
    let mut args = Args { t: 2048, chunk: 64, mode: "both".into(), check: false, child: false };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--t" => args.t = value().parse().expect("--t N"),
            "--chunk" => args.chunk = value().parse().expect("--chunk C"),
            "--mode" => args.mode = value(),
            "--check" => args.check = true,
            "--child" => args.child = true,
            other => panic!("unknown argument {other}; use --t N --chunk C --mode both|opbyop|chunked --check"),
        }
    }
    assert!(args.t.is_multiple_of(args.chunk), "--t must be a multiple of --chunk");
    args
}

/// Run one mode in this process and print one JSON line.
fn run_mode(mode: &str, dims: Dims, chunk: usize) {
    let inputs = make_inputs(dims);
    let start = Instant::now();
    let grads = gradients(&inputs, dims, (mode == "chunked").then_some(chunk)).expect("gradients");
    let secs = start.elapsed().as_secs_f64();
    let checksum: f64 = grads.iter().map(|g| g.astype(DType::F64).sum_all().item::<f64>().unwrap()).sum();
    println!(
        "{{\"mode\": \"{mode}\", \"T\": {}, \"chunk\": {chunk}, \"seconds\": {secs:.3}, \"peak_mib\": {:.1}, \"grad_checksum\": {checksum:.6}}}",
        dims.t,
        peak_rss_bytes() as f64 / (1u64 << 20) as f64
    );
}

/// Run one mode in a fresh process (so its peak memory is its own); returns (seconds, MiB).
fn run_child(mode: &str, t: usize, chunk: usize) -> (f64, f64) {
    let exe = std::env::current_exe().expect("current_exe");
    let out = std::process::Command::new(exe)
        .args(["--child", "--mode", mode, "--t", &t.to_string(), "--chunk", &chunk.to_string()])
        .output()
        .expect("re-run the example");
    assert!(out.status.success(), "{mode} failed: {}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    println!("{line}");
    let field = |name: &str| -> f64 {
        let rest = line.split(&format!("\"{name}\": ")).nth(1).expect(name);
        rest.split([',', '}']).next().unwrap().trim().parse().expect(name)
    };
    (field("seconds"), field("peak_mib"))
}

fn main() {
    let args = parse_args();
    let dims = |t| Dims { b: 1, h: 4, t, dk: 64, dv: 64 };
    if args.child {
        run_mode(&args.mode, dims(args.t), args.chunk);
        return;
    }
    if args.check {
        // same gradients both ways (f32, T = 256)
        let d = dims(256);
        let inputs = make_inputs(d);
        let a = gradients(&inputs, d, None).expect("op-by-op gradients");
        let b = gradients(&inputs, d, Some(args.chunk)).expect("chunked gradients");
        let worst = ["q", "k", "v", "a", "b"]
            .iter()
            .zip(a.iter().zip(&b))
            .map(|(name, (x, y))| {
                let r = max_rel_diff(y, x);
                println!(
                    "{{\"check\": \"d{name}\", \"T\": 256, \"chunk\": {}, \"max_rel_diff\": {r:.3e}}}",
                    args.chunk
                );
                r
            })
            .fold(0.0f64, f64::max);
        assert!(worst < 1e-5, "chunked and op-by-op gradients differ: {worst:e}");
    }
    let modes: Vec<&str> = match args.mode.as_str() {
        "both" => vec!["opbyop", "chunked"],
        m @ ("opbyop" | "chunked") => vec![m],
        m => panic!("unknown --mode {m}"),
    };
    let results: Vec<(f64, f64)> = modes.iter().map(|m| run_child(m, args.t, args.chunk)).collect();
    if let [(t_op, m_op), (t_ch, m_ch)] = results[..] {
        println!(
            "{{\"T\": {}, \"chunk\": {}, \"time_ratio_chunked_over_opbyop\": {:.2}, \"memory_ratio_chunked_over_opbyop\": {:.3}}}",
            args.t,
            args.chunk,
            t_ch / t_op,
            m_ch / m_op
        );
    }
}
