//! Core behaviour: Send + Sync, lazy evaluation, long chains, concurrent evaluation, errors.
use cotangent::{self as ct, Array, DType};

const fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
const _: () = assert_send_sync::<Array>();

#[test]
fn laziness_and_multiple_eval() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]);
    let y = x.exp();
    assert!(!y.is_evaluated());
    let z = &y + 1.0;
    ct::eval(&[y.clone(), z.clone()]).unwrap();
    assert!(y.is_evaluated() && z.is_evaluated());
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![1f32.exp() + 1.0, 2f32.exp() + 1.0]);
}

#[test]
fn item_and_to_vec_check_dtype() {
    let s = Array::scalar(2.5f32);
    assert_eq!(s.item::<f32>().unwrap(), 2.5);
    assert!(matches!(s.item::<f64>(), Err(ct::Error::DTypeMismatch { .. })));
    assert!(Array::from_slice(&[1i32, 2], &[2]).item::<i32>().is_err());
}

#[test]
fn scalar_promotion_is_weak() {
    let x = Array::from_slice(&[1.0f32], &[1]);
    assert_eq!((&x * 2.0f64).dtype(), DType::F32);
    assert_eq!((&x + 1i64).dtype(), DType::F32);
    let i = Array::from_slice(&[1i32], &[1]);
    assert_eq!((&i * 2.0).dtype(), DType::F32);
    assert_eq!((&i * 2).dtype(), DType::I32);
    assert_eq!((&i + &x).dtype(), DType::F32);
    assert_eq!((&i + &x.astype(DType::F64)).dtype(), DType::F64);
    let b = Array::from_slice(&[true], &[1]);
    assert_eq!((&b + 1).dtype(), DType::I32);
    assert_eq!(i.divide(&i).dtype(), DType::F32);
}

#[test]
fn million_op_chain_evaluates_and_drops() {
    let x = Array::from_slice(&[0.5f32; 8], &[8]);
    let mut y = x.clone();
    for _ in 0..1_000_000 {
        y = y.negative();
    }
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.5; 8]);
    // an unevaluated million-node graph also drops without overflowing the stack
    let mut z = x.clone();
    for _ in 0..1_000_000 {
        z = z.abs();
    }
    drop(z);
}

#[test]
fn eight_threads_evaluate_one_graph() {
    for round in 0..20 {
        let x = Array::from_vec((0..1000).map(|i| i as f64 * 1e-3).collect::<Vec<_>>(), &[10, 100]);
        let mut y = x.clone();
        for k in 0..200 {
            y = (&y * 0.999 + (k as f64) * 1e-4).sin();
        }
        let s = y.sum(&[1], false);
        let want: Vec<f64> = {
            let mut v: Vec<f64> = (0..1000).map(|i| i as f64 * 1e-3).collect();
            for k in 0..200 {
                for e in v.iter_mut() {
                    *e = (*e * 0.999 + (k as f64) * 1e-4).sin();
                }
            }
            v.chunks(100).map(|r| r.iter().sum()).collect()
        };
        let results: Vec<Vec<f64>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8).map(|_| sc.spawn(|| s.to_vec::<f64>().unwrap())).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &results {
            assert_eq!(r, &results[0], "round {round}");
            for (a, b) in r.iter().zip(&want) {
                assert!((a - b).abs() < 1e-9);
            }
        }
    }
}

#[test]
fn views_share_buffers_and_strided_kernels_agree() {
    let x = Array::from_vec((0..24).map(|i| i as f32).collect::<Vec<_>>(), &[2, 3, 4]);
    let t = x.transpose(&[2, 0, 1]); // strided view
    let e = t.exp();
    let want: Vec<f32> = {
        let mut v = vec![];
        for k in 0..4 {
            for i in 0..2 {
                for j in 0..3 {
                    v.push(((i * 12 + j * 4 + k) as f32).exp());
                }
            }
        }
        v
    };
    // the CPU's exp is correctly rounded here; a GPU's `expf` is within 2 ulp
    let ulps = if ct::default_device() == ct::Device::Cpu { 0 } else { 2 };
    for (g, w) in e.to_vec::<f32>().unwrap().iter().zip(&want) {
        assert!(g.to_bits().abs_diff(w.to_bits()) <= ulps, "{g} vs {w}");
    }
    let b = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3, 1]).broadcast_to(&[2, 3, 4]);
    let s = (&x + &b).sum(&[0, 2], false);
    // reference: sum over i, k of x[i, j, k] + b[j]
    let want: Vec<f32> = (0..3)
        .map(|j| {
            let mut r = 0.0;
            for i in 0..2 {
                for k in 0..4 {
                    r += (i * 12 + j * 4 + k) as f32 + (j + 1) as f32;
                }
            }
            r
        })
        .collect();
    assert_eq!(s.to_vec::<f32>().unwrap(), want);
}

#[test]
#[should_panic(expected = "do not broadcast")]
fn misuse_panics_with_shapes() {
    let a = Array::from_slice(&[1.0f32, 2.0], &[2]);
    let b = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    let _ = &a + &b;
}

#[test]
fn zero_size_arrays() {
    let z = ct::zeros(&[0, 3], DType::F32);
    assert_eq!(z.exp().to_vec::<f32>().unwrap(), Vec::<f32>::new());
    assert_eq!(z.sum(&[0], false).to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(z.prod(&[0], false).to_vec::<f32>().unwrap(), vec![1.0; 3]);
    assert_eq!(z.sum_all().item::<f32>().unwrap(), 0.0);
    assert_eq!(z.reshape(&[3, 0]).shape(), &[3, 0]);
}

#[test]
fn threads_evaluating_shared_graphs_with_parallel_kernels_agree_and_finish() {
    // large enough that kernels split their work over rayon and an evaluation may move to a
    // rayon worker: several threads evaluating overlapping graphs must neither deadlock nor
    // disagree
    for round in 0..20 {
        let n = 256usize;
        let a = Array::from_vec((0..n * n).map(|i| ((i * 37 + round) % 101) as f32 / 101.0 - 0.5).collect(), &[n, n]);
        let shared = (a.matmul(&a).tanh() * 1.5 + &a).exp();
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let (a, shared) = (a.clone(), shared.clone());
                // each thread builds its own consumer of the shared graph
                std::thread::spawn(move || shared.matmul(&a).sin().sum_all().item::<f32>().unwrap())
            })
            .collect();
        let results: Vec<f32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(results.iter().all(|r| r.to_bits() == results[0].to_bits()), "round {round}: {results:?}");
        let alone = shared.matmul(&a).sin().sum_all().item::<f32>().unwrap();
        assert_eq!(alone.to_bits(), results[0].to_bits(), "round {round}: {alone} vs {}", results[0]);
    }
}

#[test]
fn integer_power_with_a_negative_exponent_is_an_error() {
    // numpy refuses integers to negative integer powers; cotangent fails the evaluation
    for (base, exp) in [(2i32, -1i32), (0, -1), (1, -1), (-1, -3)] {
        let p = ct::power(Array::from_slice(&[base], &[1]), Array::from_slice(&[exp], &[1]));
        let e = p.eval().unwrap_err();
        assert!(matches!(e, ct::Error::Eval(ref m) if m.contains("power") && m.contains("negative")), "{e}");
        // the failed array keeps reporting the failure
        assert_eq!(p.to_vec::<i32>().unwrap_err(), e);
    }
    // a negative anywhere in a broadcast exponent, also i64 and a scalar exponent
    let b = Array::from_slice(&[1i64, 2, 3], &[3, 1]);
    assert!(b.power(Array::from_slice(&[2i64, -2], &[1, 2])).eval().is_err());
    assert!(b.power(-1).eval().is_err());
    // non-negative integer exponents work and wrap; floats take negative exponents
    let ok = Array::from_slice(&[2i32, 3, -2], &[3]).power(Array::from_slice(&[10i32, 0, 3], &[3]));
    assert_eq!(ok.to_vec::<i32>().unwrap(), vec![1024, 1, -8]);
    assert_eq!(Array::from_slice(&[3i32], &[1]).power(40).to_vec::<i32>().unwrap(), vec![3i32.wrapping_pow(40)]);
    assert_eq!(Array::from_slice(&[2u8], &[1]).power(9u8).to_vec::<u8>().unwrap(), vec![0]);
    assert_eq!(Array::from_slice(&[2.0f32], &[1]).power(-1.0).item::<f32>().unwrap(), 0.5);
    // an empty result has no exponent to reject
    let empty = Array::from_slice::<i32>(&[], &[0]);
    assert!(empty.power(-1).eval().is_ok());
}
