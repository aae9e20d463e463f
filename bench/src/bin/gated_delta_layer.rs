//! Gated delta rule at layer scale (Qwen3-Next's linear attention heads): forward + backward of
//! cotangent-nn's chunked custom function (`gated_delta_chunked`, whose VJP recomputes each chunk)
//! on `q, k, v: [B, H, T, d]`, `log_g, beta: [B, H, T]`, on `--device` (cpu, cuda).
//!
//! Options: `--t 2048 8192` (sequence lengths), `--heads 16`, `--dk 128` (= d_v), `--chunk 64`,
//! `--reps 5`, `--warmup 2`. Reported per T: `ms_per_step` (median over reps of value_and_grad
//! with respect to all five inputs, synchronised), `peak_mib` (peak device memory during the
//! measured steps for CUDA, from `Device::memory_stats`; peak RSS growth on the CPU), the loss and
//! the gradient norm.
//!
//! Inputs as the peers' anchors (`bench/gpu/anchors.py`): k L2-normalised per step, q scaled by
//! 1/√d_k, β = sigmoid(N(0,1)), log g = log(U[0.9, 1)), loss = Σ y² / T.
use cotangent::{self as ct, Array, Device};
use cotangent_bench::{self as cb, serde_json::json, Args, Rng};

fn main() {
    let a = Args::parse();
    let ts: Vec<usize> = a.nums("t", &[2048, 8192]);
    let (h, d, chunk) = (a.num("heads", 16usize), a.num("dk", 128usize), a.num("chunk", 64usize));
    let (reps, warmup) = (a.num("reps", 5usize), a.num("warmup", 2usize));
    let device = ct::default_device();
    for &t in &ts {
        let mut rng = Rng::new(0);
        let n = h * t * d;
        let q = Array::from_vec(rng.normal_f32(n, 1.0 / (d as f64).sqrt()), &[1, h, t, d]);
        let mut kv = rng.normal_f32(n, 1.0);
        for row in kv.chunks_mut(d) {
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            row.iter_mut().for_each(|x| *x /= norm);
        }
        let k = Array::from_vec(kv, &[1, h, t, d]);
        let v = Array::from_vec(rng.normal_f32(n, 1.0), &[1, h, t, d]);
        let log_g: Vec<f32> = (0..h * t).map(|_| (0.9 + 0.1 * rng.uniform()).ln() as f32).collect();
        let beta: Vec<f32> = (0..h * t).map(|_| (1.0 / (1.0 + (-rng.normal()).exp())) as f32).collect();
        let inputs = vec![q, k, v, Array::from_vec(log_g, &[1, h, t]), Array::from_vec(beta, &[1, h, t])];
        ct::eval(&inputs).expect("inputs");
        let f = ct::value_and_grad_argnums(
            move |x: &[Array]| {
                let y = cotangent_nn::gated_delta::gated_delta_chunked(&x[0], &x[1], &x[2], &x[3], &x[4], chunk)?;
                Ok::<_, ct::Error>((&y * &y).sum_all() * (1.0 / t as f64))
            },
            &[0, 1, 2, 3, 4],
        );
        let step = || {
            let (values, grads) = f(&inputs).expect("value_and_grad");
            let value = values[0].clone();
            let norm2: Array = grads.iter().map(|g| (g * g).sum_all()).reduce(|x, y| x + y).unwrap();
            ct::eval(&[value.clone(), norm2.clone()]).expect("eval");
            (value, norm2)
        };
        for _ in 0..warmup {
            step();
        }
        device.synchronize().expect("synchronize");
        let rss0 = cb::rss_mib();
        cb::reset_peak_rss();
        if device != Device::Cpu {
            device.reset_peak_memory();
        }
        let before = device.memory_stats().map(|m| m.in_use).unwrap_or(0);
        let mut times = Vec::with_capacity(reps);
        let mut last = None;
        for _ in 0..reps {
            let (s, r) = cb::timed_once(|| {
                let r = step();
                device.synchronize().expect("synchronize");
                r
            });
            times.push(s);
            last = Some(r);
        }
        let (value, norm2) = last.expect("reps > 0");
        let peak_mib = if device == Device::Cpu {
            cb::hwm_mib().zip(rss0).map(|(h, r)| h - r)
        } else {
            device.memory_stats().map(|m| m.peak.saturating_sub(before) as f64 / (1 << 20) as f64)
        };
        cb::emit(&cb::record(
            "gated_delta_layer",
            json!({ "device": device.to_string(), "B": 1, "H": h, "T": t, "d_k": d, "d_v": d, "chunk": chunk,
                    "dtype": "float32", "reps": reps }),
            json!({ "ms_per_step": 1e3 * cb::median(&times), "peak_mib": peak_mib,
                    "loss": value.item::<f32>().ok(), "grad_norm": norm2.item::<f32>().ok().map(f32::sqrt) }),
        ));
    }
}
