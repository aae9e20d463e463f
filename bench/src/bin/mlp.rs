//! MLP training-step throughput, float32, synthetic data (peers: `bench/peers/mlp.py`).
//!
//! 784 → 512 → 512 → 10 (`--dims`), ReLU, softmax cross-entropy (mean over the batch), plain SGD
//! (lr 0.01), batch `--batch` (128), the same batch every step. One step = forward + backward +
//! parameter update, fully evaluated. Mode `eager` (lazy graph, one eval per step). GFLOP/s uses
//! the peers' estimate 6 · batch · weights per step.
//!
//! `--steps-per-sync N` (default 1): a timed call runs N steps, each evaluated, and then waits
//! for the device once. With 1, every step ends in a wait, so on a GPU no step's host work
//! overlaps the previous step's kernels; the GPU peers (`bench/gpu/anchors.py`) time loops of 50
//! steps with one wait, which `--steps-per-sync 50` matches. On the CPU the two are the same.
use cotangent::{self as ct, Array, DType};
use cotangent_bench::{self as cb, serde_json::json, Args, Rng};

const LR: f64 = 0.01;

/// args = [W_0, b_0, W_1, b_1, ..., x, y]
fn loss_fn(a: &[Array]) -> Array {
    let nl = (a.len() - 2) / 2;
    let (x, y) = (&a[2 * nl], &a[2 * nl + 1]);
    let mut h = x.clone();
    for i in 0..nl {
        h = h.matmul(&a[2 * i]) + &a[2 * i + 1];
        if i + 1 < nl {
            h = h.maximum(0.0);
        }
    }
    let lse = h.logsumexp(&[-1], false);
    let picked = h.take_along_axis(&y.expand_dims(&[-1]), -1).squeeze(&[-1]);
    (lse - picked).mean_all()
}

/// One training step: parameters and batch in, new parameters (and the loss) out.
type Step = dyn Fn(&[Array]) -> ct::Result<Vec<Array>>;

/// How many gathers and scatters so far waited for the GPU to check their indices, how many
/// ops ran on the host instead of the GPU (a step that waits for the GPU in its middle cannot
/// queue ahead of it), and how many compiled calls ran as one CUDA graph (all 0 without CUDA).
fn cuda_waits() -> [usize; 3] {
    #[cfg(feature = "cuda")]
    {
        use cotangent::backend::cuda;
        use std::sync::atomic::Ordering::Relaxed;
        [cuda::INDEX_CHECK_WAITS.load(Relaxed), cuda::HOST_FALLBACKS.load(Relaxed), cuda::GRAPH_LAUNCHES.load(Relaxed)]
    }
    #[cfg(not(feature = "cuda"))]
    {
        [0, 0, 0]
    }
}

/// Mean µs per step of `steps` steps spent building the step's graph, in `eval` (on a GPU:
/// launching its kernels) and waiting for the device afterwards.
fn host_split(
    state: &std::cell::RefCell<(Vec<Array>, Array)>,
    run: &Step,
    x: &Array,
    y: &Array,
    steps: usize,
) -> ct::Result<[f64; 3]> {
    let device = ct::default_device();
    let mut total = [0.0f64; 3];
    for _ in 0..steps {
        let mut st = state.borrow_mut();
        let mut args = st.0.clone();
        args.push(x.clone());
        args.push(y.clone());
        let t0 = std::time::Instant::now();
        let mut out = run(&args)?;
        let t1 = std::time::Instant::now();
        ct::eval(&out)?;
        let t2 = std::time::Instant::now();
        device.synchronize()?;
        let t3 = std::time::Instant::now();
        let loss = out.pop().expect("the loss");
        *st = (out, loss);
        for (acc, (a, b)) in total.iter_mut().zip([(t0, t1), (t1, t2), (t2, t3)]) {
            *acc += (b - a).as_secs_f64() * 1e6 / steps as f64;
        }
    }
    Ok(total)
}

fn main() -> ct::Result<()> {
    let a = Args::parse();
    let dims: Vec<usize> = a.nums("dims", &[784, 512, 512, 10]);
    let batch: usize = a.num("batch", 128);
    let reps: usize = a.num("reps", 5);
    let warmup: usize = a.num("warmup", 2);
    let min_time: f64 = a.num("min-time", 0.5);
    let per_sync: usize = a.num::<usize>("steps-per-sync", 1).max(1);
    let mut rng = Rng::new(0);
    let mut params = Vec::new();
    let mut nweights = 0usize;
    for w in dims.windows(2) {
        let (din, dout) = (w[0], w[1]);
        params.push(Array::from_vec(rng.normal_f32(din * dout, (2.0 / din as f64).sqrt()), &[din, dout]));
        params.push(ct::zeros(&[dout], DType::F32));
        nweights += din * dout;
    }
    let x = Array::from_vec(rng.normal_f32(batch * dims[0], 1.0), &[batch, dims[0]]);
    let nc = *dims.last().expect("dims");
    let y = Array::from_vec((0..batch).map(|_| rng.below(nc as u64) as i32).collect::<Vec<i32>>(), &[batch]);
    let np = params.len();
    let flops = 6.0 * batch as f64 * nweights as f64;
    let vg = ct::value_and_grad_argnums(loss_fn, &(0..np).collect::<Vec<_>>());
    let mut all = params.clone();
    all.push(x.clone());
    all.push(y.clone());
    ct::eval(&all)?;
    let loss0 = loss_fn(&all).item::<f32>()?;
    // one training step as a function: parameters, x, y -> new parameters, loss
    let step = move |args: &[Array]| -> ct::Result<Vec<Array>> {
        let (v, g) = vg(args)?;
        let mut out: Vec<Array> = args[..np].iter().zip(&g).map(|(p, gp)| p - gp * LR).collect();
        out.push(v[0].clone());
        Ok(out)
    };
    let modes = a.strs("modes", &["eager", "compiled"]);
    let mut res = serde_json::Map::new();
    for mode in &modes {
        let run: Box<Step> = match mode.as_str() {
            "compiled" => Box::new(ct::compile(step.clone())),
            _ => Box::new(step.clone()),
        };
        let state = std::cell::RefCell::new((params.clone(), Array::scalar(0.0f32)));
        let step_once = || {
            let mut st = state.borrow_mut();
            let mut args = st.0.clone();
            args.push(x.clone());
            args.push(y.clone());
            let mut out = run(&args).expect("training step");
            ct::eval(&out).expect("eval");
            let loss = out.pop().expect("the loss");
            *st = (out, loss);
        };
        let (first, ()) = cb::timed_once(step_once);
        // `time_fn` waits for the device after each call
        let one = || (0..per_sync).for_each(|_| step_once());
        let t = cb::time_fn(one, warmup, reps, min_time);
        // where a step's time goes: building its graph (the call), queueing its work (`eval`,
        // which on a GPU returns once every kernel is launched), waiting for the device
        let before = cuda_waits();
        let split = host_split(&state, &*run, &x, &y, 50)?;
        let after = cuda_waits();
        let per_step = |i: usize| (after[i] - before[i]) as f64 / 50.0;
        let loss_final = state.borrow().1.item::<f32>()?;
        let s = t.median_s / per_sync as f64;
        res.insert(
            mode.clone(),
            json!({
                "s_per_step": s, "steps_per_s": 1.0 / s, "examples_per_s": batch as f64 / s,
                "gflops": flops / s / 1e9, "min_s_per_step": t.min_s / per_sync as f64, "inner": t.inner,
                "first_step_s": first, "loss_initial": loss0, "loss_final": loss_final,
                "build_us": split[0], "eval_us": split[1], "wait_us": split[2],
                "index_check_waits_per_step": per_step(0), "host_fallbacks_per_step": per_step(1),
                "graph_launches_per_step": per_step(2),
            }),
        );
    }
    let res = serde_json::Value::Object(res);
    cb::emit(&cb::record(
        "mlp",
        json!({"dims": dims, "batch": batch, "lr": LR, "reps": reps, "warmup": warmup,
               "min_time": min_time, "flops_per_step": flops, "steps_per_sync": per_sync}),
        res,
    ));
    Ok(())
}
