//! CUDA kernels against the CPU backend on the same data, over layouts (contiguous, transposed,
//! sliced with a step, broadcast with stride 0, 0-size, 0-d, odd sizes). Compiled only with
//! `--features cuda`; every test returns early ("no CUDA device") without a GPU.
#![cfg(feature = "cuda")]
use cotangent::backend::cpu::buffer::{Buffer, BufferElement};
use cotangent::backend::cpu::Data;
use cotangent::backend::cuda::{self, CudaData, CudaDevice};
use cotangent::dtype::ALL_DTYPES;
use cotangent::primitives::binary::BinaryOp;
use cotangent::primitives::index::ScatterMode;
use cotangent::primitives::random::Dist;
use cotangent::primitives::reduce::{ArgReduceOp, ReduceOp, ScanOp};
use cotangent::{self as ct, Array, DType};
use std::sync::Arc;

fn dev() -> Option<Arc<CudaDevice>> {
    if !cuda::cuda_available() {
        println!("no CUDA device");
        return None;
    }
    Some(cuda::device(0).expect("device 0"))
}

/// Deterministic test values as f64 (a small LCG), in [-3, 3) with some specials for floats.
fn values(n: usize, seed: u64, dtype: DType) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            match dtype {
                DType::Bool => (u < 0.5) as u8 as f64,
                DType::U8 => (u * 256.0).floor(),
                DType::U32 => (u * 4e9).floor(),
                DType::I32 | DType::I64 => (u * 40.0).floor() - 20.0,
                _ => match i % 29 {
                    7 => f64::NAN,
                    13 => 0.0,
                    17 => -0.0,
                    _ => (u * 6.0 - 3.0) * if i % 31 == 5 { 1e3 } else { 1.0 },
                },
            }
        })
        .collect()
}

fn buffer(dtype: DType, v: &[f64]) -> Buffer {
    use cotangent::Element;
    cotangent::dispatch_dtype!(dtype, T => T::into_buffer(v.iter().map(|&x| T::from_f64(x)).collect()))
}

fn array(dtype: DType, v: &[f64], shape: &[usize]) -> Array {
    cotangent::dispatch_dtype!(dtype, T => Array::from_slice(buffer(dtype, v).as_slice::<T>(), shape))
}

/// A strided host view of logical values `v` (row-major over `[m, n]`) in one of the layouts.
fn host_view(dtype: DType, v: &[f64], m: usize, n: usize, layout: usize) -> Data {
    let mk = |buf: Vec<f64>, strides: &[isize], offset: usize| {
        Data::view(Arc::new(buffer(dtype, &buf)), &[m, n], strides, offset).expect("view inside its buffer")
    };
    match layout {
        0 => mk(v.to_vec(), &[n as isize, 1], 0),
        1 => {
            // transposed storage
            let mut t = vec![0.0; m * n];
            for i in 0..m {
                for j in 0..n {
                    t[j * m + i] = v[i * n + j];
                }
            }
            mk(t, &[1, m as isize], 0)
        }
        _ => {
            // every other column of a wider buffer, starting one element in
            let w = 2 * n + 1;
            let mut b = vec![99.0; m * w + 1];
            for i in 0..m {
                for j in 0..n {
                    b[1 + i * w + 2 * j] = v[i * n + j];
                }
            }
            mk(b, &[w as isize, 2], 1)
        }
    }
}

/// Upload the whole buffer of a host view and keep its strides (so the kernels see the view).
fn upload_view(dev: &Arc<CudaDevice>, d: &Data, shape: &[usize]) -> CudaData {
    let len = d.buf().len();
    let whole = Data::view(d.buf().clone(), &[len], &[1], 0).expect("whole buffer");
    let g = CudaData::from_host(dev, &whole, &[len]).expect("upload");
    g.checked_view(shape, d.strides(), d.offset()).expect("view inside its buffer")
}

fn as_f64(d: &Data, shape: &[usize]) -> Vec<f64> {
    use cotangent::Element;
    cotangent::dispatch_dtype!(d.buf().dtype(), T => d.to_contiguous::<T>(shape).iter().map(|x| x.to_f64()).collect())
}

fn array_f64(a: &Array) -> Vec<f64> {
    use cotangent::Element;
    cotangent::dispatch_dtype!(a.dtype(), T => a.to_vec::<T>().expect("cpu").iter().map(|x| x.to_f64()).collect())
}

fn tol(d: DType) -> f64 {
    match d {
        DType::F64 => 1e-12,
        DType::F32 => 3e-6,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

fn close(what: &str, got: &[f64], want: &[f64], rel: f64, scale: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: got {g}, want NaN");
            continue;
        }
        if w.is_infinite() || rel == 0.0 {
            assert!(g == w, "{what}[{i}]: got {g}, want {w}");
            continue;
        }
        let err = (g - w).abs();
        assert!(err <= rel * (w.abs() + scale), "{what}[{i}]: got {g}, want {w} (err {err:e})");
    }
}

#[test]
fn allocator_oom_is_an_error_and_empty_is_fine() {
    let Some(dev) = dev() else { return };
    let r = CudaData::empty(&dev, DType::U8, &[1usize << 50]);
    assert!(matches!(r, Err(cotangent::Error::OutOfMemory { .. })), "1 PiB allocation must fail as OutOfMemory");
    let e = CudaData::empty(&dev, DType::F32, &[0, 3]).expect("empty");
    assert_eq!(e.to_host(&[0, 3]).expect("host").buf().len(), 0);
    // buffers are reused through the cache
    let a = CudaData::empty(&dev, DType::F32, &[1000]).expect("a");
    let p = a.buf().ptr();
    drop(a);
    let b = CudaData::empty(&dev, DType::F32, &[900]).expect("b");
    assert_eq!(b.buf().ptr(), p, "same bucket reuses the block");
}

#[test]
fn roundtrip_and_copies_all_dtypes_and_layouts() {
    let Some(dev) = dev() else { return };
    for d in ALL_DTYPES {
        let (m, n) = (5, 7);
        let v = values(m * n, 1, d);
        for layout in 0..3 {
            let h = host_view(d, &v, m, n, layout);
            let g = upload_view(&dev, &h, &[m, n]);
            let back = g.to_host(&[m, n]).expect("to_host");
            close(&format!("roundtrip {d} layout {layout}"), &as_f64(&back, &[m, n]), &as_f64(&h, &[m, n]), 0.0, 0.0);
            let c = cuda::to_contiguous(&g, &[m, n]).expect("copy");
            assert!(c.is_contiguous(&[m, n]));
        }
        // broadcast row (stride 0)
        let row = values(n, 2, d);
        let h = Data::view(Arc::new(buffer(d, &row)), &[m, n], &[0, 1], 0).expect("broadcast row");
        let g = upload_view(&dev, &h, &[m, n]);
        let back = g.to_host(&[m, n]).expect("broadcast");
        close(&format!("broadcast {d}"), &as_f64(&back, &[m, n]), &as_f64(&h, &[m, n]), 0.0, 0.0);
        // 0-d
        let s = CudaData::from_host(&dev, &Data::contiguous(buffer(d, &v[..1]), &[]), &[]).expect("0-d");
        close(
            "0-d",
            &as_f64(&s.to_host(&[]).expect("0-d back"), &[]),
            &v[..1].iter().map(|&x| as_f64(&Data::contiguous(buffer(d, &[x]), &[]), &[])[0]).collect::<Vec<_>>(),
            0.0,
            0.0,
        );
    }
}

#[test]
fn unary_ops_match_cpu() {
    let Some(dev) = dev() else { return };
    let (m, n) = (9, 33);
    for d in ALL_DTYPES {
        let v = values(m * n, 3, d);
        for (k, op) in cuda::elementwise::ALL_UNARY.iter().enumerate() {
            let defined = match d {
                DType::Bool => matches!(
                    op,
                    ct::primitives::unary::UnaryOp::LogicalNot
                        | ct::primitives::unary::UnaryOp::IsNan
                        | ct::primitives::unary::UnaryOp::IsInf
                ),
                _ if d.is_int() => !op.is_transcendental() && *op != ct::primitives::unary::UnaryOp::LogicalNot,
                _ => *op != ct::primitives::unary::UnaryOp::LogicalNot,
            };
            let layout = (k + d as usize) % 3;
            let h = host_view(d, &v, m, n, layout);
            let g = upload_view(&dev, &h, &[m, n]);
            let r = cuda::unary(*op, &g, &[m, n]);
            if !defined {
                assert!(r.is_err(), "{} on {d} should be an error", op.name());
                continue;
            }
            let got = as_f64(&r.expect("unary").to_host(&[m, n]).expect("host"), &[m, n]);
            let want = array_f64(&ct::unary(*op, &array(d, &v, &[m, n])));
            let t = if op.returns_bool() { 0.0 } else { tol(d) * if d == DType::F32 { 4.0 } else { 1.0 } };
            close(&format!("{} {d} layout {layout}", op.name()), &got, &want, t, 1e-30);
        }
    }
}

#[test]
fn binary_ops_match_cpu_with_broadcasting() {
    let Some(dev) = dev() else { return };
    let (m, n) = (6, 19);
    for d in ALL_DTYPES {
        let va = values(m * n, 4, d);
        let mut vb = values(n, 5, d);
        if d.is_int() {
            vb[3] = 0.0; // division by zero
            vb[4] = -1.0;
        }
        for (k, op) in cuda::elementwise::ALL_BINARY.iter().enumerate() {
            let defined = match d {
                DType::Bool => matches!(
                    op,
                    BinaryOp::Add
                        | BinaryOp::LogicalOr
                        | BinaryOp::Maximum
                        | BinaryOp::Multiply
                        | BinaryOp::LogicalAnd
                        | BinaryOp::Minimum
                        | BinaryOp::Equal
                        | BinaryOp::NotEqual
                        | BinaryOp::Less
                        | BinaryOp::LessEqual
                        | BinaryOp::Greater
                        | BinaryOp::GreaterEqual
                ),
                // integer power runs on the host (a negative exponent is an evaluation error)
                _ if d.is_int() => !op.needs_float() && *op != BinaryOp::Power,
                _ => true,
            };
            let layout = (k + d as usize) % 3;
            let a = upload_view(&dev, &host_view(d, &va, m, n, layout), &[m, n]);
            let b = CudaData::from_host(&dev, &Data::contiguous(buffer(d, &vb), &[n]), &[n]).expect("b");
            let r = cuda::binary(*op, &a, &[m, n], &b, &[n], &[m, n]);
            if !defined {
                assert!(r.is_err(), "{} on {d} should be an error", op.name());
                continue;
            }
            let got = as_f64(&r.expect("binary").to_host(&[m, n]).expect("host"), &[m, n]);
            let want = array_f64(&ct::binary(*op, &array(d, &va, &[m, n]), &array(d, &vb, &[n])));
            let t = if op.returns_bool() { 0.0 } else { tol(d) * 4.0 };
            close(&format!("{} {d} layout {layout}", op.name()), &got, &want, t, 1e-30);
            // swapped: broadcast operand first
            let r2 = cuda::binary(*op, &b, &[n], &a, &[m, n], &[m, n]).expect("binary swapped");
            let got2 = as_f64(&r2.to_host(&[m, n]).expect("host"), &[m, n]);
            let want2 = array_f64(&ct::binary(*op, &array(d, &vb, &[n]), &array(d, &va, &[m, n])));
            close(&format!("{} {d} swapped", op.name()), &got2, &want2, t, 1e-30);
            // a 0-d operand (the dense launch with a broadcast scalar), on either side
            let s = CudaData::from_host(&dev, &Data::contiguous(buffer(d, &vb[4..5]), &[]), &[]).expect("s");
            let sa = array(d, &vb[4..5], &[]);
            let dense = upload_view(&dev, &host_view(d, &va, m, n, 0), &[m, n]);
            let xa = array(d, &va, &[m, n]);
            for (got, want, what) in [
                (cuda::binary(*op, &dense, &[m, n], &s, &[], &[m, n]), ct::binary(*op, &xa, &sa), "x op scalar"),
                (cuda::binary(*op, &s, &[], &dense, &[m, n], &[m, n]), ct::binary(*op, &sa, &xa), "scalar op x"),
            ] {
                let got = as_f64(&got.expect("binary with a scalar").to_host(&[m, n]).expect("host"), &[m, n]);
                close(&format!("{} {d} {what}", op.name()), &got, &array_f64(&want), t, 1e-30);
            }
        }
    }
}

#[test]
fn select_and_casts_match_cpu() {
    let Some(dev) = dev() else { return };
    let (m, n) = (4, 11);
    let vc = values(n, 6, DType::Bool);
    let c = CudaData::from_host(&dev, &Data::contiguous(buffer(DType::Bool, &vc), &[n]), &[n]).expect("c");
    for d in [DType::F32, DType::I64, DType::F16, DType::U8] {
        let (va, vb) = (values(m * n, 7, d), values(m * n, 8, d));
        let a = upload_view(&dev, &host_view(d, &va, m, n, 1), &[m, n]);
        let b = upload_view(&dev, &host_view(d, &vb, m, n, 2), &[m, n]);
        let r = cuda::select((&c, &[n]), (&a, &[m, n]), (&b, &[m, n]), &[m, n]).expect("select");
        let want =
            array_f64(&ct::select(&array(DType::Bool, &vc, &[n]), array(d, &va, &[m, n]), array(d, &vb, &[m, n])));
        close(&format!("select {d}"), &as_f64(&r.to_host(&[m, n]).expect("host"), &[m, n]), &want, 0.0, 0.0);
    }
    let specials = [
        0.0,
        -0.0,
        0.5,
        -1.5,
        2.5,
        1e10,
        -1e10,
        3e38,
        65519.0,
        65520.0,
        1e-8,
        f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        255.7,
        -129.2,
        4294967296.0,
        9.3e18,
        1.0000001,
        3.4028235e38,
    ];
    for from in ALL_DTYPES {
        let mut v = values(64, 9, from);
        if from.is_float() {
            v.extend_from_slice(&specials);
        }
        let len = v.len();
        let x = upload_view(&dev, &host_view(from, &v, 1, len, 2), &[1, len]);
        for to in ALL_DTYPES {
            let r = cuda::cast(&x, &[1, len], to).expect("cast");
            let got = as_f64(&r.to_host(&[1, len]).expect("host"), &[1, len]);
            let want = array_f64(&array(from, &v, &[1, len]).astype(to));
            close(&format!("cast {from} -> {to}"), &got, &want, 0.0, 0.0);
        }
    }
}

#[test]
fn reductions_match_cpu() {
    let Some(dev) = dev() else { return };
    let shape = [4usize, 37, 65];
    let axes_sets: [&[usize]; 7] = [&[2], &[1], &[0], &[0, 2], &[0, 1, 2], &[], &[1, 2]];
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool] {
        let mut v = values(shape.iter().product(), 10, d);
        if d.is_float() {
            v.iter_mut().for_each(|x| {
                if x.is_nan() || x.abs() > 10.0 {
                    *x = 0.25
                }
            });
        }
        let x_arr = array(d, &v, &shape);
        let g = CudaData::from_host(&dev, &Data::contiguous(buffer(d, &v), &shape), &shape).expect("x");
        // a transposed view of the same logical values: storage [65, 37, 4]
        let xt_arr = x_arr.transpose(&[2, 1, 0]);
        let tshape = [65usize, 37, 4];
        let gt = g.checked_view(&tshape, &[1, 65, 65 * 37], 0).expect("transposed view");
        let ops: &[ReduceOp] = if d == DType::Bool {
            &[ReduceOp::All, ReduceOp::Any, ReduceOp::Max, ReduceOp::Min]
        } else {
            &[ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min]
        };
        for &op in ops {
            for axes in axes_sets {
                for (gx, ax_arr, sh) in [(&g, &x_arr, &shape), (&gt, &xt_arr, &tshape)] {
                    if op == ReduceOp::Prod && d.is_float() && axes.len() > 1 {
                        continue; // products of thousands of values over/underflow
                    }
                    let r = cuda::reduce(op, gx, sh, axes).expect("reduce");
                    let out_shape: Vec<usize> =
                        sh.iter().enumerate().map(|(i, &e)| if axes.contains(&i) { 1 } else { e }).collect();
                    let got = as_f64(&r.to_host(&out_shape).expect("host"), &out_shape);
                    let ia: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
                    // the public sum/prod widen small integers first; the kernel keeps the dtype
                    // and wraps, which is the widened result cast back
                    let want = array_f64(&match op {
                        ReduceOp::Sum => ax_arr.sum(&ia, true).astype(d),
                        ReduceOp::Prod => ax_arr.prod(&ia, true).astype(d),
                        ReduceOp::Max => ax_arr.max(&ia, true),
                        ReduceOp::Min => ax_arr.min(&ia, true),
                        ReduceOp::All => ax_arr.all(&ia, true),
                        ReduceOp::Any => ax_arr.any(&ia, true),
                    });
                    let r_len: usize = axes.iter().map(|&a| sh[a]).product();
                    let t = match op {
                        ReduceOp::Sum | ReduceOp::Prod => tol(d) * (r_len as f64).sqrt().max(1.0) * 4.0,
                        _ => 0.0,
                    };
                    close(&format!("{} {d} axes {axes:?} shape {sh:?}", op.name()), &got, &want, t, 1.0);
                }
            }
        }
    }
    // the whole-array two-pass plan, deterministic across runs
    let n = 3_000_001;
    let v: Vec<f64> = (0..n).map(|i| ((i * 7919) % 1000) as f64 / 1000.0 - 0.3).collect();
    let g = CudaData::from_host(&dev, &Data::contiguous(buffer(DType::F32, &v), &[n]), &[n]).expect("big");
    let a = as_f64(&cuda::reduce(ReduceOp::Sum, &g, &[n], &[0]).expect("sum").to_host(&[1]).expect("h"), &[1]);
    let b = as_f64(&cuda::reduce(ReduceOp::Sum, &g, &[n], &[0]).expect("sum").to_host(&[1]).expect("h"), &[1]);
    assert_eq!(a[0].to_bits(), b[0].to_bits(), "deterministic sum");
    let exact: f64 = buffer(DType::F32, &v).as_slice::<f32>().iter().map(|&x| x as f64).sum();
    assert!((a[0] - exact).abs() <= 1e-6 * exact.abs().max(1.0) * 10.0, "sum {} vs {exact}", a[0]);
    let gi = cuda::cast(&g, &[n], DType::I32).expect("cast");
    let si = as_f64(&cuda::reduce(ReduceOp::Max, &gi, &[n], &[0]).expect("max").to_host(&[1]).expect("h"), &[1]);
    assert_eq!(si[0], 0.0);
    // 0-size inputs: the identity; reductions over an empty axis
    let z = CudaData::empty(&dev, DType::F32, &[3, 0]).expect("z");
    let s =
        as_f64(&cuda::reduce(ReduceOp::Sum, &z, &[3, 0], &[1]).expect("sum0").to_host(&[3, 1]).expect("h"), &[3, 1]);
    assert_eq!(s, vec![0.0; 3]);
    let p =
        as_f64(&cuda::reduce(ReduceOp::Prod, &z, &[3, 0], &[1]).expect("prod0").to_host(&[3, 1]).expect("h"), &[3, 1]);
    assert_eq!(p, vec![1.0; 3]);
    let e = cuda::reduce(ReduceOp::Sum, &z, &[3, 0], &[0]).expect("sum over 3");
    assert_eq!(e.to_host(&[1, 0]).expect("h").buf().len(), 0);
    // column plans over an empty axis read nothing: [0, 5] over axis 0, [2, 0, 4] over axis 1
    for (shape, axis, kept) in [(&[0usize, 5][..], 0usize, &[1usize, 5][..]), (&[2, 0, 4], 1, &[2, 1, 4])] {
        let z = CudaData::empty(&dev, DType::F32, shape).expect("z");
        for (op, identity) in [(ReduceOp::Sum, 0.0), (ReduceOp::Prod, 1.0), (ReduceOp::Max, f64::NEG_INFINITY)] {
            let r = cuda::reduce(op, &z, shape, &[axis]).expect("empty column reduction");
            let got = as_f64(&r.to_host(kept).expect("h"), kept);
            assert_eq!(got, vec![identity; kept.iter().product()], "{op:?} over axis {axis} of {shape:?}");
        }
    }
    dev.synchronize().expect("no kernel read outside its input");
}

#[test]
fn arg_reductions_softmax_logsumexp_and_scans_match_cpu() {
    let Some(dev) = dev() else { return };
    let (m, n) = (7, 300);
    for d in [DType::F32, DType::F64, DType::BF16, DType::I32, DType::U8] {
        let mut v = values(m * n, 11, d);
        if d.is_float() {
            for x in v.iter_mut() {
                *x = (*x * 2.0).round() / 2.0; // ties
            }
        }
        for layout in 0..3 {
            let g = upload_view(&dev, &host_view(d, &v, m, n, layout), &[m, n]);
            let x = array(d, &v, &[m, n]);
            for axis in [0usize, 1] {
                for op in [ArgReduceOp::ArgMax, ArgReduceOp::ArgMin] {
                    let r = cuda::arg_reduce(op, &g, &[m, n], axis).expect("arg");
                    let os: Vec<usize> = if axis == 0 { vec![1, n] } else { vec![m, 1] };
                    let got = as_f64(&r.to_host(&os).expect("h"), &os);
                    let want = array_f64(&if op == ArgReduceOp::ArgMax {
                        x.argmax(axis as isize, true)
                    } else {
                        x.argmin(axis as isize, true)
                    });
                    close(&format!("{op:?} {d} axis {axis} layout {layout}"), &got, &want, 0.0, 0.0);
                }
                if d.is_float() {
                    let lse = cuda::logsumexp(&g, &[m, n], &[axis]).expect("lse");
                    let os: Vec<usize> = if axis == 0 { vec![1, n] } else { vec![m, 1] };
                    close(
                        &format!("logsumexp {d} axis {axis}"),
                        &as_f64(&lse.to_host(&os).expect("h"), &os),
                        &array_f64(&x.logsumexp(&[axis as isize], true)),
                        tol(d) * 4.0,
                        1.0,
                    );
                    let sm = cuda::softmax(&g, &[m, n], &[axis]).expect("softmax");
                    close(
                        &format!("softmax {d} axis {axis}"),
                        &as_f64(&sm.to_host(&[m, n]).expect("h"), &[m, n]),
                        &array_f64(&x.softmax(&[axis as isize])),
                        tol(d) * 4.0,
                        1e-6,
                    );
                }
                for (rev, inc) in [(false, true), (true, false)] {
                    let xs = x.clone();
                    let r = cuda::scan(ScanOp::Sum, &g, &[m, n], axis, rev, inc).expect("cumsum");
                    let want = array_f64(&xs.cumsum_opts(axis as isize, rev, inc).astype(d));
                    close(
                        &format!("cumsum {d} axis {axis} rev {rev} inc {inc}"),
                        &as_f64(&r.to_host(&[m, n]).expect("h"), &[m, n]),
                        &want,
                        tol(d) * 8.0,
                        10.0,
                    );
                }
            }
        }
    }
}

/// Running sums of each row of `v` (`[rows, r]`) in f64, and the running sums of the magnitudes
/// (which bound the rounding error of any order of summation), for cumsum with `reverse` and
/// `inclusive` as `cumsum_opts` takes them.
fn exact_running_sums(v: &[f64], rows: usize, r: usize, reverse: bool, inclusive: bool) -> (Vec<f64>, Vec<f64>) {
    let (mut sums, mut magnitudes) = (vec![0.0; v.len()], vec![0.0; v.len()]);
    for row in 0..rows {
        let (mut s, mut m) = (0.0, 0.0);
        let order: Vec<usize> = if reverse { (0..r).rev().collect() } else { (0..r).collect() };
        for j in order {
            let i = row * r + j;
            if inclusive {
                s += v[i];
                m += v[i].abs();
            }
            (sums[i], magnitudes[i]) = (s, m);
            if !inclusive {
                s += v[i];
                m += v[i].abs();
            }
        }
    }
    (sums, magnitudes)
}

/// [`close`] with a tolerance per element: `|got - want| <= bound(i)`; NaN and infinities exact.
fn close_each(what: &str, got: &[f64], want: &[f64], bound: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() || w.is_infinite() {
            assert!(g == w || (g.is_nan() && w.is_nan()), "{what}[{i}]: got {g}, want {w}");
            continue;
        }
        assert!(
            (g - w).abs() <= bound(i),
            "{what}[{i}]: got {g}, want {w} (err {:e}, bound {:e})",
            (g - w).abs(),
            bound(i)
        );
    }
}

/// Compensated sums and chunked scans: long rows, long columns with few outputs (folded in
/// chunked passes), every chunk boundary of a scan, integers (exact, wrapping) and
/// non-finite values (inf and NaN must propagate as in a plain sum, never become NaN through
/// the compensation).
#[test]
fn long_axes_and_non_finite_sums_and_scans_match_cpu() {
    let Some(dev) = dev() else { return };
    // (512, 4096): the column sum is a bias gradient's `[4096, 512]` over axis 0 (chunked passes)
    for (rows, r) in [(3usize, 5000usize), (2, 100_003), (1, 1025), (512, 4096)] {
        for d in [DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64] {
            let mut v = values(rows * r, 21, d);
            if d.is_float() {
                v.iter_mut().for_each(|x| {
                    if x.is_nan() {
                        *x = 0.1
                    }
                });
                if rows > 1 {
                    v[r + 17] = f64::INFINITY; // row 1: +inf
                }
                if rows > 2 {
                    v[2 * r + 5] = f64::INFINITY; // row 2: inf - inf = NaN
                    v[2 * r + r - 3] = f64::NEG_INFINITY;
                }
            }
            let x = array(d, &v, &[rows, r]);
            let g = CudaData::from_host(&dev, &Data::contiguous(buffer(d, &v), &[rows, r]), &[rows, r]).expect("x");
            // the same values stored transposed: [r, rows] summed over axis 0 (few long columns)
            let gt = upload_view(&dev, &host_view(d, &v, rows, r, 1), &[rows, r]);
            let t = tol(d) * 4.0;
            // f32 and half sums against the exact sums of the stored values (the compensated CUDA sum is
            // closer to them than the CPU's f32 sum, whose error grows with the row's magnitude:
            // 1.8e-3 on a row of [512, 4096] summing to 128.7 out of 1.9e5 in magnitude)
            let check_sum = |what: &str, got: &[f64]| {
                if d.is_float() && d != DType::F64 {
                    let (exact, magnitude) = exact_running_sums(&array_f64(&x), rows, r, false, true);
                    let last = |v: &[f64]| (0..rows).map(|q| v[q * r + r - 1]).collect::<Vec<f64>>();
                    let (exact, magnitude) = (last(&exact), last(&magnitude));
                    close_each(what, got, &exact, |i| t * (exact[i].abs() + 1e-3 * magnitude[i] + 1.0));
                } else {
                    // f64 against the CPU's f64 sum; integers exactly
                    let rel = if d.is_float() { t } else { 0.0 };
                    close(what, got, &array_f64(&x.sum(&[1], true).astype(d)), rel, 1.0);
                }
            };
            for (gx, what) in [(&g, "rows"), (&gt, "transposed")] {
                let s = cuda::reduce(ReduceOp::Sum, gx, &[rows, r], &[1]).expect("sum");
                check_sum(
                    &format!("sum {d} {what} [{rows}, {r}]"),
                    &as_f64(&s.to_host(&[rows, 1]).expect("h"), &[rows, 1]),
                );
                for (rev, inc) in [(false, true), (true, true), (false, false), (true, false)] {
                    let c = cuda::scan(ScanOp::Sum, gx, &[rows, r], 1, rev, inc).expect("cumsum");
                    let got = as_f64(&c.to_host(&[rows, r]).expect("h"), &[rows, r]);
                    let what = format!("cumsum {d} {what} [{rows}, {r}] rev {rev} inc {inc}");
                    if d.is_float() {
                        // against the exact running sums of the stored values: the CPU's blocked
                        // scan and the CUDA compensated scan round differently, each within its
                        // documented bound (a few ulps of the running sum of magnitudes)
                        let (want, magnitude) = exact_running_sums(&array_f64(&x), rows, r, rev, inc);
                        close_each(&what, &got, &want, |i| t * (want[i].abs() + 0.01 * magnitude[i] + 1.0));
                    } else {
                        close(&what, &got, &array_f64(&x.cumsum_opts(1, rev, inc).astype(d)), 0.0, 0.0);
                    }
                }
            }
            // a column sum with few outputs over the long axis: storage [r, rows]
            let col = CudaData::from_host(
                &dev,
                &Data::contiguous(buffer(d, &transpose(&v, rows, r)), &[r, rows]),
                &[r, rows],
            )
            .expect("col");
            let s = cuda::reduce(ReduceOp::Sum, &col, &[r, rows], &[0]).expect("column sum");
            check_sum(
                &format!("column sum {d} [{r}, {rows}]"),
                &as_f64(&s.to_host(&[1, rows]).expect("h"), &[1, rows]),
            );
        }
    }
    // accuracy beyond the CPU's: 10^6 tenths in one row, compensated to a couple of roundings
    let n = 1_000_000;
    let g =
        CudaData::from_host(&dev, &Data::contiguous(buffer(DType::F32, &vec![0.1; n]), &[n]), &[n]).expect("tenths");
    let got = as_f64(&cuda::reduce(ReduceOp::Sum, &g, &[n], &[0]).expect("sum").to_host(&[1]).expect("h"), &[1])[0];
    let exact = n as f64 * 0.1f32 as f64;
    assert!((got - exact).abs() <= 2.0 * f32::EPSILON as f64 * exact, "sum of 10^6 tenths {got} vs {exact}");
    let c = as_f64(&cuda::scan(ScanOp::Sum, &g, &[n], 0, false, true).expect("cumsum").to_host(&[n]).expect("h"), &[n]);
    for i in [0, 1023, 1024, 999, 1000, 500_000, n - 1] {
        let want = (i + 1) as f64 * 0.1f32 as f64;
        assert!((c[i] - want).abs() <= 2.0 * f32::EPSILON as f64 * want, "cumsum[{i}] {} vs {want}", c[i]);
    }
}

/// `v` (row-major `[m, n]`) stored as `[n, m]`.
fn transpose(v: &[f64], m: usize, n: usize) -> Vec<f64> {
    (0..n * m).map(|k| v[(k % m) * n + k / m]).collect()
}

fn mat(dev: &Arc<CudaDevice>, d: DType, v: &[f64], shape: &[usize], transposed: bool) -> (CudaData, Array) {
    let nd = shape.len();
    let arr = array(d, v, shape);
    if !transposed {
        return (CudaData::from_host(dev, &Data::contiguous(buffer(d, v), shape), shape).expect("m"), arr);
    }
    // store the matrix transposed (last two axes), view it back
    let mut perm: Vec<isize> = (0..nd as isize).collect();
    perm.swap(nd - 2, nd - 1);
    let t = arr.transpose(&perm);
    let tv = array_f64(&t);
    let tshape = t.shape().to_vec();
    let g = CudaData::from_host(dev, &Data::contiguous(buffer(d, &tv), &tshape), &tshape).expect("t");
    let mut strides: Vec<isize> = g.strides().to_vec();
    strides.swap(nd - 2, nd - 1);
    (g.checked_view(arr.shape(), &strides, 0).expect("transposed view"), arr)
}

#[test]
fn matmul_matches_cpu_over_layouts_and_batches() {
    let Some(dev) = dev() else { return };
    let cases: &[(&[usize], &[usize])] = &[
        (&[17, 33], &[33, 9]),
        (&[1, 64], &[64, 31]),
        (&[5, 1], &[1, 7]),
        (&[2, 1, 8, 16], &[1, 3, 16, 5]),
        (&[3, 4, 0], &[3, 0, 6]),
        (&[65, 129], &[129, 257]),
    ];
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (ci, (ash, bsh)) in cases.iter().enumerate() {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let va: Vec<f64> = values(ash.iter().product(), 12 + ci as u64, DType::F64)
                    .iter()
                    .map(|x| if x.is_nan() || x.abs() > 10.0 { 0.5 } else { *x })
                    .collect();
                let vb: Vec<f64> = values(bsh.iter().product(), 13 + ci as u64, DType::F64)
                    .iter()
                    .map(|x| if x.is_nan() || x.abs() > 10.0 { 0.5 } else { *x })
                    .collect();
                let (ga, a) = mat(&dev, d, &va, ash, ta);
                let (gb, b) = mat(&dev, d, &vb, bsh, tb);
                let want_arr = a.matmul(&b);
                let os = want_arr.shape().to_vec();
                let r = cuda::matmul(&ga, ash, &gb, bsh, &os).expect("matmul");
                let got = as_f64(&r.to_host(&os).expect("h"), &os);
                let want = array_f64(&want_arr);
                let k = ash[ash.len() - 1] as f64;
                close(
                    &format!("matmul {d} {ash:?}·{bsh:?} ta {ta} tb {tb}"),
                    &got,
                    &want,
                    tol(d) * 4.0 * k.sqrt().max(1.0),
                    3.0,
                );
            }
        }
    }
    // an operand that is neither row- nor column-contiguous (every other column): copied first
    let (m, k, n) = (6, 10, 4);
    let va = values(m * k, 20, DType::F64).iter().map(|x| if x.is_nan() { 0.0 } else { *x }).collect::<Vec<_>>();
    let vb = values(k * n, 21, DType::F64).iter().map(|x| if x.is_nan() { 0.0 } else { *x }).collect::<Vec<_>>();
    let ga = upload_view(&dev, &host_view(DType::F32, &va, m, k, 2), &[m, k]);
    let gb = CudaData::from_host(&dev, &Data::contiguous(buffer(DType::F32, &vb), &[k, n]), &[k, n]).expect("b");
    let got =
        as_f64(&cuda::matmul(&ga, &[m, k], &gb, &[k, n], &[m, n]).expect("mm").to_host(&[m, n]).expect("h"), &[m, n]);
    let want = array_f64(&array(DType::F32, &va, &[m, k]).matmul(&array(DType::F32, &vb, &[k, n])));
    close("matmul strided", &got, &want, 1e-5, 3.0);
    assert!(cuda::matmul(&gb, &[k, n], &gb, &[k, n], &[k, n]).is_ok() || k != n);
    let gi = cuda::cast(&gb, &[k, n], DType::I32).expect("cast");
    assert!(cuda::matmul(&gi, &[k, n], &gi, &[n, k], &[k, k]).is_err(), "int matmul is an error");
}

#[test]
fn gather_and_scatter_add_match_cpu() {
    let Some(dev) = dev() else { return };
    let (m, n, j) = (5, 8, 6);
    for d in [DType::F32, DType::F64, DType::I64, DType::F16, DType::BF16, DType::U8, DType::I32, DType::Bool] {
        let v = values(m * n, 14, d);
        let idx: Vec<f64> = (0..m * j).map(|i| ((i * 5) % (2 * n)) as f64 - n as f64).collect(); // in [-n, n)
        for layout in 0..3 {
            let gx = upload_view(&dev, &host_view(d, &v, m, n, layout), &[m, n]);
            let gi =
                CudaData::from_host(&dev, &Data::contiguous(buffer(DType::I32, &idx), &[m, j]), &[m, j]).expect("i");
            let x = array(d, &v, &[m, n]);
            let ia = array(DType::I32, &idx, &[m, j]);
            let r = cuda::gather(&gx, &[m, n], &gi, &[m, j], 1).expect("gather");
            close(
                &format!("gather {d} layout {layout}"),
                &as_f64(&r.to_host(&[m, j]).expect("h"), &[m, j]),
                &array_f64(&x.take_along_axis(&ia, 1)),
                0.0,
                0.0,
            );
            let u = values(m * j, 15, d);
            let gu = CudaData::from_host(&dev, &Data::contiguous(buffer(d, &u), &[m, j]), &[m, j]).expect("u");
            // the ordered scatter adds each element's updates in the CPU's order: the same bits
            let s = cuda::scatter(ScatterMode::Add, &gx, &[m, n], &gi, &[m, j], &gu, 1).expect("scatter");
            let want = array_f64(&x.scatter_add_along_axis(&ia, &array(d, &u, &[m, j]), 1));
            close(
                &format!("scatter_add {d} layout {layout}"),
                &as_f64(&s.to_host(&[m, n]).expect("h"), &[m, n]),
                &want,
                0.0,
                0.0,
            );
            let p = cuda::scatter(ScatterMode::Put, &gx, &[m, n], &gi, &[m, j], &gu, 1).expect("put");
            let want = array_f64(&x.put_along_axis(&ia, &array(d, &u, &[m, j]), 1));
            close(
                &format!("put {d} layout {layout}"),
                &as_f64(&p.to_host(&[m, n]).expect("h"), &[m, n]),
                &want,
                0.0,
                0.0,
            );
        }
    }
    // an out-of-range index is an error naming it
    let gx = CudaData::from_host(&dev, &Data::contiguous(buffer(DType::F32, &[1.0, 2.0, 3.0]), &[3]), &[3]).expect("x");
    let gi =
        CudaData::from_host(&dev, &Data::contiguous(buffer(DType::I64, &[0.0, 7.0, -9.0]), &[3]), &[3]).expect("i");
    let e = cuda::gather(&gx, &[3], &gi, &[3], 0).expect_err("bad index");
    assert!(e.to_string().contains("index 7"), "{e}");
    let gu = CudaData::from_host(&dev, &Data::contiguous(buffer(DType::F32, &[1.0; 3]), &[3]), &[3]).expect("u");
    let e = cuda::scatter(ScatterMode::Add, &gx, &[3], &gi, &[3], &gu, 0).expect_err("bad index");
    assert!(e.to_string().contains("index 7"), "{e}");
    // indices uploaded from the host and in range need no check on the device (no wait for the
    // GPU); indices computed on the device are checked there, in range or not
    let waits = || cuda::INDEX_CHECK_WAITS.load(std::sync::atomic::Ordering::Relaxed);
    let from_host =
        CudaData::from_host(&dev, &Data::contiguous(buffer(DType::I64, &[0.0, 2.0, -1.0]), &[3]), &[3]).expect("i");
    let before = waits();
    let g = cuda::gather(&gx, &[3], &from_host, &[3], 0).expect("gather");
    let s = cuda::scatter(ScatterMode::Add, &gx, &[3], &from_host, &[3], &gu, 0).expect("scatter");
    assert_eq!(waits(), before, "host-known indices in range are not checked on the device");
    assert_eq!(as_f64(&g.to_host(&[3]).expect("h"), &[3]), [1.0, 3.0, 3.0]);
    assert_eq!(as_f64(&s.to_host(&[3]).expect("h"), &[3]), [2.0, 2.0, 5.0], "x = [1, 2, 3] plus one at 0, 2 and 2");
    let floats = |v: &[f64]| CudaData::from_host(&dev, &Data::contiguous(buffer(DType::F32, v), &[3]), &[3]);
    let on_device = cuda::cast(&floats(&[0.0, 2.0, -1.0]).expect("f"), &[3], DType::I64).expect("cast");
    let g = cuda::gather(&gx, &[3], &on_device, &[3], 0).expect("gather");
    assert_eq!(waits(), before + 1, "indices computed on the device are checked there");
    assert_eq!(as_f64(&g.to_host(&[3]).expect("h"), &[3]), [1.0, 3.0, 3.0]);
    let bad_on_device = cuda::cast(&floats(&[0.0, 3.0, -1.0]).expect("f"), &[3], DType::I64).expect("cast");
    let e = cuda::gather(&gx, &[3], &bad_on_device, &[3], 0).expect_err("bad index");
    assert!(e.to_string().contains("index 3"), "{e}");
    let e = cuda::scatter(ScatterMode::Add, &gx, &[3], &bad_on_device, &[3], &gu, 0).expect_err("bad index");
    assert!(e.to_string().contains("index 3"), "{e}");
}

/// An embedding's gradient: many token ids (with many repeats) scattered into the rows of a table,
/// the ids broadcast along the width. The sums are the CPU's bit for bit, twice in a row, through
/// the public op on arrays that live on the GPU.
#[test]
fn embedding_gradient_scatter_is_the_cpus_bit_for_bit() {
    let Some(_dev) = dev() else { return };
    let (rows, width, tokens) = (300usize, 70usize, 5000usize);
    let ids: Vec<i64> = (0..tokens).map(|i| ((i * 7919) % 97 + (i % 3) * 101) as i64 - 150).collect();
    let upd = values(tokens * width, 21, DType::F32);
    let upd32: Vec<f32> = upd.iter().map(|&v| v as f32).collect();
    let on = |device: ct::Device| {
        let table = ct::zeros(&[rows, width], DType::F32).to_device(device);
        let idx = Array::from_slice(&ids, &[tokens, 1]).to_device(device).broadcast_to(&[tokens, width]);
        let u = Array::from_slice(&upd32, &[tokens, width]).to_device(device);
        table.scatter_add_along_axis(&idx, &u, 0).to_vec::<f32>().expect("scatter")
    };
    let cpu = on(ct::Device::Cpu);
    let (a, b) = (on(ct::Device::Cuda(0)), on(ct::Device::Cuda(0)));
    assert!(cpu.iter().zip(&a).all(|(x, y)| x.to_bits() == y.to_bits()), "CUDA scatter-add differs from the CPU's");
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "two CUDA scatter-adds differ");
}

#[test]
fn random_matches_cpu_bits() {
    let Some(dev) = dev() else { return };
    let key = ct::random::key(42);
    let keys = ct::random::split(&key, 3);
    let kv: Vec<u32> = keys.to_vec::<u32>().expect("keys");
    let gk = CudaData::from_host(&dev, &Data::from_vec(kv.clone(), &[3, 2]), &[3, 2]).expect("keys");
    let k0 = Array::from_slice(&kv[..2], &[2]);
    let g0 = CudaData::from_host(&dev, &Data::from_vec(kv[..2].to_vec(), &[2]), &[2]).expect("key");
    let shape = [1001usize];
    let check = |what: &str, dist: Dist, dtype: DType, want: Array, t: f64| {
        let r = cuda::random(dist, &g0, &[2], &shape, dtype).expect("random");
        close(what, &as_f64(&r.to_host(&shape).expect("h"), &shape), &array_f64(&want), t, 1e-30);
    };
    check("bits", Dist::Bits, DType::U32, ct::random::bits(&k0, &shape), 0.0);
    for d in [DType::F32, DType::F64, DType::BF16, DType::F16] {
        check(
            &format!("uniform {d}"),
            Dist::Uniform { lo: -2.0, hi: 3.0 },
            d,
            ct::random::uniform(&k0, &shape, -2.0, 3.0, d),
            0.0,
        );
        let nt: f64 = if d == DType::F64 { 1e-14 } else { 1.2e-7 };
        check(&format!("normal {d}"), Dist::Normal, d, ct::random::normal(&k0, &shape, d), nt.max(tol(d) / 4.0));
        check(&format!("gumbel {d}"), Dist::Gumbel, d, ct::random::gumbel(&k0, &shape, d), nt.max(tol(d) / 4.0));
        check(
            &format!("truncated normal {d}"),
            Dist::TruncatedNormal { lo: -1.0, hi: 2.0 },
            d,
            ct::random::truncated_normal(&k0, -1.0, 2.0, &shape, d),
            (nt * 10.0).max(tol(d) / 4.0),
        );
    }
    for d in [DType::I32, DType::U8, DType::I64] {
        check(
            &format!("randint {d}"),
            Dist::Randint { lo: -5, hi: 17 },
            d,
            ct::random::randint(&k0, -5, 17, &shape, d),
            0.0,
        );
    }
    let r = cuda::random(Dist::Split(4), &g0, &[2], &[4, 2], DType::U32).expect("split");
    close("split", &as_f64(&r.to_host(&[4, 2]).expect("h"), &[4, 2]), &array_f64(&ct::random::split(&k0, 4)), 0.0, 0.0);
    // a batch of keys: one sample per key, as the CPU
    let r = cuda::random(Dist::Bits, &gk, &[3, 2], &[50], DType::U32).expect("batched");
    let got = as_f64(&r.to_host(&[3, 50]).expect("h"), &[3, 50]);
    for b in 0..3 {
        let kb = Array::from_slice(&kv[2 * b..2 * b + 2], &[2]);
        close("batched bits", &got[b * 50..(b + 1) * 50], &array_f64(&ct::random::bits(&kb, &[50])), 0.0, 0.0);
    }
}

/// Every generated element-wise kernel (~700 sources) and every gather and scatter-add kernel
/// compiles with NVRTC for sm_90. Needs only libnvrtc, no GPU: `pip download
/// nvidia-cuda-nvrtc`, unzip the wheel, point `LD_LIBRARY_PATH` at its `nvidia/cu13/lib`, and run
/// `cargo test -p cotangent --features cuda --test cuda_kernels -- --ignored` (about 4 minutes on
/// one core; 9 minutes for sm_90 and sm_80 on a loaded 2-core machine). Skipped where libnvrtc is
/// absent.
#[test]
#[ignore = "compiles ~700 kernels with NVRTC (minutes); run with --ignored where libnvrtc exists"]
fn every_generated_elementwise_kernel_compiles() {
    if !cuda::nvrtc::available() {
        eprintln!("skipped: libnvrtc not found");
        return;
    }
    let mut sources = cuda::elementwise::all_sources();
    assert!(sources.len() > 300, "only {} sources", sources.len());
    let index = cuda::index::all_sources();
    assert!(index.len() > 40, "only {} gather and scatter sources", index.len());
    sources.extend(index);
    sources.extend(cuda::capture::all_sources());
    for arch in [(9, 0)] {
        for (name, src) in &sources {
            let size = cuda::nvrtc::check_compiles(src, name, arch).unwrap_or_else(|e| panic!("{e}\n{src}"));
            assert!(size > 0, "{name}: empty image");
        }
    }
}

/// `compile` on CUDA arrays: a run of element-wise steps over broadcast, strided and scalar
/// inputs, mixing float, half, integer and boolean steps with casts and `select`, becomes one
/// fused node whose values are bit for bit those of the separate kernels (eager, uncompiled),
/// as are those of the eagerly fused temporaries (`fuse_producers`), at sizes that take the dense unrolled path, its ragged tail, and the strided path.
#[test]
fn compiled_element_wise_runs_fuse_into_one_kernel_bit_identical_to_separate_kernels() {
    let Some(_) = dev() else { return };
    let cuda = ct::Device::Cuda(0);
    let body = |x: &[Array]| {
        let (a, row, col) = (&x[0], &x[1], &x[2]);
        let t = (a * row).sin() * 1.01 + col.exp() * 0.1;
        let h = t.astype(DType::F16).tanh().astype(DType::F32) + t.astype(DType::BF16).sigmoid().astype(DType::F32);
        let n = (&t * 100.0).astype(DType::I32) % 7i32;
        let m = ct::select(&n.greater(Array::scalar(2i32)), &h, -&t);
        vec![m.clone(), n, (&m * 3.0).square().less(&t)]
    };
    for (rows, cols) in [(1usize, 1usize), (3, 5), (257, 1031), (1, 1 << 20)] {
        for strided in [false, true] {
            let key = ct::random::key(rows as u64 * 31 + cols as u64);
            let ks = ct::random::split_keys(&key, 3);
            let a = if strided {
                ct::random::normal(&ks[0], &[cols, rows], DType::F32).to_device(cuda).t()
            } else {
                ct::random::normal(&ks[0], &[rows, cols], DType::F32).to_device(cuda)
            };
            let row = ct::random::uniform(&ks[1], &[cols], -2.0, 2.0, DType::F32).to_device(cuda);
            let col = ct::random::normal(&ks[2], &[rows, 1], DType::F32).to_device(cuda);
            let args = [a, row, col];
            let eager = ct::backend::eager_fusion::with(false, || body(&args));
            // eager fusion (on by default on CUDA) folds the temporaries: `sin(..) * 1.01 + ..`
            let eager_fused = ct::backend::eager_fusion::with(true, || body(&args));
            assert!(format!("{:?}", eager_fused[1]).contains("fused["), "{:?}", eager_fused[1]);
            let compiled = ct::compile(body)(&args).expect("compiled call");
            assert!(format!("{:?}", compiled[0]).contains("fused["), "{:?}", compiled[0]);
            for (i, (c, e)) in compiled.iter().chain(&eager_fused).zip(eager.iter().chain(&eager)).enumerate() {
                assert_eq!((c.shape(), c.dtype(), c.device()), (e.shape(), e.dtype(), cuda), "output {i}");
                let (c, e) =
                    (c.astype(DType::F64).to_vec::<f64>().unwrap(), e.astype(DType::F64).to_vec::<f64>().unwrap());
                let same = c.iter().zip(&e).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
                assert!(same, "output {i}, {rows}x{cols}, strided {strided}: compiled differs from separate kernels");
            }
        }
    }
}
