//! The device seam as a user sees it: every array has a device, `to_device` is a lazy,
//! differentiable copy, mixing devices is an error naming both, and 0-d arrays made from Rust
//! scalars follow the other operand. Runs on every machine: the GPU is only named, not used,
//! unless one is present.
use cotangent::{self as ct, Array, DType, Device};

#[test]
fn arrays_are_on_the_default_device() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]);
    assert_eq!(x.device(), ct::default_device());
    assert_eq!((&x * 2.0).exp().device(), x.device());
    assert_eq!(ct::zeros_like(&x).device(), x.device());
}

#[test]
fn device_names_parse_and_print() {
    for (s, d) in [("cpu", Device::Cpu), ("cuda", Device::Cuda(0)), ("cuda:3", Device::Cuda(3))] {
        assert_eq!(Device::parse(s), Some(d));
    }
    assert_eq!(Device::parse("tpu"), None);
    assert_eq!(Device::Cuda(2).to_string(), "cuda:2");
}

#[test]
#[should_panic(expected = "inputs on different devices ([2] on cpu, [2] on cuda:0)")]
fn mixing_devices_is_an_error_naming_both() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]).to_device(Device::Cpu);
    let y = x.to_device(Device::Cuda(0));
    let _ = &x + &y; // built lazily: no GPU is needed to see the error
}

#[test]
fn a_scalar_follows_the_other_operand() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]).to_device(Device::Cuda(0));
    let s = Array::scalar(3.0f32).to_device(Device::Cpu);
    let y = &x * &s;
    assert_eq!(y.device(), Device::Cuda(0));
    if Device::cuda_available() {
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![3.0, 6.0]);
    } else {
        // without a GPU the copy fails at evaluation, as an error
        assert!(y.eval().is_err());
    }
}

#[test]
fn to_device_round_trips_values_and_gradients() {
    let target = if Device::cuda_available() { Device::Cuda(0) } else { Device::Cpu };
    let x = Array::from_slice(&[0.5f64, -1.0, 2.0], &[3]).to_device(Device::Cpu);
    let there = x.to_device(target);
    assert_eq!(there.device(), target);
    assert_eq!(there.to_device(Device::Cpu).to_vec::<f64>().unwrap(), vec![0.5, -1.0, 2.0]);
    // d/dx sum(sin(x on target)) = cos(x), back on the CPU
    let g = ct::grad(move |x: &[Array]| x[0].to_device(target).sin().sum_all())(&[x.clone()]).unwrap();
    assert_eq!(g[0].device(), Device::Cpu);
    for (g, v) in g[0].to_vec::<f64>().unwrap().iter().zip([0.5f64, -1.0, 2.0]) {
        assert!((g - v.cos()).abs() < 1e-12);
    }
    // forward mode moves the tangent along
    let (_, t) = ct::jvp(
        move |x: &[Array]| x[0].to_device(target).square(),
        &[x.clone()],
        &[ct::ones(&[3], DType::F64).to_device(Device::Cpu)],
    )
    .unwrap();
    assert_eq!(t[0].device(), target);
    assert_eq!(t[0].to_device(Device::Cpu).to_vec::<f64>().unwrap(), vec![1.0, -2.0, 4.0]);
}

#[test]
fn evaluating_on_a_missing_device_is_an_error() {
    // no machine has 100 GPUs; without the `cuda` feature or a driver, no machine has any
    let y = Array::from_slice(&[1.0f32], &[1]).to_device(Device::Cuda(99)).exp();
    let e = y.to_vec::<f32>().unwrap_err().to_string();
    assert!(e.contains("cuda:99"), "{e}");
}

/// Element-wise kernels index with 64 bits: arrays of more than 2^31 elements are computed
/// everywhere, across the 2^31 boundary, on the strided (broadcast operand) and the dense path.
/// Needs a CUDA device with ~8 GB free; skipped elsewhere (the CPU kernels index with usize).
#[test]
fn elementwise_over_more_than_2_pow_31_elements_on_cuda() {
    if !Device::cuda_available() {
        eprintln!("skipped: no CUDA device");
        return;
    }
    let cuda = Device::Cuda(0);
    let n = (1usize << 31) + 5;
    let ones = ct::full(&[n], 1.0, DType::U8).to_device(cuda); // a broadcast scalar: stride 0
    let two = &ones + 1; // strided path
    let six = &two * 3; // dense path
    let sum = six.astype(DType::F32).sum_all(); // reduces 2^31 + 5 elements
    let edge = six.slice_axis(0, Some((1 << 31) - 3), None, 1).to_device(Device::Cpu);
    assert_eq!(edge.to_vec::<u8>().unwrap(), vec![6u8; 8]);
    let head = six.slice_axis(0, None, Some(4), 1).to_device(Device::Cpu);
    assert_eq!(head.to_vec::<u8>().unwrap(), vec![6u8; 4]);
    let (got, want) = (sum.item::<f32>().unwrap() as f64, 6.0 * n as f64);
    assert!((got - want).abs() <= 1e-5 * want, "sum of {n} sixes: {got}, want {want}");
}
