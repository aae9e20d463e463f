//! The chunked gated delta rule on a GPU: its value and gradients (through the custom function
//! that recomputes each chunk) agree with the CPU's, to 1e-5 relative. The inputs are built on
//! the CPU and copied; the library code creates its constants on its inputs' device, so this
//! holds whatever the default device is. Without a GPU the test says so and checks nothing.
use cotangent::{self as ct, Array, Device};
use cotangent_nn::gated_delta::{gated_delta_chunked, gated_delta_recurrent};

fn inputs(b: usize, h: usize, t: usize, d: usize) -> Vec<Array> {
    let mut s = 0x2545F4914F6CDD1Du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut mk = |shape: &[usize], f: &mut dyn FnMut(f64) -> f64| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| f(next()) as f32).collect();
        Array::from_vec(v, shape).to_device(Device::Cpu)
    };
    let q = mk(&[b, h, t, d], &mut |u| u - 0.5);
    let k = mk(&[b, h, t, d], &mut |u| u - 0.5);
    // unit-norm keys, as the layer feeds them
    let k = &k / k.square().sum(&[-1], true).sqrt();
    let v = mk(&[b, h, t, d], &mut |u| 2.0 * u - 1.0);
    let log_g = mk(&[b, h, t], &mut |u| -0.02 - 0.1 * u);
    let beta = mk(&[b, h, t], &mut |u| 0.2 + 0.6 * u);
    vec![q, k, v, log_g, beta]
}

/// loss = Σ y ⊙ w for a fixed w; returns [loss, grads...] as f64 vectors.
fn value_and_grads(xs: &[Array], w: &Array, chunked: bool) -> Vec<Vec<f64>> {
    let w = w.clone();
    let f = move |a: &[Array]| {
        let y = if chunked {
            gated_delta_chunked(&a[0], &a[1], &a[2], &a[3], &a[4], 16)?
        } else {
            gated_delta_recurrent(&a[0], &a[1], &a[2], &a[3], &a[4])
        };
        Ok::<_, ct::Error>((y * w.to_device(a[0].device())).sum_all())
    };
    let (v, g) = ct::value_and_grad_argnums(f, &[0, 1, 2, 3, 4])(xs).unwrap();
    assert!(g.iter().all(|g| g.device() == xs[0].device()), "gradients stay on the inputs' device");
    std::iter::once(&v[0]).chain(&g).map(|a| a.to_f64_vec().unwrap()).collect()
}

fn max_rel_diff(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let scale = y.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
            x.iter().zip(y).fold(0.0f64, |m, (p, q)| m.max((p - q).abs() / scale))
        })
        .fold(0.0, f64::max)
}

#[test]
fn chunked_gated_delta_gradients_on_cuda_match_the_cpu() {
    if !Device::cuda_available() {
        eprintln!("no CUDA device: nothing to compare");
        return;
    }
    let (b, h, t, d) = (1, 2, 70, 16); // 4 full chunks of 16 and a short one
    let xs = inputs(b, h, t, d);
    let w = inputs(b, h, t, d).remove(2);
    let cpu = value_and_grads(&xs, &w, true);
    // the step-by-step recurrence on the CPU: the chunked form computes the same function
    let recurrent = value_and_grads(&xs, &w, false);
    assert!(max_rel_diff(&cpu, &recurrent) < 1e-4, "chunked vs recurrent on the CPU");
    let on_gpu: Vec<Array> = xs.iter().map(|x| x.to_device(Device::Cuda(0))).collect();
    let gpu = value_and_grads(&on_gpu, &w, true);
    let diff = max_rel_diff(&gpu, &cpu);
    eprintln!("chunked gated delta, cuda:0 vs cpu: max relative difference {diff:e}");
    assert!(diff < 1e-5, "CUDA gradients differ from the CPU's by {diff:e}");
}
