//! Evaluating from the user's own rayon tasks (issue 13): many tasks of a 16-thread pool — rayon's
//! global pool, built here with 16 threads, or a user `ThreadPool` entered with `install` —
//! evaluate different functions of the same not-yet-evaluated arrays, whose kernels split their
//! work. Before cotangent had its own kernel pool, a worker waiting inside such a kernel stole a
//! user task that then blocked on the node that very kernel was computing, and everything hung.
//!
//! Each test runs under a watchdog that aborts the whole process with a message when it does not
//! finish in time (a deadlock never returns, so a plain timeout could not report it). Results are
//! checked against f64 references. `COTANGENT_USER_POOL_ROUNDS` changes the number of rounds.
use cotangent::{self as ct, Array};
use rayon::prelude::*;
use std::sync::mpsc;
use std::time::Duration;

const TASKS: usize = 16;
const N: usize = 512;
const ELEMENTS: usize = 1 << 18;

fn rounds() -> usize {
    std::env::var("COTANGENT_USER_POOL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20)
}

/// Builds rayon's global pool with 16 threads (once per test binary; every test here may be
/// first).
fn global_pool_of_16() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        rayon::ThreadPoolBuilder::new().num_threads(TASKS).build_global().expect("global pool");
    });
    assert_eq!(rayon::current_num_threads(), TASKS);
}

/// Runs `body` on a helper thread; aborts the process if it has not finished after `limit`.
fn with_watchdog(name: &str, limit: Duration, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => worker.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // the body panicked: report its panic
            if let Err(p) = worker.join() {
                std::panic::resume_unwind(p)
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            eprintln!("{name}: not finished after {limit:?}: evaluation from rayon tasks deadlocked; aborting");
            std::process::abort();
        }
    }
}

/// Deterministic values in [0, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

fn assert_rel(got: f64, want: f64, tol: f64, what: &str) {
    let err = (got - want).abs() / want.abs().max(1e-30);
    assert!(err < tol, "{what}: got {got}, want {want} (relative error {err:e})");
}

/// The sum of all elements, in f64 (f32 sums of 2^18 elements are only good to about 1e-3).
fn sum_f64(x: &Array) -> f64 {
    x.to_f64_vec().unwrap().iter().sum()
}

/// The operands of one round and the f64 references of their sums.
struct Round {
    a: Array,
    b: Array,
    x: Array,
    /// sum of all elements of a @ b
    product_sum: f64,
    /// sum of all elements of 2 x + 1
    affine_sum: f64,
}

fn round(r: usize) -> Round {
    let (av, bv, xv) =
        (values(N * N, 3 * r as u64 + 1), values(N * N, 3 * r as u64 + 2), values(ELEMENTS, 3 * r as u64 + 3));
    // sum_ij (A B)_ij = sum_k (column sum of A)_k (row sum of B)_k
    let product_sum: f64 = (0..N)
        .map(|k| {
            let col: f64 = (0..N).map(|i| av[i * N + k] as f64).sum();
            let row: f64 = bv[k * N..(k + 1) * N].iter().map(|&v| v as f64).sum();
            col * row
        })
        .sum();
    let affine_sum: f64 = xv.iter().map(|&v| 2.0 * v as f64 + 1.0).sum();
    Round {
        a: Array::from_vec(av, &[N, N]),
        b: Array::from_vec(bv, &[N, N]),
        x: Array::from_vec(xv, &[ELEMENTS]),
        product_sum,
        affine_sum,
    }
}

/// `rounds` rounds: a fresh lazy product and a fresh lazy element-wise node, shared by 16
/// parallel tasks that each evaluate a different function of both.
fn shared_lazy_nodes_from_tasks(rounds: usize) {
    for r in 0..rounds {
        let Round { a, b, x, product_sum, affine_sum } = round(r);
        let shared = a.matmul(&b); // 512 x 512, not evaluated
        let affine = &x * 2.0 + 1.0; // 2^18 elements, not evaluated
        let sums: Vec<(f32, f32)> = (0..TASKS)
            .into_par_iter()
            .map(|i| {
                let p = (&shared * i as f64).sum_all().item::<f32>().unwrap();
                let e = (&affine * i as f64).sum_all().item::<f32>().unwrap();
                (p, e)
            })
            .collect();
        for (i, (p, e)) in sums.into_iter().enumerate() {
            assert_rel(p as f64, i as f64 * product_sum, 1e-4, &format!("round {r}, task {i}: sum of i (a @ b)"));
            assert_rel(e as f64, i as f64 * affine_sum, 1e-4, &format!("round {r}, task {i}: sum of i (2x + 1)"));
        }
        // the shared nodes were computed once and read by all
        assert!(shared.is_evaluated() && affine.is_evaluated());
    }
}

/// The same with a custom function (custom VJP rule), `grad` and `checkpoint` inside each task:
/// the custom function's forward and the checkpoint's recomputation run lazily, inside kernels.
fn transforms_from_tasks(rounds: usize) {
    // f(x) = sum(tanh(x) * w), custom VJP, and a checkpointed variant
    let tanh_sum = ct::custom_function(|x: &[Array]| vec![x[0].tanh()])
        .vjp(|p, c, o| {
            let _ = p;
            vec![&c[0] * (1.0 - &o[0] * &o[0])]
        })
        .name("tanh_custom")
        .build();
    for r in 0..rounds {
        let Round { a, b, x, .. } = round(r);
        let shared = a.matmul(&b) * (1.0 / N as f64); // 512 x 512 lazy, entries in (0, 0.5)
        let xs = &x - 0.5; // lazy, 2^18 elements
        let (sv, xv) = {
            // references computed from the (separately evaluated) values
            let s2 = a.matmul(&b) * (1.0 / N as f64);
            (s2.to_f64_vec().unwrap(), (&x - 0.5).to_f64_vec().unwrap())
        };
        let results: Vec<(f64, f64, f64)> = (0..TASKS)
            .into_par_iter()
            .map(|i| {
                let scale = (i + 1) as f64 / 64.0;
                // grad of sum(custom_tanh(scale * shared)) w.r.t. the shared product
                let f = tanh_sum.clone();
                let g = ct::grad(move |v: &[Array]| Ok::<_, ct::Error>(f(&[&v[0] * scale])?[0].sum_all()))(&[
                    shared.clone()
                ])
                .unwrap()
                .remove(0);
                let g_sum = sum_f64(&g);
                // checkpointed grad of sum(sin(xs * scale)^2) w.r.t. xs
                let seg = ct::checkpoint(move |v: &[Array]| vec![(&v[0] * scale).sin()]);
                let h = ct::grad(move |v: &[Array]| {
                    let y = seg(v)?.remove(0);
                    Ok::<_, ct::Error>((&y * &y).sum_all())
                })(&[xs.clone()])
                .unwrap()
                .remove(0);
                let h_sum = sum_f64(&h);
                // a plain forward value through the custom function
                let v_sum = sum_f64(&tanh_sum(&[&xs * scale]).unwrap()[0]);
                (g_sum, h_sum, v_sum)
            })
            .collect();
        for (i, (g_sum, h_sum, v_sum)) in results.into_iter().enumerate() {
            let scale = (i + 1) as f64 / 64.0;
            let g_want: f64 = sv.iter().map(|&s| scale * (1.0 - (scale * s).tanh().powi(2))).sum();
            let h_want: f64 = xv.iter().map(|&v| scale * 2.0 * (scale * v).sin() * (scale * v).cos()).sum();
            let v_want: f64 = xv.iter().map(|&v| (scale * v).tanh()).sum();
            assert_rel(g_sum, g_want, 2e-3, &format!("round {r}, task {i}: grad through the custom function"));
            assert!(
                (h_sum - h_want).abs() < 1e-3 * (1.0 + h_want.abs()),
                "round {r}, task {i}: checkpointed grad {h_sum} vs {h_want}"
            );
            assert!(
                (v_sum - v_want).abs() < 1e-3 * (1.0 + v_want.abs()),
                "round {r}, task {i}: custom forward {v_sum} vs {v_want}"
            );
        }
    }
}

/// Steps of the deep function below: 3 nodes each, so its graph has more than the 256 nodes
/// above which custom functions (and so `checkpoint`) are rebuilt lazily, as a `Call` node
/// evaluated inside the evaluation of each task.
const DEEP_STEPS: usize = 90;

/// y <- tanh(0.9 y + 0.1), DEEP_STEPS times.
fn deep(x: &Array) -> Array {
    let mut y = x.clone();
    for _ in 0..DEEP_STEPS {
        y = (&y * 0.9 + 0.1).tanh();
    }
    y
}

/// `deep` and its derivative at `x`, in f64.
fn deep_f64(x: f64) -> (f64, f64) {
    let (mut y, mut d) = (x, 1.0);
    for _ in 0..DEEP_STEPS {
        y = (0.9 * y + 0.1).tanh();
        d *= 0.9 * (1.0 - y * y);
    }
    (y, d)
}

/// Tasks whose custom function and checkpointed segment are large enough to become lazily
/// evaluated `Call` nodes, whose bodies read a shared lazy 64 x 64 product (its kernel goes to
/// the kernel pool): the `Call` is computed by the task's thread, a worker of the user's pool,
/// and its body's evaluation waits for the product other tasks may be computing.
fn lazy_calls_from_tasks(rounds: usize) {
    const M: usize = 64;
    let deep_custom = ct::custom_function(|x: &[Array]| vec![deep(&x[0])]).name("deep_custom").build();
    for r in 0..rounds {
        let (av, bv) = (values(M * N, 5 * r as u64 + 1), values(N * M, 5 * r as u64 + 2));
        // reference product in f64, scaled into (0, 1)
        let sv: Vec<f64> = (0..M * M)
            .map(|ij| {
                let (i, j) = (ij / M, ij % M);
                (0..N).map(|k| av[i * N + k] as f64 * bv[k * M + j] as f64).sum::<f64>() / N as f64
            })
            .collect();
        let shared = Array::from_vec(av, &[M, N]).matmul(&Array::from_vec(bv, &[N, M])) * (1.0 / N as f64);
        let results: Vec<(f64, f64)> = (0..TASKS)
            .into_par_iter()
            .map(|i| {
                let scale = (i + 1) as f64 / TASKS as f64;
                let f = deep_custom.clone();
                let value = sum_f64(&f(&[&shared * scale]).unwrap()[0]);
                let seg = ct::checkpoint(|v: &[Array]| vec![deep(&v[0])]);
                let g = ct::grad(move |v: &[Array]| Ok::<_, ct::Error>(seg(&[&v[0] * scale])?[0].sum_all()))(&[
                    shared.clone()
                ])
                .unwrap()
                .remove(0);
                (value, sum_f64(&g))
            })
            .collect();
        for (i, (value, grad)) in results.into_iter().enumerate() {
            let scale = (i + 1) as f64 / TASKS as f64;
            let value_want: f64 = sv.iter().map(|&s| deep_f64(scale * s).0).sum();
            let grad_want: f64 = sv.iter().map(|&s| scale * deep_f64(scale * s).1).sum();
            assert_rel(value, value_want, 1e-3, &format!("round {r}, task {i}: lazily rebuilt custom forward"));
            assert!(
                (grad - grad_want).abs() < 1e-3 * (1.0 + grad_want.abs()),
                "round {r}, task {i}: checkpointed grad {grad} vs {grad_want}"
            );
        }
    }
}

#[test]
fn global_pool_tasks_share_lazy_nodes() {
    global_pool_of_16();
    with_watchdog("global_pool_tasks_share_lazy_nodes", Duration::from_secs(120), || {
        shared_lazy_nodes_from_tasks(rounds())
    });
}

#[test]
fn user_pool_tasks_share_lazy_nodes() {
    global_pool_of_16();
    with_watchdog("user_pool_tasks_share_lazy_nodes", Duration::from_secs(120), || {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(TASKS).build().unwrap();
        pool.install(|| shared_lazy_nodes_from_tasks(rounds()))
    });
}

#[test]
fn global_pool_tasks_run_transforms() {
    global_pool_of_16();
    with_watchdog("global_pool_tasks_run_transforms", Duration::from_secs(180), || {
        transforms_from_tasks((rounds() / 4).max(1))
    });
}

#[test]
fn user_pool_tasks_run_transforms() {
    global_pool_of_16();
    with_watchdog("user_pool_tasks_run_transforms", Duration::from_secs(180), || {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(TASKS).build().unwrap();
        pool.install(|| transforms_from_tasks((rounds() / 4).max(1)))
    });
}

#[test]
fn global_pool_tasks_evaluate_lazy_calls() {
    global_pool_of_16();
    with_watchdog("global_pool_tasks_evaluate_lazy_calls", Duration::from_secs(180), || {
        lazy_calls_from_tasks((rounds() / 4).max(1))
    });
}

#[test]
fn user_pool_tasks_evaluate_lazy_calls() {
    global_pool_of_16();
    with_watchdog("user_pool_tasks_evaluate_lazy_calls", Duration::from_secs(180), || {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(TASKS).build().unwrap();
        pool.install(|| lazy_calls_from_tasks((rounds() / 4).max(1)))
    });
}

/// A custom function whose forward is large enough to be rebuilt when evaluated (a `Call` node)
/// and panics then, the second time it runs: a stand-in for any failure inside a node's
/// computation.
fn fails_when_evaluated() -> impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync + Clone + 'static {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    ct::custom_function(move |x: &[Array]| {
        if runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1 {
            panic!("the forward gave up on purpose");
        }
        vec![deep(&x[0])]
    })
    .name("gives_up")
    .build()
}

/// A panic while a node is computed is that node's error, for every reader on every thread,
/// now and later — never a misleading secondary failure (the node had already given its inputs
/// away, so reading it again failed with "index out of bounds: the len is 0"), nor a hang of
/// the threads that were waiting for it.
#[test]
fn a_panic_in_a_node_is_its_error_for_every_reader() {
    global_pool_of_16();
    with_watchdog("a_panic_in_a_node_is_its_error_for_every_reader", Duration::from_secs(60), || {
        // small (computed inline) and large (its ops go to the kernel pool)
        for n in [16usize, 1 << 16] {
            let x = &Array::from_vec(values(n, 7), &[n]) + 1.0;
            let y = fails_when_evaluated()(&[x.clone()]).unwrap().remove(0);
            let z = (&y * 2.0).sum_all();
            let first = z.eval().unwrap_err();
            let text = first.to_string();
            assert!(text.contains("gives_up") && text.contains("the forward gave up on purpose"), "size {n}: {text}");
            // again, directly, and from many threads and rayon tasks at once: the same error
            assert_eq!(y.eval().unwrap_err(), first, "size {n}: reading the node again");
            assert_eq!(y.to_vec::<f32>().unwrap_err(), first, "size {n}: reading its data");
            assert_eq!(z.item::<f32>().unwrap_err(), first, "size {n}: its consumer");
            let from_threads: Vec<ct::Error> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..8).map(|_| s.spawn(|| (&y + 1.0).eval().unwrap_err())).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let from_tasks: Vec<ct::Error> =
                (0..TASKS).into_par_iter().map(|i| (&y * i as f64).sum_all().eval().unwrap_err()).collect();
            for e in from_threads.iter().chain(&from_tasks) {
                assert_eq!(e, &first, "size {n}: another thread's reader");
            }
            // the input is unharmed
            assert_eq!(x.to_vec::<f32>().unwrap().len(), n);
        }
        // many threads racing to evaluate a fresh failing node all get its error (those that
        // did not compute it waited for it)
        for _ in 0..20 {
            let n = 1 << 16;
            let x = &Array::from_vec(values(n, 9), &[n]) * 3.0;
            let y = fails_when_evaluated()(&[x]).unwrap().remove(0);
            let mut errors: Vec<ct::Error> =
                (0..TASKS).into_par_iter().map(|i| (&y * i as f64).sum_all().eval().unwrap_err()).collect();
            errors.extend(std::thread::scope(|s| {
                let hs: Vec<_> = (0..4).map(|_| s.spawn(|| y.eval().unwrap_err())).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
            }));
            assert!(
                errors.iter().all(|e| e == &errors[0] && e.to_string().contains("gave up on purpose")),
                "{errors:?}"
            );
        }
    });
}

/// Whatever a kernel does with `i32::MIN // -1` (an overflow), every reader of the node sees
/// the same outcome: its kernel runs on the kernel pool (2^16 elements) or inline (16), from a
/// plain thread and from the user's pool.
#[test]
fn a_kernel_failure_is_the_same_for_every_reader() {
    global_pool_of_16();
    with_watchdog("a_kernel_failure_is_the_same_for_every_reader", Duration::from_secs(60), || {
        for n in [16usize, 1 << 16] {
            let a = Array::from_vec(vec![i32::MIN; n], &[n]);
            let q = ct::floor_divide(&a, -1i32) + 0i32;
            let first = q.eval().map(|_| q.to_vec::<i32>().unwrap());
            if let Err(e) = &first {
                // a panic of the kernel, named and quoted, not a secondary failure
                assert!(e.to_string().contains("floor_divide"), "{e}");
            }
            let again: Vec<_> =
                (0..TASKS).into_par_iter().map(|_| q.eval().map(|_| q.to_vec::<i32>().unwrap())).collect();
            for r in again {
                assert_eq!(r, first, "size {n}");
            }
            // and a fresh node raced for by many tasks
            let q = ct::floor_divide(&a, -1i32) * 1i32;
            let raced: Vec<_> =
                (0..TASKS).into_par_iter().map(|_| q.eval().map(|_| q.to_vec::<i32>().unwrap().len())).collect();
            assert!(raced.iter().all(|r| r == &raced[0]), "size {n}: {raced:?}");
        }
    });
}
