//! Buffer donation: an element-wise op writes its result into the buffer of an input that
//! nothing else references, instead of allocating a new one.
//!
//! Checked here: values equal the reference (f64 loops) and the non-donating path bit for bit;
//! donation really happens (the output lives at the input's address, and the donation counter
//! moves); arrays held by the user, also from another thread, are never written; views
//! (transposed, broadcast, sliced) and shared inputs are not donated.
use cotangent::{self as ct, Array, DType};
use half::f16;
use std::sync::{Arc, Barrier};

fn linspace_vec(n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n).map(|i| lo + (hi - lo) * i as f64 / (n.max(2) - 1) as f64).collect()
}

/// Held while a test evaluates, so the process-wide donation counter sees one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Buffer donation is a CPU-backend behaviour (a GPU's caching allocator recycles blocks
/// instead): these tests check it where arrays are made on the CPU, and say so otherwise.
fn on_cpu() -> bool {
    let cpu = ct::default_device() == ct::Device::Cpu;
    if !cpu {
        eprintln!("buffer donation is a CPU behaviour; arrays are on {}", ct::default_device());
    }
    cpu
}

/// Donations counted (on all threads) while `f` runs.
fn donations<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = ct::__buffer_donations();
    let r = f();
    (r, ct::__buffer_donations() - before)
}

/// `tanh(exp(sin(x) * 1.01 + 0.1) - 1) / 2`: 7 element-wise ops, each can reuse its input.
fn float_chain(x: Array) -> Array {
    ((((x.sin() * 1.01) + 0.1).exp() - 1.0).tanh()) / 2.0
}
fn float_chain_ref(v: f64) -> f64 {
    ((v.sin() * 1.01 + 0.1).exp() - 1.0).tanh() / 2.0
}
const FLOAT_CHAIN_OPS: usize = 7;

/// Runs `float_chain` on `vals` of `dtype` with the input handed over (donating) and with a
/// clone of it kept (not donating); checks both against the f64 reference, against each other
/// bit for bit, and that every op donated and the result sits in the input's buffer.
fn check_float_chain(dtype: DType, n: usize, tol: f64) {
    let vals = linspace_vec(n, -3.0, 3.0);
    let make = || Array::from_slice(&vals, &[n]).astype(dtype);

    // donating: nothing but the chain references the input
    let x = make();
    x.eval().unwrap();
    let addr = x.__buffer_addr().unwrap();
    let y = float_chain(x);
    let (_, donated) = donations(|| y.eval().unwrap());
    assert_eq!(donated, FLOAT_CHAIN_OPS, "{dtype}: every op of the chain should reuse its input");
    assert_eq!(y.__buffer_addr().unwrap(), addr, "{dtype}: the result should live in the input's buffer");
    let got = y.to_f64_vec().unwrap();

    // not donating the input: a clone is kept (intermediates still donate)
    let x = make();
    let keep = x.clone();
    let y2 = float_chain(x);
    let (_, donated) = donations(|| y2.eval().unwrap());
    assert_eq!(donated, FLOAT_CHAIN_OPS - 1, "{dtype}: the held input must not be donated");
    assert_ne!(y2.__buffer_addr().unwrap(), keep.__buffer_addr().unwrap());
    assert_eq!(keep.to_f64_vec().unwrap(), make().to_f64_vec().unwrap(), "{dtype}: held input changed");

    // nothing donating at all: every intermediate is held
    let x = make();
    let a = x.sin();
    let b = &a * 1.01;
    let c = &b + 0.1;
    let d = c.exp();
    let e = &d - 1.0;
    let f = e.tanh();
    let y3 = &f / 2.0;
    let (_, donated) = donations(|| {
        ct::eval(&[a.clone(), b.clone(), c.clone(), d.clone(), e.clone(), f.clone(), y3.clone()]).unwrap()
    });
    assert_eq!(donated, 0, "{dtype}: held intermediates must not be donated");

    let bits = |a: &Array| a.astype(DType::F64).to_vec::<f64>().unwrap();
    assert_eq!(bits(&y), bits(&y2), "{dtype}: donating and non-donating results differ");
    assert_eq!(bits(&y), bits(&y3), "{dtype}: donating and non-donating results differ");
    let xin = make().to_f64_vec().unwrap();
    for (i, (&g, &xv)) in got.iter().zip(&xin).enumerate() {
        let r = float_chain_ref(xv);
        assert!((g - r).abs() <= tol * (1.0 + r.abs()), "{dtype}[{i}]: {g} vs {r}");
    }
}

#[test]
fn float_unary_binary_chain_f32_f64_f16() {
    if !on_cpu() {
        return;
    }
    let _serial = serial();
    check_float_chain(DType::F32, 1000, 1e-5);
    check_float_chain(DType::F64, 1000, 1e-12);
    check_float_chain(DType::F16, 1000, 3e-3);
    check_float_chain(DType::BF16, 100, 2e-2);
    // large enough for the parallel kernels
    check_float_chain(DType::F32, 200_000, 1e-5);
    // zero-size
    let y = float_chain(Array::from_vec(Vec::<f32>::new(), &[0, 3]));
    assert_eq!(y.shape(), &[0, 3]);
    assert!(y.to_vec::<f32>().unwrap().is_empty());
}

#[test]
fn int_chain_i32() {
    if !on_cpu() {
        return;
    }
    let _serial = serial();
    let n = 257;
    let vals: Vec<i32> = (0..n as i32).map(|i| i * 7919 - 1_000_000).collect();
    let chain = |x: Array| ((-(x * 3)).abs() + 5).square().clip(-1 << 30, 1 << 30) - 7;
    let reference = |v: i32| -> i32 {
        let a = (v.wrapping_mul(3)).wrapping_neg().wrapping_abs().wrapping_add(5);
        let s = a.wrapping_mul(a);
        s.clamp(-1 << 30, 1 << 30) - 7
    };
    let x = Array::from_slice(&vals, &[n]);
    x.eval().unwrap();
    let addr = x.__buffer_addr().unwrap();
    let y = chain(x);
    let (_, donated) = donations(|| y.eval().unwrap());
    assert_eq!(y.dtype(), DType::I32);
    assert_eq!(donated, 8, "mul, neg, abs, add, square, maximum, minimum, subtract");
    assert_eq!(y.__buffer_addr().unwrap(), addr);
    let want: Vec<i32> = vals.iter().map(|&v| reference(v)).collect();
    assert_eq!(y.to_vec::<i32>().unwrap(), want);

    let keep = Array::from_slice(&vals, &[n]);
    let y2 = chain(keep.clone());
    assert_eq!(y2.to_vec::<i32>().unwrap(), want);
    assert_eq!(keep.to_vec::<i32>().unwrap(), vals);
}

#[test]
fn binary_donates_either_side_with_broadcasting() {
    if !on_cpu() {
        return;
    }
    let _serial = serial();
    let a = linspace_vec(12, -1.0, 2.0);
    let b = linspace_vec(4, 0.5, 1.5);
    let xa = || Array::from_slice(&a, &[3, 4]).astype(DType::F32);
    let xb = || Array::from_slice(&b, &[4]).astype(DType::F32);
    let ref_ab = |f: fn(f64, f64) -> f64| -> Vec<f64> { (0..12).map(|i| f(a[i], b[i % 4])).collect() };
    let close = |got: Vec<f64>, want: Vec<f64>| {
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
        }
    };

    // full-size first operand, broadcast second: the first gives its buffer
    let x = xa();
    x.eval().unwrap();
    let addr = x.__buffer_addr().unwrap();
    let y = x - xb();
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!((d, y.__buffer_addr().unwrap()), (1, addr));
    close(y.to_f64_vec().unwrap(), ref_ab(|p, q| p - q));

    // broadcast first operand, full-size second: the second gives its buffer, order kept
    let x = xa();
    x.eval().unwrap();
    let addr = x.__buffer_addr().unwrap();
    let y = xb() / x;
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!((d, y.__buffer_addr().unwrap()), (1, addr));
    close(y.to_f64_vec().unwrap(), ref_ab(|p, q| q / p));

    // a scalar on the left: `2 - sin(x)` reuses sin's buffer as the second operand
    let y: Array = 2.0 - xa().sin();
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!(d, 2);
    close(y.to_f64_vec().unwrap(), a.iter().map(|v| 2.0 - v.sin()).collect());

    // same element count, different rank: [4] op [1, 4] -> [1, 4]
    let x = xb();
    x.eval().unwrap();
    let addr = x.__buffer_addr().unwrap();
    let y = x.power(Array::from_slice(&[1.0f32, 2.0, 3.0, 0.5], &[1, 4]));
    drop(x);
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!((d, y.__buffer_addr().unwrap()), (1, addr));
    assert_eq!(y.shape(), &[1, 4]);
    close(y.to_f64_vec().unwrap(), vec![b[0], b[1] * b[1], b[2].powi(3), b[3].sqrt()]);

    // comparisons change the dtype: nothing to donate, values still right
    let y = xa().greater(xb());
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!(d, 0);
    assert_eq!(y.to_vec::<bool>().unwrap(), (0..12).map(|i| a[i] > b[i % 4]).collect::<Vec<_>>());

    // f16 with a donated second operand
    let x = Array::from_slice(&a, &[3, 4]).astype(DType::F16);
    x.eval().unwrap();
    let addr = x.__buffer_addr().unwrap();
    let y = Array::from_slice(&b, &[4]).astype(DType::F16) * x;
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!((d, y.__buffer_addr().unwrap()), (1, addr));
    let want: Vec<f64> = (0..12)
        .map(|i| f16::from_f64(f16::from_f64(a[i]).to_f64() * f16::from_f64(b[i % 4]).to_f64()).to_f64())
        .collect();
    assert_eq!(y.to_f64_vec().unwrap(), want);
}

#[test]
fn select_and_clip_donate() {
    if !on_cpu() {
        return;
    }
    let _serial = serial();
    let v = linspace_vec(64, -2.0, 2.0);
    let want: Vec<f64> = v.iter().map(|&x| if x > 0.0 { x * 2.0 } else { x.sin() }).collect();
    for dtype in [DType::F32, DType::F64] {
        let x = Array::from_slice(&v, &[8, 8]).astype(dtype);
        // x has three consumers: the comparison and the multiply read it while it is shared,
        // the last one (sin) gets its buffer; select reuses the multiply's output
        let y = ct::select(&x.greater(0.0), &x * 2.0, x.sin());
        drop(x);
        let (_, d) = donations(|| y.eval().unwrap());
        assert_eq!(d, 2, "{dtype}: sin and select");
        for (g, w) in y.to_f64_vec().unwrap().iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "{dtype}: {g} vs {w}");
        }
    }
    // a broadcast scalar `a`: the full-size `b` is donated
    let x = Array::from_slice(&v, &[64]).astype(DType::F32);
    let c = x.greater(0.5);
    x.eval().unwrap();
    let addr = x.__buffer_addr().unwrap();
    let y = ct::select(&c, 9.0f32, x);
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!((d, y.__buffer_addr().unwrap()), (1, addr));
    let want: Vec<f32> = v.iter().map(|&t| if t > 0.5 { 9.0 } else { t as f32 }).collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
    // i32 clip
    let xi = Array::from_vec((-10..10).collect::<Vec<i32>>(), &[20]);
    let y = xi.clip(-3, 4);
    drop(xi);
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!(d, 2);
    assert_eq!(y.to_vec::<i32>().unwrap(), (-10..10).map(|v: i32| v.clamp(-3, 4)).collect::<Vec<_>>());
}

#[test]
fn views_and_shared_inputs_are_not_donated() {
    if !on_cpu() {
        return;
    }
    let _serial = serial();
    let v: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
    let fresh = || {
        let x = Array::from_slice(&v, &[3, 4]);
        x.eval().unwrap();
        x
    };
    let sin_all = |idx: &[usize]| -> Vec<f32> { idx.iter().map(|&i| v[i].sin()).collect() };

    // transposed view: only the transpose node holds the buffer, but it is strided
    let x = fresh();
    let addr = x.__buffer_addr().unwrap();
    let t = x.t();
    drop(x);
    t.eval().unwrap();
    assert_eq!(t.__buffer_addr().unwrap(), addr, "transpose is a view");
    let y = t.sin();
    drop(t);
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!(d, 0);
    assert_ne!(y.__buffer_addr().unwrap(), addr);
    assert_eq!(y.to_vec::<f32>().unwrap(), sin_all(&[0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]));

    // broadcast view
    let x = Array::from_slice(&v[..4], &[4]);
    let y = x.broadcast_to(&[3, 4]).sin();
    drop(x);
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!(d, 0);
    assert_eq!(y.to_vec::<f32>().unwrap(), sin_all(&[0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]));

    // slices: a prefix (offset 0, shorter than the buffer) and a later row (offset > 0)
    for (start, idx) in [(0isize, [0usize, 1, 2, 3]), (2, [8, 9, 10, 11])] {
        let x = fresh();
        let addr = x.__buffer_addr().unwrap();
        let y = x.slice(&[start, 0], &[start + 1, 4], &[1, 1]).sin();
        drop(x);
        let (_, d) = donations(|| y.eval().unwrap());
        assert_eq!(d, 0);
        assert_ne!(y.__buffer_addr().unwrap(), addr);
        assert_eq!(y.to_vec::<f32>().unwrap(), sin_all(&idx));
    }

    // a dense reshape of a buffer nothing else holds is fine to reuse
    let x = fresh();
    let addr = x.__buffer_addr().unwrap();
    let y = x.reshape(&[12]).sin();
    drop(x);
    let (_, d) = donations(|| y.eval().unwrap());
    assert_eq!((d, y.__buffer_addr().unwrap()), (1, addr));
    assert_eq!(y.to_vec::<f32>().unwrap(), sin_all(&(0..12).collect::<Vec<_>>()));

    // the same intermediate used twice (also as both operands of one op)
    let s = fresh().sin();
    let y = &s * &s;
    let z = &s + 1.0;
    drop(s);
    let (_, d) = donations(|| ct::eval(&[y.clone(), z.clone()]).unwrap());
    // the leaf goes into sin, and s into its last consumer (the add, which runs after the
    // multiply let go of it); the multiply, which reads s twice, allocates
    assert_eq!(d, 2);
    let sv = sin_all(&(0..12).collect::<Vec<_>>());
    assert_eq!(y.to_vec::<f32>().unwrap(), sv.iter().map(|s| s * s).collect::<Vec<_>>());
    assert_eq!(z.to_vec::<f32>().unwrap(), sv.iter().map(|s| s + 1.0).collect::<Vec<_>>());

    // a view node alive next to the buffer's owner
    let x = fresh().sin();
    let r = x.reshape(&[12]);
    let y = x.cos();
    drop(x);
    let (_, d) = donations(|| ct::eval(&[r.clone(), y.clone()]).unwrap());
    assert_eq!(d, 1, "the leaf into sin; sin's buffer is shared with the reshape view");
    assert_eq!(r.to_vec::<f32>().unwrap(), sv);
    assert_eq!(y.to_vec::<f32>().unwrap(), sv.iter().map(|s| s.cos()).collect::<Vec<_>>());
}

#[test]
fn user_held_inputs_are_never_written() {
    if !on_cpu() {
        return;
    }
    let _serial = serial();
    let v: Vec<f32> = (0..100_000).map(|i| (i as f32 * 1e-3).sin()).collect();
    // a clone on this thread
    let x = Array::from_slice(&v, &[v.len()]);
    let keep = x.clone();
    let y = float_chain(x);
    y.eval().unwrap();
    assert_eq!(keep.to_vec::<f32>().unwrap(), v);
    assert_ne!(y.__buffer_addr().unwrap(), keep.__buffer_addr().unwrap());

    // a clone held by another thread, which reads it while and after this thread evaluates
    for _ in 0..20 {
        let x = Array::from_slice(&v, &[v.len()]);
        x.eval().unwrap();
        let other = x.clone();
        let start = Arc::new(Barrier::new(2));
        let done = Arc::new(Barrier::new(2));
        let (s2, d2, v2) = (start.clone(), done.clone(), v.clone());
        let h = std::thread::spawn(move || {
            s2.wait();
            let during = other.to_vec::<f32>().unwrap();
            d2.wait();
            let after = other.to_vec::<f32>().unwrap();
            assert_eq!(during, v2);
            assert_eq!(after, v2);
        });
        let y = float_chain(x);
        start.wait();
        y.eval().unwrap();
        done.wait();
        h.join().unwrap();
        let want: Vec<f32> = v.iter().map(|&t| float_chain_ref(t as f64) as f32).collect();
        for (g, w) in y.to_vec::<f32>().unwrap().iter().zip(&want) {
            assert!((g - w).abs() < 1e-5);
        }
    }
}

#[test]
fn threads_evaluating_the_same_graph_agree() {
    let _serial = serial();
    // Several threads evaluate the same donating chain at once: whichever computes a node, the
    // others hold references to it through their tapes, so nothing is overwritten under them.
    let v: Vec<f32> = (0..70_000).map(|i| i as f32 * 1e-4 - 3.0).collect();
    let want: Vec<f32> = {
        let y = float_chain(Array::from_slice(&v, &[v.len()]));
        y.to_vec::<f32>().unwrap()
    };
    for _ in 0..20 {
        let y = float_chain(float_chain(Array::from_slice(&v, &[v.len()])));
        let mid = float_chain(Array::from_slice(&v, &[v.len()]));
        let go = Arc::new(Barrier::new(4));
        let hs: Vec<_> = (0..4)
            .map(|k| {
                let (y, mid, go) = (y.clone(), mid.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    if k % 2 == 0 {
                        mid.to_vec::<f32>().unwrap();
                    }
                    (y.to_vec::<f32>().unwrap(), mid.to_vec::<f32>().unwrap())
                })
            })
            .collect();
        let outs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let want2 = float_chain(Array::from_slice(&want, &[want.len()])).to_vec::<f32>().unwrap();
        for (yy, mm) in outs {
            assert_eq!(mm, want);
            assert_eq!(yy, want2);
        }
    }
}

#[test]
fn gradients_unaffected() {
    let _serial = serial();
    // grad traces the forward (no donation while tracing), then evaluates the backward graph,
    // whose fresh intermediates donate: d/dx sum(sin(x)^2 * 3) = 6 sin(x) cos(x)
    let v = linspace_vec(50, -2.0, 2.0);
    let x = Array::from_slice(&v, &[50]);
    let g = ct::grad(|xs: &[Array]| (xs[0].sin().square() * 3.0).sum_all());
    let gx = g(std::slice::from_ref(&x)).unwrap();
    let got = gx[0].to_vec::<f64>().unwrap();
    for (i, &t) in v.iter().enumerate() {
        assert!((got[i] - 6.0 * t.sin() * t.cos()).abs() < 1e-12);
    }
    assert_eq!(x.to_vec::<f64>().unwrap(), v);
}

/// A number operand (`2.0` in `x * 2.0`) becomes a 0-d constant that later calls of the same
/// thread may reuse; a 0-d op on it must never write into it. Each step's result is checked
/// against f64, and the constants keep their values after many 0-d ops that could donate.
#[test]
fn reused_number_constants_are_never_overwritten() {
    let _g = serial();
    let mut acc = 1.0f64;
    let mut x = Array::scalar(1.0f32);
    for step in 0..50 {
        x = (x * 2.0 + 0.5) / 3.0;
        x.eval().unwrap();
        acc = (acc * 2.0 + 0.5) / 3.0;
        assert!((x.item::<f32>().unwrap() as f64 - acc).abs() <= 1e-6, "step {step}");
    }
    // The constants 2.0, 0.5 and 3.0 are still what they were.
    let y = (Array::scalar(0.0f32) * 2.0 + 0.5) / 3.0;
    assert_eq!(y.item::<f32>().unwrap(), 0.5f32 / 3.0);
    let z = Array::scalar(1.0f32) + 2.0;
    assert_eq!(z.item::<f32>().unwrap(), 3.0);
}

/// A compiled function's fused groups donate like the separate kernels: an output of a group
/// cut into many tiles takes the buffer of a full-shape intermediate nobody else holds (here a
/// product's result), also when later steps still read that intermediate after an earlier
/// export (every tile reads its inputs before writing), while the caller's arrays are never
/// written. Values are bit-identical to the uncompiled function's, and to an f64 reference.
#[test]
fn compiled_groups_donate_intermediates() {
    if !on_cpu() {
        return;
    }
    let _serial = serial();
    let (rows, k, cols) = (300usize, 8usize, 400usize);
    let a: Vec<f32> = (0..rows * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
    let b: Vec<f32> = (0..k * cols).map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0).collect();
    let p: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 1e-4).cos()).collect();
    let body = |x: &[Array]| {
        let g = x[0].matmul(&x[1]);
        let first = &x[2] - &g * 0.01;
        let second = &first * 2.0 + &g; // reads g after the first export
        vec![first, second]
    };
    let args =
        [Array::from_slice(&a, &[rows, k]), Array::from_slice(&b, &[k, cols]), Array::from_slice(&p, &[rows, cols])];
    ct::eval(&args).unwrap();
    let f = ct::compile(body);
    f(&args).unwrap(); // the trace
    let (out, donated) = donations(|| {
        let out = f(&args).unwrap();
        ct::eval(&out).unwrap();
        out
    });
    let shown = format!("{:?}", out[0]);
    assert!(shown.contains("fused["), "not one fused group: {shown}");
    assert!(donated >= 1, "the fused group took no buffer");
    let eager = body(&args);
    for (c, e) in out.iter().zip(&eager) {
        assert_eq!(c.to_vec::<f32>().unwrap(), e.to_vec::<f32>().unwrap());
    }
    assert_eq!(args[2].to_vec::<f32>().unwrap(), p, "the caller's array was written");
    let (first, second) = (out[0].to_vec::<f32>().unwrap(), out[1].to_vec::<f32>().unwrap());
    for i in 0..rows {
        for j in 0..cols {
            let g: f64 = (0..k).map(|t| a[i * k + t] as f64 * b[t * cols + j] as f64).sum();
            let want = p[i * cols + j] as f64 - g * 0.01;
            assert!((first[i * cols + j] as f64 - want).abs() < 1e-5, "first at {i},{j}");
            assert!((second[i * cols + j] as f64 - (2.0 * want + g)).abs() < 1e-4, "second at {i},{j}");
        }
    }
}
