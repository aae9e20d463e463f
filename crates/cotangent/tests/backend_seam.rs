//! The device seam: every computation that transforms and custom functions ask for reaches a
//! backend as an op descriptor for a device (recorded through the `test-hooks` feature), and the
//! values computed through it match independent f64 references.

use cotangent::backend::recording::record;
use cotangent::{self as ct, Array, Device};

fn on_default_device(log: &[(Device, String)]) {
    assert!(log.iter().all(|(d, _)| *d == ct::default_device()), "{log:?}");
}

fn kinds(log: &[(Device, String)]) -> Vec<&str> {
    let mut k: Vec<&str> = log.iter().map(|(_, s)| s.as_str()).collect();
    k.sort_unstable();
    k.dedup();
    k
}

/// The gradient function, x, w, and the reference gradients (dx then dw).
type Case<G> = (G, Vec<f64>, Vec<f64>, Vec<f64>);

/// softplus(x) = log(1 + e^x) with a hand-written VJP; loss = sum(softplus(x · w)).
fn loss_and_reference() -> Case<impl Fn(&[Array]) -> ct::Result<Vec<Array>> + Clone> {
    let softplus = ct::custom_function(|x: &[Array]| (x[0].exp() + 1.0).log())
        .vjp(|_p, c, o| vec![&c[0] * (1.0 - (-&o[0]).exp())])
        .name("softplus")
        .build();
    let loss = move |p: &[Array]| Ok::<_, ct::Error>(softplus(&[p[0].matmul(&p[1])])?[0].sum_all());
    let x = vec![0.5, -1.0, 2.0, 0.25, 1.5, -0.75];
    let w = vec![0.1, -0.2, 0.3, 0.4, -0.5, 0.6];
    // reference: z = x(2x3) · w(3x2); d loss / dz = sigmoid(z); dx = s · wᵀ; dw = xᵀ · s
    let mut s = [0.0f64; 4];
    for i in 0..2 {
        for j in 0..2 {
            let z: f64 = (0..3).map(|k| x[i * 3 + k] * w[k * 2 + j]).sum();
            s[i * 2 + j] = 1.0 / (1.0 + (-z).exp());
        }
    }
    let dx: Vec<f64> = (0..6).map(|e| (0..2).map(|j| s[(e / 3) * 2 + j] * w[(e % 3) * 2 + j]).sum()).collect();
    let dw: Vec<f64> = (0..6).map(|e| (0..2).map(|i| x[i * 3 + e / 2] * s[i * 2 + e % 2]).sum()).collect();
    (ct::grad_argnums(loss, &[0, 1]), x, w, [dx, dw].concat())
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "got {got:?}, want {want:?}");
    }
}

#[test]
fn grad_of_a_custom_function_runs_through_the_backend() {
    let (g, x, w, want) = loss_and_reference();
    let (got, log) = record(|| {
        let x = Array::from_vec(x.iter().map(|&v| v as f32).collect(), &[2, 3]);
        let w = Array::from_vec(w.iter().map(|&v| v as f32).collect(), &[3, 2]);
        let d = g(&[x, w]).unwrap();
        [d[0].to_f64_vec().unwrap(), d[1].to_f64_vec().unwrap()].concat()
    });
    close(&got, &want);
    on_default_device(&log);
    let k = kinds(&log);
    // (the sum's value is never needed for its gradient: its VJP broadcasts the cotangent)
    for needed in ["Matmul", "Unary", "Binary", "Broadcast"] {
        assert!(k.contains(&needed), "{needed} never reached the backend: {k:?}");
    }
}

#[test]
fn vmap_and_checkpoint_run_through_the_backend() {
    let (g, x, w, want) = loss_and_reference();
    let g = ct::checkpoint(g);
    // the same gradient for a batch of 3 identical examples, each row the reference
    let per_example = ct::vmap(g, &[Some(0), None], &[Some(0), Some(0)]);
    let (got, log) = record(|| {
        let x = Array::from_vec(x.iter().map(|&v| v as f32).collect(), &[1, 2, 3]);
        let xs = ct::concatenate(&[x.clone(), x.clone(), x], 0);
        let w = Array::from_vec(w.iter().map(|&v| v as f32).collect(), &[3, 2]);
        let d = per_example(&[xs, w]).unwrap();
        (d[0].to_f64_vec().unwrap(), d[1].to_f64_vec().unwrap())
    });
    for b in 0..3 {
        close(&got.0[b * 6..b * 6 + 6], &want[..6]);
        close(&got.1[b * 6..b * 6 + 6], &want[6..]);
    }
    on_default_device(&log);
    assert!(kinds(&log).contains(&"Matmul"), "{log:?}");
}

#[test]
fn nothing_reaches_a_backend_before_evaluation() {
    let (g, x, w, _) = loss_and_reference();
    let (_, log) = record(|| {
        let x = Array::from_vec(x.iter().map(|&v| v as f32).collect(), &[2, 3]);
        let w = Array::from_vec(w.iter().map(|&v| v as f32).collect(), &[3, 2]);
        // grad builds the graph of the VJP; only evaluation asks a backend for work
        let d = ct::vjp(|p: &[Array]| p[0].matmul(&p[1]).exp(), &[x, w], &[ct::ones(&[2, 2], ct::DType::F32)]).unwrap();
        drop(d);
        drop(g);
    });
    assert!(log.is_empty(), "built graphs must stay lazy: {log:?}");
}
