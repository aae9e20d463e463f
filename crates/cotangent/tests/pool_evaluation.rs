//! Evaluation on the rayon pool must never deadlock.
//!
//! A large graph is evaluated on the pool's first worker while the other workers spin, ready to
//! run kernel pieces (`graph::run_on_first_worker`). A worker can pick up its spinning job while
//! it is itself in the middle of a kernel piece it stole from the evaluating worker; the
//! evaluating worker then waits for that piece, which sits below the spinning job on the other
//! worker's stack. This happened after a few seconds of repeated products whose transposed right
//! operands are copied in parallel (a timing-dependent race: the test catches it with high
//! probability, not certainty). The test runs such products from a helper thread for eight
//! seconds and fails if they have not finished well after that.
//!
//! It is the only test in this binary, so no other test's evaluation is in progress at the same
//! time (a concurrent evaluation keeps a large graph on the calling thread).
use cotangent::{self as ct, Array};
use std::time::Duration;

/// Products of a 64×256 matrix with a transposed 256×256 one (the transposed operand is copied
/// in parallel bands, and the product splits over the pool), evaluated one by one for `seconds`.
/// Before the fix this deadlocked after 2 to 9 seconds of such calls on two cores.
fn products_with_transposed_operands(seconds: f64) -> ct::Result<(usize, f64)> {
    let (m, k, n) = (64, 256, 256);
    let a = Array::from_vec((0..m * k).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect::<Vec<f32>>(), &[m, k]);
    let w = Array::from_vec((0..n * k).map(|i| ((i % 13) as f32 - 6.0) / 6.0).collect::<Vec<f32>>(), &[n, k]);
    ct::eval(&[a.clone(), w.clone()])?;
    let start = std::time::Instant::now();
    let mut calls = 0;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..100 {
            a.matmul(&w.t()).eval()?;
        }
        calls += 100;
    }
    // one element checked against an f64 dot product
    let c = a.matmul(&w.t()).to_vec::<f32>()?;
    let (av, wv) = (a.to_vec::<f32>()?, w.to_vec::<f32>()?);
    let want: f64 = (0..k).map(|p| av[p] as f64 * wv[p] as f64).sum();
    Ok((calls, (c[0] as f64 - want).abs()))
}

#[test]
fn repeated_parallel_evaluations_finish() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(products_with_transposed_operands(8.0));
    });
    // Eight seconds of calls; a deadlock never finishes.
    match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(result) => {
            let (calls, error) = result.expect("products evaluate");
            assert!(calls >= 100, "{calls} calls");
            assert!(error < 1e-3, "product element off by {error}");
        }
        Err(_) => panic!("evaluations on the rayon pool did not finish within 90 s: deadlock"),
    }
}
