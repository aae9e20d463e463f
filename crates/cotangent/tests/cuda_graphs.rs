//! Compiled calls captured and replayed as CUDA graphs: values, launches and the device memory a
//! graph holds. These tests read process-wide counters (graph launches, device bytes in use), so
//! they run in a binary of their own, one at a time, and the GPU suite (`scripts/gpu-suite`) runs
//! this binary alone. Compiled only with `--features cuda`; every test returns early without a
//! GPU.
#![cfg(feature = "cuda")]
use cotangent::backend::cuda;
use cotangent::{self as ct, Array, DType};
use std::sync::{Mutex, MutexGuard};

/// The tests take turns: each reads counters the others move.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A two-layer MLP's training step (cross-entropy through `take_along_axis`, plain SGD):
/// `[w1, b1, w2, b2, x, y]` to the new parameters and the loss.
fn mlp_training_step(args: &[Array]) -> ct::Result<Vec<Array>> {
    let loss = |a: &[Array]| {
        let h = (a[4].matmul(&a[0]) + &a[1]).maximum(0.0);
        let logits = h.matmul(&a[2]) + &a[3];
        let picked = logits.take_along_axis(&a[5].expand_dims(&[-1]), -1).squeeze(&[-1]);
        (logits.logsumexp(&[-1], false) - picked).mean_all()
    };
    let (value, grads) = ct::value_and_grad_argnums(loss, &[0, 1, 2, 3])(args)?;
    let mut out: Vec<Array> = args[..4].iter().zip(&grads).map(|(p, g)| p - g * 0.1).collect();
    out.push(value[0].clone());
    Ok(out)
}

/// Parameters of [`mlp_training_step`] on the GPU (32 → 64 → 10).
fn mlp_parameters(seed: u64) -> Vec<Array> {
    let ks = ct::random::split_keys(&ct::random::key(seed), 4);
    [vec![32, 64], vec![64], vec![64, 10], vec![10]]
        .iter()
        .zip(&ks)
        .map(|(shape, k)| (ct::random::normal(k, shape, DType::F32) * 0.2).to_device(ct::Device::Cuda(0)))
        .collect()
}

/// A batch of 16 rows for [`mlp_training_step`]: inputs, and labels uploaded from the host
/// (`label_shift` moves them, 10 and more being out of range).
fn mlp_batch(seed: u64, label_shift: i32) -> Vec<Array> {
    let x = ct::random::normal(&ct::random::key(1000 + seed), &[16, 32], DType::F32).to_device(ct::Device::Cuda(0));
    let labels: Vec<i32> = (0..16).map(|i| ((i * 7 + seed as i32) % 10) + label_shift).collect();
    vec![x, Array::from_slice(&labels, &[16]).to_device(ct::Device::Cuda(0))]
}

fn host_values(arrays: &[Array]) -> Vec<Vec<f32>> {
    arrays.iter().map(|a| a.to_vec::<f32>().expect("values")).collect()
}

/// Whether `cuda:0` can be used and compiled calls are captured as CUDA graphs there (says why
/// not otherwise).
fn graphs_available() -> bool {
    if !cuda::cuda_available() {
        println!("no CUDA device");
        return false;
    }
    if !cuda::graphs_enabled() {
        println!("COTANGENT_CUDA_GRAPHS=0");
        return false;
    }
    true
}

/// Bytes of live arrays on `cuda:0` once its queued work is done.
fn device_bytes_in_use() -> usize {
    ct::Device::Cuda(0).synchronize().expect("synchronize");
    ct::Device::Cuda(0).memory_stats().expect("memory stats").in_use
}

/// A captured graph owns the device memory of one call's intermediates while the compiled
/// function lives (the device's bytes in use grow by at least that), and dropping the function
/// gives it back.
#[test]
fn a_dropped_compiled_function_gives_its_graph_memory_back() {
    let _turn = one_at_a_time();
    if !graphs_available() {
        return;
    }
    let gpu = ct::Device::Cuda(0);
    let in_use = device_bytes_in_use;
    let n = 1usize << 20;
    let x = Array::from_vec((0..n).map(|i| (i % 97) as f32 * 0.01).collect::<Vec<f32>>(), &[n]).to_device(gpu);
    x.eval().expect("upload");
    let before = in_use();
    // the element-wise group's output (4 MiB) is an intermediate: a scan reads it
    let f = ct::compile(|a: &[Array]| (a[0].sin() * 2.0).cumsum(0).sum_all());
    let launches = || cuda::GRAPH_LAUNCHES.load(std::sync::atomic::Ordering::Relaxed);
    let want = (0..n)
        .map(|i| ((i % 97) as f64 * 0.01).sin() * 2.0)
        .scan(0.0, |s, v| {
            *s += v;
            Some(*s)
        })
        .sum::<f64>();
    let first = launches();
    for call in 0..3 {
        let got = f(std::slice::from_ref(&x)).expect("compiled call")[0].item::<f32>().expect("value") as f64;
        assert!((got - want).abs() <= 1e-3 * want.abs(), "call {call}: {got} against {want}");
    }
    assert_eq!(launches(), first + 2, "the second call captures a graph and launches it, the third launches it");
    let held = in_use();
    assert!(held >= before + n * 4, "the graph's intermediates are device memory in use: {before} -> {held} bytes");
    drop(f);
    let after = in_use();
    assert!(
        after <= before + (1 << 16),
        "dropping the compiled function frees its graph: {before} -> {held} -> {after} bytes"
    );
}

/// On a GPU a compiled call replays its steps the first time, captures them as a CUDA graph the
/// second time, and launches the graph from then on. The graph computes what the step-by-step
/// replay computes, bit for bit on the same arguments, and what the uncompiled step computes
/// (within f32 rounding) on new ones; the graph's private copies of the arguments never leak
/// into later results; a view argument is copied dense and launches the graph too; calls from
/// two threads at once get their own results; labels the graph
/// cannot trust (computed on the device, or out of range) make the call replay step by step,
/// with the index check and its error.
#[test]
fn compiled_calls_run_as_cuda_graphs() {
    let _turn = one_at_a_time();
    if !graphs_available() {
        return;
    }
    let launches = || cuda::GRAPH_LAUNCHES.load(std::sync::atomic::Ordering::Relaxed);
    let step = ct::compile(mlp_training_step);
    let args: Vec<Array> = mlp_parameters(1).into_iter().chain(mlp_batch(0, 0)).collect();
    let replayed = host_values(&step(&args).expect("first call"));
    let before = launches();
    let captured = host_values(&step(&args).expect("second call"));
    assert_eq!(launches(), before + 1, "the second call runs as a graph");
    assert_eq!(captured, replayed, "the graph computes the replay's values bit for bit");
    // an argument that is a view (the batch as the transpose of its transposed copy) is copied
    // dense and launches the same graph, with the same values
    let x = args[4].to_vec::<f32>().expect("batch");
    let (rows, cols) = (args[4].shape()[0], args[4].shape()[1]);
    let transposed: Vec<f32> = (0..rows * cols).map(|k| x[(k % rows) * cols + k / rows]).collect();
    let mut viewed = args.clone();
    viewed[4] = Array::from_slice(&transposed, &[cols, rows]).to_device(ct::Device::Cuda(0)).t();
    let before = launches();
    let from_view = host_values(&step(&viewed).expect("view argument"));
    assert_eq!(launches(), before + 1, "a view argument runs as a graph");
    assert_eq!(from_view, captured, "a view argument");

    // a training run: every call launches the graph and follows the uncompiled step
    let (mut params, mut eager_params) = (mlp_parameters(2), mlp_parameters(2));
    let before = launches();
    for call in 0..6u64 {
        let batch = mlp_batch(call, 0);
        let got = step(&params.iter().chain(&batch).cloned().collect::<Vec<_>>()).expect("compiled step");
        let want = mlp_training_step(&eager_params.iter().chain(&batch).cloned().collect::<Vec<_>>()).unwrap();
        for (i, (g, w)) in host_values(&got).iter().zip(&host_values(&want)).enumerate() {
            let scale = w.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
            let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(worst <= 1e-4 * scale, "call {call}, output {i}: off by {worst} (scale {scale})");
        }
        params = got[..4].to_vec();
        eager_params = want[..4].to_vec();
    }
    assert_eq!(launches(), before + 6, "each call of the training run is one graph launch");
    // the graph's buffers are made once: thirty more steps hold no more device memory than one
    let held = device_bytes_in_use();
    for call in 6..36u64 {
        let batch = mlp_batch(call, 0);
        params = step(&params.iter().chain(&batch).cloned().collect::<Vec<_>>()).expect("compiled step")[..4].to_vec();
        ct::eval(&params).expect("eval");
    }
    let after = device_bytes_in_use();
    assert!(after <= held + (1 << 20), "device memory grew over 30 graph calls: {held} -> {after} bytes");
    assert_eq!(launches(), before + 36, "every step of the longer run is one graph launch");

    // two threads at once, each on its own batch: each gets its own step's values
    type Values = Vec<Vec<f32>>;
    let results: Vec<(Values, Values)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2u64)
            .map(|t| {
                let step = step.clone();
                s.spawn(move || {
                    let args: Vec<Array> = mlp_parameters(3 + t).into_iter().chain(mlp_batch(10 + t, 0)).collect();
                    let mut last = Vec::new();
                    for _ in 0..5 {
                        last = host_values(&step(&args).expect("compiled step on a thread"));
                    }
                    (last, host_values(&mlp_training_step(&args).unwrap()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for (t, (got, want)) in results.iter().enumerate() {
        for (g, w) in got.iter().zip(want) {
            let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(worst <= 1e-4, "thread {t}: off by {worst}");
        }
    }

    // labels computed on the device carry no known range: the call replays step by step
    let mut device_labels: Vec<Array> = mlp_parameters(4).into_iter().chain(mlp_batch(20, 0)).collect();
    device_labels[5] = &device_labels[5] * 1i32;
    let before = launches();
    let got = host_values(&step(&device_labels).expect("device labels"));
    assert_eq!(launches(), before, "labels of unknown range do not run as a graph");
    let want = host_values(&mlp_training_step(&device_labels).unwrap());
    for (g, w) in got.iter().zip(&want) {
        let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst <= 1e-4, "device labels: off by {worst}");
    }

    // a label out of range: no graph, and the replay's check reports it
    let bad: Vec<Array> = mlp_parameters(5).into_iter().chain(mlp_batch(30, 3)).collect();
    let before = launches();
    let err = step(&bad).and_then(|out| out[4].item::<f32>().map(|_| ())).expect_err("label 10 of 10 classes");
    assert_eq!(launches(), before);
    assert!(err.to_string().contains("out of range"), "{err}");
}
