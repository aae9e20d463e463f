//! Concurrency (issue 21, item 3).
//!
//! - `concurrent_mixed_calls_match_one_thread`: 16 threads make the same mixed calls (grad,
//!   vjp, jvp, vmap of a grad through a custom function, checkpoint, a custom VJP that recomputes
//!   on `depends`, a module's `value_and_grad` and optimizer step, and evaluations of shared
//!   arrays that are not yet evaluated, replaced and dropped while other threads evaluate them);
//!   every result is bit-identical to the same call made by one thread, and a watchdog fails the
//!   test if the threads do not finish (a deadlock). CI runs 1,000 calls per thread; the full
//!   16 × 10,000 is `concurrent_mixed_calls_match_one_thread_full` (ignored; see the README's
//!   development section).
//! - `mqar_losses_are_bit_identical_across_thread_counts`: the main job's model and training
//!   step (`examples/mqar/model.rs`, included here) give bit-identical losses with
//!   `RAYON_NUM_THREADS=1`, `COTANGENT_NUM_THREADS` of 1 and 3, and the defaults, each in a
//!   child process (both pools are sized once per process). On the CUDA backend, whose
//!   scatter-add accumulates with atomics in a varying order, they agree to 1e-5 instead.
use cotangent::{self as ct, Array, DType, Result};
use cotangent_nn::optim::{AdamW, Optimizer};
use cotangent_nn::{self as nn, Activation, Mlp, Module};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../examples/mqar/model.rs"]
mod model;

// ----- the mixed calls -------------------------------------------------------------------------

/// Deterministic values in [-1, 1).
fn input(seed: u64, shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x2545_F491_4F6C_DD1D;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    Array::from_vec(v, shape)
}

/// FNV-1a over the shapes and f32 bits of `arrays`.
fn fingerprint(arrays: &[Array]) -> Result<u64> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |x: u64| h = (h ^ x).wrapping_mul(0x0000_0100_0000_01b3);
    for a in arrays {
        a.shape().iter().for_each(|&d| mix(d as u64));
        a.astype(DType::F32).to_vec::<f32>()?.iter().for_each(|v| mix(v.to_bits() as u64));
    }
    Ok(h)
}

type Transformed = Box<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync>;
type ModelGrad = Box<dyn Fn(&Mlp, &[Array]) -> Result<nn::module::ValueAndGrad> + Send + Sync>;

/// Transformed functions built once and called from every thread, a model, and slots of shared
/// lazy arrays.
struct Work {
    sin_grad: Transformed,
    softplus_grads: Transformed,
    checkpointed_grad: Transformed,
    recompute_grad: Transformed,
    mlp: Mlp,
    mlp_grad: ModelGrad,
    slots: Vec<Mutex<Array>>,
}

const SLOTS: usize = 8;

/// The value of slot `j`, as a graph not yet evaluated.
fn slot_value(j: usize) -> Array {
    let (a, b) = (input(1000 + j as u64, &[32, 32]), input(2000 + j as u64, &[32, 32]));
    (a.matmul(&b).tanh() + b.exp()).sum(&[0], false) * 0.25
}

impl Work {
    fn new() -> Self {
        let softplus = ct::custom_function(|x: &[Array]| (x[0].exp() + 1.0).log())
            .vjp(|_p, c, o| vec![&c[0] * (1.0 - (-&o[0]).exp())])
            .jvp(|p, t| vec![&t[0] * p[0].sigmoid()])
            .name("softplus")
            .build();
        let per_row = move |x: &[Array]| softplus(x).map(|y| y[0].sum_all());
        let layer = ct::checkpoint(|p: &[Array]| p[0].matmul(&p[1]).tanh().matmul(&p[1].t()));
        // a custom VJP that recomputes its forward after the outputs, ordered by `depends`
        let recompute = ct::custom_function(|p: &[Array]| (&p[0] * &p[1]).tanh())
            .vjp(|p, c, o| {
                let r = ct::depends(p, o);
                let y = (&r[0] * &r[1]).tanh();
                let d = &c[0] * (1.0 - y.square());
                vec![&d * &r[1], &d * &r[0]]
            })
            .build();
        Work {
            sin_grad: Box::new(ct::grad(|x: &[Array]| (x[0].sin() * x[0].square()).sum_all())),
            softplus_grads: Box::new(ct::vmap(ct::grad(per_row), &[Some(0)], &[Some(0)])),
            checkpointed_grad: Box::new(ct::grad(move |p: &[Array]| layer(p).map(|y| y[0].square().sum_all()))),
            recompute_grad: Box::new(ct::grad(move |p: &[Array]| recompute(p).map(|y| y[0].sum_all()))),
            mlp: Mlp::new(&ct::random::key(7), 8, 16, Activation::Gelu, DType::F32),
            mlp_grad: Box::new(nn::value_and_grad(|m: &Mlp, b: &[Array]| {
                nn::losses::mse(&m.forward(&b[0]), &b[1], nn::losses::Reduction::Mean)
            })),
            slots: (0..SLOTS).map(|j| Mutex::new(slot_value(j))).collect(),
        }
    }

    /// Call `i`: one of eight kinds of work on inputs seeded by `i`; the fingerprint of its
    /// results.
    fn call(&self, i: usize) -> Result<u64> {
        let s = i as u64;
        match i % 8 {
            0 => fingerprint(&(self.sin_grad)(&[input(s, &[16, 16])])?),
            1 => {
                let f = |p: &[Array]| p[0].matmul(&p[1]).tanh();
                let (out, vjps) =
                    ct::vjp(f, &[input(s, &[24, 16]), input(s + 1, &[16, 8])], &[input(s + 2, &[24, 8])])?;
                fingerprint(&[out, vjps].concat())
            }
            2 => {
                let f = |p: &[Array]| (p[0].exp() * &p[1]).sum(&[-1], false);
                let primals = [input(s, &[12, 20]), input(s + 1, &[12, 20])];
                let tangents = [input(s + 2, &[12, 20]), input(s + 3, &[12, 20])];
                let (out, t) = ct::jvp(f, &primals, &tangents)?;
                fingerprint(&[out, t].concat())
            }
            3 => fingerprint(&(self.softplus_grads)(&[input(s, &[8, 4])])?),
            4 => fingerprint(&(self.checkpointed_grad)(&[input(s, &[16, 16]), input(s + 1, &[16, 16])])?),
            5 => fingerprint(&(self.recompute_grad)(&[input(s, &[64]), input(s + 1, &[64])])?),
            6 => {
                // a shared array, perhaps not evaluated yet; every third call puts a fresh
                // (unevaluated) copy in the slot, dropping the slot's handle to the one that
                // other threads may be evaluating
                let j = i % SLOTS;
                let x = {
                    let mut slot = self.slots[j].lock().unwrap();
                    let x = slot.clone();
                    if i.is_multiple_of(3) {
                        *slot = slot_value(j);
                    }
                    x
                };
                let unused = x.matmul(&x.reshape(&[32, 1])).exp(); // built, then dropped unevaluated
                if i % 2 == 1 {
                    x.eval()?;
                }
                drop(unused);
                let y = (&x * &x).sum_all() + x.max(&[0], false);
                fingerprint(&[y, x])
            }
            _ => {
                let batch = [input(s, &[4, 8]), input(s + 1, &[4, 8])];
                let (loss, grads) = (self.mlp_grad)(&self.mlp, &batch)?;
                let mut model = self.mlp.clone();
                let mut opt = AdamW::new(1e-2, 0.01);
                opt.update(&mut model, &grads)?;
                fingerprint(&[loss, grads.leaves(), model.parameters().leaves()].concat())
            }
        }
    }
}

/// Runs `f` on its own thread and returns its result, or panics if it has not finished after
/// `limit` (a deadlock, or a machine far slower than expected).
fn with_watchdog<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("no result after {limit:?}: the threads are deadlocked (or the machine is far too slow)"),
    }
}

/// `threads` threads each make calls `0..calls` (each thread from a different starting point),
/// against one thread making them in order; every fingerprint must agree.
fn stress(threads: usize, calls: usize, limit: Duration) {
    let start = Instant::now();
    let work = Arc::new(Work::new());
    let reference: Vec<u64> = {
        let work = work.clone();
        with_watchdog(limit, move || (0..calls).map(|i| work.call(i).unwrap()).collect())
    };
    let single = start.elapsed();
    let results: Vec<Vec<u64>> = with_watchdog(limit, move || {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let work = work.clone();
                std::thread::spawn(move || {
                    let mut out = vec![0u64; calls];
                    for k in 0..calls {
                        let i = (k + t * calls / threads) % calls;
                        out[i] = work.call(i).unwrap();
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, got) in results.iter().enumerate() {
        if let Some(i) = (0..calls).find(|&i| got[i] != reference[i]) {
            panic!("thread {t}, call {i} (kind {}): {:016x} but one thread gave {:016x}", i % 8, got[i], reference[i]);
        }
    }
    eprintln!(
        "{threads} threads × {calls} calls agree with one thread: {:.1} s for one thread, {:.1} s for all",
        single.as_secs_f64(),
        (start.elapsed() - single).as_secs_f64()
    );
}

#[test]
fn concurrent_mixed_calls_match_one_thread() {
    stress(16, 1000, Duration::from_secs(300));
}

/// The full run: `cargo test --release -p cotangent-nn --test threads -- --ignored`.
#[test]
#[ignore = "16 × 10,000 calls (5 s in release, 8 s in a debug build): run with --ignored"]
fn concurrent_mixed_calls_match_one_thread_full() {
    stress(16, 10_000, Duration::from_secs(3600));
}

// ----- the main job's losses under different thread counts --------------------------------------

const CHILD: &str = "COTANGENT_NN_THREADS_CHILD";
const STEPS: usize = 20;

/// Prints the first [`STEPS`] losses of the main job's training (default configuration) when
/// run as a child of `mqar_losses_are_bit_identical_across_thread_counts`.
#[test]
fn print_mqar_losses_in_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let mut training = model::Training::new(&model::Config::default());
    for step in 1..=STEPS {
        let loss = training.step().unwrap().loss;
        println!("LOSS {step} {:08x}", loss.to_bits());
    }
}

#[test]
fn mqar_losses_are_bit_identical_across_thread_counts() {
    let exe = std::env::current_exe().unwrap();
    let run = |env: &[(&str, &str)]| -> Vec<String> {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["--exact", "print_mqar_losses_in_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env_remove("RAYON_NUM_THREADS")
            .env_remove("COTANGENT_NUM_THREADS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run the test binary as a child");
        assert!(out.status.success(), "child with {env:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.find("LOSS ").map(|i| l[i..].to_string()))
            .collect();
        assert_eq!(lines.len(), STEPS, "child with {env:?} printed {lines:?}");
        lines
    };
    let loss = |line: &str| f32::from_bits(u32::from_str_radix(line.split(' ').nth(2).unwrap(), 16).unwrap());
    let default = run(&[]);
    for env in [
        &[("RAYON_NUM_THREADS", "1")][..],
        &[("COTANGENT_NUM_THREADS", "1")],
        &[("COTANGENT_NUM_THREADS", "3")],
        &[("RAYON_NUM_THREADS", "1"), ("COTANGENT_NUM_THREADS", "1")],
    ] {
        let got = run(env);
        if ct::default_device() == ct::Device::Cpu {
            assert_eq!(got, default, "{env:?} against the defaults");
        } else {
            // The CUDA backend's scatter-add (the VJP of gathers and embeddings) accumulates with
            // atomics, whose order varies from run to run, so losses may differ in the last bits
            // between any two runs (as PyTorch's `index_add_` does); host thread counts must not
            // change them beyond that.
            for (g, d) in got.iter().zip(&default) {
                let (g, d) = (loss(g), loss(d));
                assert!((g - d).abs() <= 1e-5 * d.abs(), "{env:?}: loss {g} against {d} with the defaults");
            }
        }
    }
    // the losses fall: the run trains (a test of the comparison, not of the optimizer)
    let first = loss(&default[0]);
    let last = loss(&default[STEPS - 1]);
    assert!(first.is_finite() && last < first, "losses {first} → {last}");
}
