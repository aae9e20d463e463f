//! Reductions (var/std, all/any, argmax/argmin, logsumexp, softmax, cumsum/cumprod) and indexing
//! (take, take_along_axis, put_along_axis, scatter_add, one_hot): forward values against f64
//! reference loops written here, on random inputs from a small deterministic LCG.
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` reads better in tests
mod common;

use common::{assert_close, check_grads, vals, Lcg};
use cotangent::{self as ct, Array, DType};
use half::f16;

// ----- helpers ---------------------------------------------------------------------------------

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

fn norm_axes(axes: &[isize], nd: usize) -> Vec<usize> {
    axes.iter().map(|&a| if a < 0 { (a + nd as isize) as usize } else { a as usize }).collect()
}

/// Keepdims output shape and, per output element, the reduced elements in row-major order.
fn groups(data: &[f64], shape: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<Vec<f64>>) {
    let out: Vec<usize> = shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let mut g = vec![Vec::new(); numel(&out)];
    for (i, &v) in data.iter().enumerate() {
        let mut idx = unravel(i, shape);
        for &a in axes {
            idx[a] = 0;
        }
        g[ravel(&idx, &out)].push(v);
    }
    (out, g)
}

fn squeeze_shape(keep: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    if keepdims {
        keep.to_vec()
    } else {
        keep.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect()
    }
}

/// An array of logical shape `shape` holding `data` (row-major) in the given dtype, stored
/// transposed when `strided` (a view with reversed strides).
fn make(data: &[f64], shape: &[usize], dtype: DType, strided: bool) -> Array {
    let a = if !strided || shape.len() < 2 {
        Array::from_slice(data, shape)
    } else {
        let rev: Vec<usize> = shape.iter().rev().copied().collect();
        let mut w = vec![0.0; data.len()];
        for (i, &v) in data.iter().enumerate() {
            let idx: Vec<usize> = unravel(i, shape).into_iter().rev().collect();
            w[ravel(&idx, &rev)] = v;
        }
        Array::from_vec(w, &rev).transpose(&[])
    };
    let a = a.astype(dtype);
    assert_eq!(a.shape(), shape);
    a
}

/// Values rounded to the dtype (what the array actually holds).
fn held(data: &[f64], dtype: DType) -> Vec<f64> {
    Array::from_slice(data, &[data.len()]).astype(dtype).to_f64_vec().unwrap()
}

fn ref_logsumexp(g: &[f64]) -> f64 {
    let m = g.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() {
        return g.iter().map(|v| v.exp()).sum::<f64>().ln();
    }
    m + g.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
}

/// numpy's variance: the divisor `n - ddof` is clamped at 0 (so 0 elements give 0 / 0 = NaN).
fn ref_var(g: &[f64], ddof: usize) -> f64 {
    let n = g.len() as f64;
    let m = g.iter().sum::<f64>() / n;
    g.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - ddof as f64).max(0.0)
}

fn ref_arg(g: &[f64], is_max: bool) -> f64 {
    let mut best = 0;
    for (i, &v) in g.iter().enumerate() {
        if v.is_nan() {
            return i as f64;
        }
        if (is_max && v > g[best]) || (!is_max && v < g[best]) {
            best = i;
        }
    }
    best as f64
}

/// Softmax over `axes` of a row-major array, as a row-major array of the same shape.
fn ref_softmax(data: &[f64], shape: &[usize], axes: &[usize]) -> Vec<f64> {
    let (out, g) = groups(data, shape, axes);
    let lse: Vec<f64> = g.iter().map(|g| ref_logsumexp(g)).collect();
    data.iter()
        .enumerate()
        .map(|(i, &v)| {
            let mut idx = unravel(i, shape);
            for &a in axes {
                idx[a] = 0;
            }
            (v - lse[ravel(&idx, &out)]).exp()
        })
        .collect()
}

fn ref_scan(data: &[f64], shape: &[usize], axis: usize, prod: bool, reverse: bool, inclusive: bool) -> Vec<f64> {
    let mut out = vec![0.0; data.len()];
    let n = shape[axis];
    for (i, o) in out.iter_mut().enumerate() {
        let idx = unravel(i, shape);
        let mut acc = if prod { 1.0 } else { 0.0 };
        for k in 0..n {
            let inside = if reverse {
                k > idx[axis] || (inclusive && k == idx[axis])
            } else {
                k < idx[axis] || (inclusive && k == idx[axis])
            };
            if inside {
                let mut j = idx.clone();
                j[axis] = k;
                let v = data[ravel(&j, shape)];
                acc = if prod { acc * v } else { acc + v };
            }
        }
        *o = acc;
    }
    out
}

const SHAPES: &[&[usize]] = &[&[3, 4, 5], &[2, 7], &[6], &[0, 3], &[3, 0, 2], &[1, 1, 4]];

fn axis_sets(nd: usize) -> Vec<Vec<isize>> {
    let mut v: Vec<Vec<isize>> = vec![];
    for a in 0..nd as isize {
        v.push(vec![a]);
        v.push(vec![a - nd as isize]);
    }
    if nd >= 2 {
        v.push(vec![0, -1]);
        v.push(vec![-1, 0]);
    }
    if nd >= 3 {
        v.push(vec![0, 1, 2]);
        v.push(vec![1, 2]);
    }
    v
}

// ----- reductions ------------------------------------------------------------------------------

#[test]
fn var_std_logsumexp_forward() {
    let mut rng = Lcg(1);
    for &shape in SHAPES {
        let data = rng.vec(numel(shape), -2.0, 2.0);
        for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
            let hd = held(&data, dtype);
            for strided in [false, true] {
                let x = make(&data, shape, dtype, strided);
                for axes in axis_sets(shape.len()) {
                    let ax = norm_axes(&axes, shape.len());
                    let (keep, g) = groups(&hd, shape, &ax);
                    for keepdims in [false, true] {
                        let oshape = squeeze_shape(&keep, &ax, keepdims);
                        let what = format!("{shape:?} {dtype} strided={strided} axes={axes:?} keepdims={keepdims}");
                        for ddof in [0, 1] {
                            let v = x.var(&axes, keepdims, ddof);
                            assert_eq!(v.shape(), &oshape[..], "var {what}");
                            assert_eq!(v.dtype(), dtype);
                            let want: Vec<f64> = g.iter().map(|g| ref_var(g, ddof)).collect();
                            assert_close(&v.to_f64_vec().unwrap(), &want, tol, &format!("var ddof={ddof} {what}"));
                            let s = ct::std(&x, &axes, keepdims, ddof);
                            let want: Vec<f64> = want.iter().map(|v| v.sqrt()).collect();
                            assert_close(&s.to_f64_vec().unwrap(), &want, tol, &format!("std {what}"));
                        }
                        let l = ct::logsumexp(&x, &axes, keepdims);
                        assert_eq!(l.shape(), &oshape[..]);
                        let want: Vec<f64> = g.iter().map(|g| ref_logsumexp(g)).collect();
                        assert_close(&l.to_f64_vec().unwrap(), &want, tol, &format!("logsumexp {what}"));
                    }
                }
            }
        }
    }
}

#[test]
fn all_forms_and_empty_axes() {
    let data = [1.0, -2.0, 0.5, 3.0, 0.0, 2.0];
    let x = Array::from_slice(&data, &[2, 3]);
    let want_var = ref_var(&data, 0);
    assert_close(&[x.var_all(0).item::<f64>().unwrap()], &[want_var], 1e-12, "var_all");
    assert_close(&[x.std_all(1).item::<f64>().unwrap()], &[ref_var(&data, 1).sqrt()], 1e-12, "std_all");
    assert_close(&[x.logsumexp_all().item::<f64>().unwrap()], &[ref_logsumexp(&data)], 1e-12, "logsumexp_all");
    assert_eq!(x.argmax_all().item::<u32>().unwrap(), 3);
    assert_eq!(x.argmin_all().item::<u32>().unwrap(), 1);
    assert!(!x.all_all().item::<bool>().unwrap());
    assert!(x.any_all().item::<bool>().unwrap());
    // an empty axes list reduces nothing
    assert_eq!(x.logsumexp(&[], false).to_vec::<f64>().unwrap(), data.to_vec());
    assert_eq!(x.all(&[], false).to_vec::<bool>().unwrap(), vec![true, true, true, true, false, true]);
    assert_eq!(x.any(&[], true).shape(), &[2, 3]);
    assert_eq!(x.var(&[], false, 0).to_vec::<f64>().unwrap(), vec![0.0; 6]);
    assert_eq!(x.softmax(&[]).to_vec::<f64>().unwrap(), vec![1.0; 6]);
    // over no elements: all is true, any false, logsumexp -inf, var NaN
    let e = ct::zeros(&[2, 0], DType::F32);
    assert_eq!(e.all(&[1], false).to_vec::<bool>().unwrap(), vec![true, true]);
    assert_eq!(e.any(&[-1], true).to_vec::<bool>().unwrap(), vec![false, false]);
    assert_eq!(e.any(&[-1], true).shape(), &[2, 1]);
    assert_eq!(e.logsumexp(&[1], false).to_vec::<f32>().unwrap(), vec![f32::NEG_INFINITY; 2]);
    assert!(e.var(&[1], false, 0).to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));
    assert_eq!(e.softmax(&[1]).shape(), &[2, 0]);
    assert_eq!(e.cumsum(1).shape(), &[2, 0]);
    assert_eq!(e.argmax(0, false).shape(), &[0]);
}

#[test]
#[should_panic(expected = "cotangent::argmax: cannot reduce the zero-size axis 1")]
fn argmax_of_empty_axis_panics() {
    let _ = ct::zeros(&[2, 0], DType::F32).argmax(-1, false);
}

#[test]
#[should_panic(expected = "cotangent::logsumexp: axis 2 is out of range for shape [2, 3]")]
fn bad_axis_panics() {
    let _ = ct::zeros(&[2, 3], DType::F32).logsumexp(&[2], false);
}

#[test]
fn all_any_forward() {
    let mut rng = Lcg(2);
    for &shape in SHAPES {
        // about a third zeros, so both answers occur
        let data: Vec<f64> = (0..numel(shape)).map(|_| if rng.below(3) == 0 { 0.0 } else { 1.0 }).collect();
        for dtype in [DType::Bool, DType::I32, DType::F32] {
            for strided in [false, true] {
                let x = make(&data, shape, dtype, strided);
                for axes in axis_sets(shape.len()) {
                    let ax = norm_axes(&axes, shape.len());
                    let (keep, g) = groups(&data, shape, &ax);
                    for keepdims in [false, true] {
                        let what = format!("{shape:?} {dtype} strided={strided} axes={axes:?}");
                        let a = ct::all(&x, &axes, keepdims);
                        let o = x.any(&axes, keepdims);
                        assert_eq!(a.dtype(), DType::Bool);
                        assert_eq!(a.shape(), &squeeze_shape(&keep, &ax, keepdims)[..], "{what}");
                        let wa: Vec<bool> = g.iter().map(|g| g.iter().all(|&v| v != 0.0)).collect();
                        let wo: Vec<bool> = g.iter().map(|g| g.iter().any(|&v| v != 0.0)).collect();
                        assert_eq!(a.to_vec::<bool>().unwrap(), wa, "all {what}");
                        assert_eq!(o.to_vec::<bool>().unwrap(), wo, "any {what}");
                    }
                }
            }
        }
    }
}

#[test]
fn argmax_argmin_forward() {
    let mut rng = Lcg(3);
    for &shape in SHAPES {
        // few distinct values so ties are common
        let data: Vec<f64> = (0..numel(shape)).map(|_| rng.below(4) as f64 - 1.0).collect();
        for dtype in [DType::F64, DType::F32, DType::I32, DType::U8, DType::F16] {
            let src: Vec<f64> = if dtype == DType::U8 { data.iter().map(|v| v + 1.0).collect() } else { data.clone() };
            for strided in [false, true] {
                let x = make(&src, shape, dtype, strided);
                for axis in 0..shape.len() as isize {
                    if shape[axis as usize] == 0 {
                        continue;
                    }
                    for ax in [axis, axis - shape.len() as isize] {
                        let (keep, g) = groups(&src, shape, &[axis as usize]);
                        for keepdims in [false, true] {
                            let what = format!("{shape:?} {dtype} strided={strided} axis={ax} keepdims={keepdims}");
                            let m = ct::argmax(&x, ax, keepdims);
                            let n = x.argmin(ax, keepdims);
                            assert_eq!(m.dtype(), DType::U32);
                            assert_eq!(m.shape(), &squeeze_shape(&keep, &[axis as usize], keepdims)[..], "{what}");
                            let wm: Vec<f64> = g.iter().map(|g| ref_arg(g, true)).collect();
                            let wn: Vec<f64> = g.iter().map(|g| ref_arg(g, false)).collect();
                            assert_eq!(m.to_f64_vec().unwrap(), wm, "argmax {what}");
                            assert_eq!(n.to_f64_vec().unwrap(), wn, "argmin {what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn argmax_ties_first_and_nan_wins() {
    let x = Array::from_slice(&[1.0f32, 3.0, 3.0, 0.0, f32::NAN, 5.0, f32::NAN, -1.0], &[2, 4]);
    assert_eq!(x.argmax(1, false).to_vec::<u32>().unwrap(), vec![1, 0]);
    assert_eq!(x.argmin(1, false).to_vec::<u32>().unwrap(), vec![3, 0]);
    let y = Array::from_slice(&[2.0f64, 2.0, f64::NAN, 7.0], &[4]);
    assert_eq!(y.argmax(0, false).item::<u32>().unwrap(), 2);
    assert_eq!(y.argmin(0, false).item::<u32>().unwrap(), 2);
    assert_eq!(y.argmin(0, true).shape(), &[1]);
    let b = Array::from_slice(&[false, true, true], &[3]);
    assert_eq!(b.argmax(0, false).item::<u32>().unwrap(), 1);
    assert_eq!(b.argmin(0, false).item::<u32>().unwrap(), 0);
}

#[test]
fn logsumexp_softmax_extremes() {
    let ninf = f64::NEG_INFINITY;
    let x = Array::from_slice(&[1000.0, 1000.0, -1000.0, ninf, ninf, ninf, 0.0, f64::INFINITY, 1.0], &[3, 3]);
    let l = x.logsumexp(&[1], false).to_vec::<f64>().unwrap();
    assert!((l[0] - (1000.0 + 2f64.ln())).abs() < 1e-12, "{l:?}");
    assert_eq!(l[1], ninf);
    assert_eq!(l[2], f64::INFINITY);
    let s = Array::from_slice(&[1000.0f32, 1000.0, -1000.0, 88.0, 89.0, 90.0], &[2, 3]).softmax(&[-1]);
    let s = s.to_vec::<f32>().unwrap();
    assert_close(&s[..3].iter().map(|&v| v as f64).collect::<Vec<_>>(), &[0.5, 0.5, 0.0], 1e-6, "softmax big");
    let e: Vec<f64> = [88.0f64, 89.0, 90.0].iter().map(|v| (v - 90.0).exp()).collect();
    let z: f64 = e.iter().sum();
    let want: Vec<f64> = e.iter().map(|v| v / z).collect();
    assert_close(&s[3..].iter().map(|&v| v as f64).collect::<Vec<_>>(), &want, 1e-6, "softmax 88..90");
    let n = Array::from_slice(&[1.0f64, f64::NAN], &[2]);
    assert!(n.logsumexp(&[0], false).item::<f64>().unwrap().is_nan());
}

#[test]
fn softmax_forward() {
    let mut rng = Lcg(4);
    for &shape in SHAPES {
        let data: Vec<f64> = rng.vec(numel(shape), -2.0, 2.0).iter().map(|v| v * 3.0).collect();
        for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5), (DType::F16, 2e-3), (DType::BF16, 1e-2)] {
            let hd = held(&data, dtype);
            for strided in [false, true] {
                let x = make(&data, shape, dtype, strided);
                for axes in axis_sets(shape.len()) {
                    let ax = norm_axes(&axes, shape.len());
                    let what = format!("{shape:?} {dtype} strided={strided} axes={axes:?}");
                    let s = ct::softmax(&x, &axes);
                    assert_eq!(s.shape(), shape);
                    assert_eq!(s.dtype(), dtype);
                    assert_close(&s.to_f64_vec().unwrap(), &ref_softmax(&hd, shape, &ax), tol, &what);
                    // the strided result feeds later ops correctly
                    let t = (&s * 2.0).to_f64_vec().unwrap();
                    let want: Vec<f64> = ref_softmax(&hd, shape, &ax).iter().map(|v| v * 2.0).collect();
                    assert_close(&t, &want, tol, &format!("2*softmax {what}"));
                }
            }
        }
    }
    // integers are computed in f32
    let i = Array::from_slice(&[1i32, 2, 3], &[3]).softmax(&[0]);
    assert_eq!(i.dtype(), DType::F32);
    assert_close(&i.to_f64_vec().unwrap(), &ref_softmax(&[1.0, 2.0, 3.0], &[3], &[0]), 1e-6, "int softmax");
}

#[test]
fn large_rows_parallel_paths_match_reference() {
    // big enough for the parallel row kernels; rows are independent so results are exact per row
    let mut rng = Lcg(5);
    let shape = [300, 257];
    let data = rng.vec(numel(&shape), -2.0, 2.0);
    let x = Array::from_slice(&data, &shape);
    for axes in [vec![-1isize], vec![0]] {
        let ax = norm_axes(&axes, 2);
        let (_, g) = groups(&data, &shape, &ax);
        let s = x.softmax(&axes).to_f64_vec().unwrap();
        assert_close(&s, &ref_softmax(&data, &shape, &ax), 1e-12, "big softmax");
        let l = x.logsumexp(&axes, false).to_f64_vec().unwrap();
        assert_close(&l, &g.iter().map(|g| ref_logsumexp(g)).collect::<Vec<_>>(), 1e-12, "big logsumexp");
        let c = x.cumsum(axes[0]).to_f64_vec().unwrap();
        assert_close(&c, &ref_scan(&data, &shape, ax[0], false, false, true), 1e-10, "big cumsum");
        let a = x.argmax(axes[0], false).to_f64_vec().unwrap();
        assert_eq!(a, g.iter().map(|g| ref_arg(g, true)).collect::<Vec<_>>());
        // deterministic: the same bits every time
        assert_eq!(x.softmax(&axes).to_vec::<f64>().unwrap(), x.softmax(&axes).to_vec::<f64>().unwrap());
    }
}

#[test]
fn cumsum_cumprod_forward() {
    let mut rng = Lcg(6);
    for &shape in SHAPES {
        let data: Vec<f64> = rng.vec(numel(shape), -2.0, 2.0).iter().map(|v| v * 0.8).collect();
        let ints: Vec<f64> = (0..numel(shape)).map(|_| rng.below(7) as f64 - 3.0).collect();
        for (dtype, tol, src) in
            [(DType::F64, 1e-12, &data), (DType::F32, 1e-5, &data), (DType::I32, 0.0, &ints), (DType::I64, 0.0, &ints)]
        {
            let hd = held(src, dtype);
            for strided in [false, true] {
                let x = make(src, shape, dtype, strided);
                for axis in 0..shape.len() {
                    for ax in [axis as isize, axis as isize - shape.len() as isize] {
                        for reverse in [false, true] {
                            for inclusive in [true, false] {
                                let what = format!(
                                    "{shape:?} {dtype} strided={strided} axis={ax} reverse={reverse} inclusive={inclusive}"
                                );
                                let s = ct::cumsum_opts(&x, ax, reverse, inclusive);
                                let p = x.cumprod_opts(ax, reverse, inclusive);
                                assert_eq!((s.shape(), s.dtype()), (shape, dtype));
                                let ws = ref_scan(&hd, shape, axis, false, reverse, inclusive);
                                let wp = ref_scan(&hd, shape, axis, true, reverse, inclusive);
                                assert_close(&s.to_f64_vec().unwrap(), &ws, tol, &format!("cumsum {what}"));
                                assert_close(&p.to_f64_vec().unwrap(), &wp, tol, &format!("cumprod {what}"));
                                if !reverse && inclusive {
                                    assert_close(&x.cumsum(ax).to_f64_vec().unwrap(), &ws, tol, &what);
                                    assert_close(&ct::cumprod(&x, ax).to_f64_vec().unwrap(), &wp, tol, &what);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // bool counts in i32, u8 in u32
    let b = Array::from_slice(&[true, false, true, true], &[4]).cumsum(0);
    assert_eq!(b.dtype(), DType::I32);
    assert_eq!(b.to_vec::<i32>().unwrap(), vec![1, 1, 2, 3]);
    let u = Array::from_slice(&[200u8, 100, 50], &[3]).cumsum(0);
    assert_eq!(u.to_vec::<u32>().unwrap(), vec![200, 300, 350]);
}

#[test]
fn f16_sum_and_friends() {
    let mut rng = Lcg(7);
    let shape = [4, 33];
    let data = rng.vec(numel(&shape), -2.0, 2.0);
    let hd = held(&data, DType::F16);
    for strided in [false, true] {
        let x = make(&data, &shape, DType::F16, strided);
        for axes in [vec![-1isize], vec![0], vec![0, 1]] {
            let ax = norm_axes(&axes, 2);
            let (_, g) = groups(&hd, &shape, &ax);
            let s = x.sum(&axes, false);
            assert_eq!(s.dtype(), DType::F16);
            let want: Vec<f64> = g.iter().map(|g| f16::from_f64(g.iter().sum::<f64>()).to_f64()).collect();
            assert_close(&s.to_f64_vec().unwrap(), &want, 2e-3, "f16 sum");
            let l = x.logsumexp(&axes, false);
            assert_eq!(l.dtype(), DType::F16);
            assert_close(
                &l.to_f64_vec().unwrap(),
                &g.iter().map(|g| ref_logsumexp(g)).collect::<Vec<_>>(),
                2e-3,
                "f16 lse",
            );
        }
        let c = x.cumsum(1);
        assert_close(&c.to_f64_vec().unwrap(), &ref_scan(&hd, &shape, 1, false, false, true), 4e-3, "f16 cumsum");
    }
}

// ----- indexing --------------------------------------------------------------------------------

fn int_array(v: &[i64], shape: &[usize], dtype: DType) -> Array {
    Array::from_slice(v, shape).astype(dtype)
}

#[test]
fn take_forward() {
    let mut rng = Lcg(8);
    let shapes: &[&[usize]] = &[&[5], &[4, 3], &[2, 5, 3], &[3, 0]];
    for &shape in shapes {
        let data = rng.vec(numel(shape), -2.0, 2.0);
        for strided in [false, true] {
            let x = make(&data, shape, DType::F64, strided);
            for axis in 0..shape.len() {
                let n = shape[axis];
                for ishape in [vec![], vec![4usize], vec![2, 3], vec![0]] {
                    if n == 0 && numel(&ishape) > 0 {
                        continue;
                    }
                    // negative indices count from the end
                    let idx: Vec<i64> = (0..numel(&ishape)).map(|_| rng.below(2 * n) as i64 - n as i64).collect();
                    for idt in [DType::I64, DType::I32] {
                        let ind = int_array(&idx, &ishape, idt);
                        for ax in [axis as isize, axis as isize - shape.len() as isize] {
                            let y = ct::take(&x, &ind, ax);
                            let oshape: Vec<usize> =
                                shape[..axis].iter().chain(&ishape).chain(&shape[axis + 1..]).copied().collect();
                            assert_eq!(y.shape(), &oshape[..]);
                            let got = y.to_f64_vec().unwrap();
                            let want: Vec<f64> = (0..numel(&oshape))
                                .map(|o| {
                                    let oi = unravel(o, &oshape);
                                    let k = idx[ravel(&oi[axis..axis + ishape.len()], &ishape)];
                                    let k = if k < 0 { k + n as i64 } else { k } as usize;
                                    let mut xi: Vec<usize> = oi[..axis].to_vec();
                                    xi.push(k);
                                    xi.extend_from_slice(&oi[axis + ishape.len()..]);
                                    data[ravel(&xi, shape)]
                                })
                                .collect();
                            assert_eq!(got, want, "take {shape:?} axis={ax} idx {ishape:?} strided={strided}");
                        }
                    }
                }
            }
        }
    }
    // u8 / u32 indices and integer data
    let x = Array::from_slice(&[10i32, 11, 12, 13], &[4]);
    assert_eq!(x.take(&Array::from_slice(&[3u8, 0, 3], &[3]), 0).to_vec::<i32>().unwrap(), vec![13, 10, 13]);
    assert_eq!(x.take(&Array::from_slice(&[1u32], &[1, 1]), 0).shape(), &[1, 1]);
}

#[test]
fn out_of_range_index_is_an_eval_error() {
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    for bad in [3i64, -4] {
        let y = x.take(&Array::from_slice(&[0i64, bad], &[2]), 0);
        let err = y.to_vec::<f32>().unwrap_err().to_string();
        assert!(err.contains(&format!("index {bad} is out of range for axis 0 of extent 3")), "{err}");
    }
    let y = x.scatter_add(&Array::from_slice(&[5i32], &[1]), &Array::from_slice(&[1.0f32], &[1]), 0);
    assert!(y.eval().unwrap_err().to_string().contains("index 5 is out of range"));
    let y = x.put_along_axis(&Array::from_slice(&[-9i32], &[1]), &Array::from_slice(&[1.0f32], &[1]), 0);
    assert!(y.eval().is_err());
    // an empty axis has no valid index
    let e = ct::zeros(&[0], DType::F32);
    assert!(e.take(&Array::from_slice(&[0i32], &[1]), 0).eval().is_err());
    assert_eq!(e.take(&Array::from_slice::<i32>(&[], &[0]), 0).shape(), &[0]);
}

#[test]
#[should_panic(expected = "cotangent::take: indices must have an integer dtype, got float32")]
fn float_indices_panic() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]);
    let _ = x.take(&x, 0);
}

/// Reference along-axis gather with numpy broadcasting of the non-axis extents.
fn ref_take_along(data: &[f64], shape: &[usize], idx: &[i64], ishape: &[usize], axis: usize) -> (Vec<usize>, Vec<f64>) {
    let oshape: Vec<usize> =
        (0..shape.len()).map(|i| if i == axis { ishape[i] } else { shape[i].max(ishape[i]) }).collect();
    let v = (0..numel(&oshape))
        .map(|o| {
            let oi = unravel(o, &oshape);
            let ii: Vec<usize> = oi.iter().zip(ishape).map(|(&i, &d)| if d == 1 { 0 } else { i }).collect();
            let k = idx[ravel(&ii, ishape)];
            let k = if k < 0 { k + shape[axis] as i64 } else { k } as usize;
            let mut xi: Vec<usize> = oi.iter().zip(shape).map(|(&i, &d)| if d == 1 { 0 } else { i }).collect();
            xi[axis] = k;
            data[ravel(&xi, shape)]
        })
        .collect();
    (oshape, v)
}

#[test]
fn take_along_axis_forward() {
    let mut rng = Lcg(9);
    let cases: &[(&[usize], &[usize], usize)] = &[
        (&[3, 4], &[3, 2], 1),
        (&[3, 4], &[5, 4], 0),
        (&[3, 4], &[1, 6], 1), // indices broadcast over axis 0
        (&[1, 4], &[3, 2], 1), // array broadcasts over axis 0
        (&[2, 3, 4], &[2, 3, 1], 2),
        (&[2, 3, 4], &[2, 0, 4], 1),
    ];
    for &(shape, ishape, axis) in cases {
        let data = rng.vec(numel(shape), -2.0, 2.0);
        let n = shape[axis] as i64;
        let idx: Vec<i64> = (0..numel(ishape)).map(|_| rng.below(2 * n as usize) as i64 - n).collect();
        let (oshape, want) = ref_take_along(&data, shape, &idx, ishape, axis);
        for strided in [false, true] {
            let x = make(&data, shape, DType::F32, strided);
            let ind = int_array(&idx, ishape, DType::I32);
            let y = ct::take_along_axis(&x, &ind, axis as isize - shape.len() as isize);
            assert_eq!(y.shape(), &oshape[..]);
            let wf: Vec<f64> = want.iter().map(|&v| v as f32 as f64).collect();
            assert_eq!(y.to_f64_vec().unwrap(), wf, "{shape:?} {ishape:?} axis {axis}");
        }
    }
    // argmax then take_along_axis gives the max
    let x = Array::from_slice(&[3.0f32, 9.0, 1.0, 4.0, 2.0, 8.0], &[2, 3]);
    let m = x.take_along_axis(&x.argmax(1, true), 1);
    assert_eq!(m.to_vec::<f32>().unwrap(), vec![9.0, 8.0]);
}

#[test]
fn put_and_scatter_along_axis_forward() {
    let mut rng = Lcg(10);
    let cases: &[(&[usize], &[usize], usize)] =
        &[(&[3, 4], &[3, 6], 1), (&[5, 2], &[7, 2], 0), (&[2, 3, 4], &[2, 3, 5], 2), (&[2, 3, 4], &[1, 3, 4], 0)];
    for &(shape, ishape, axis) in cases {
        let data = rng.vec(numel(shape), -2.0, 2.0);
        let n = shape[axis];
        let idx: Vec<i64> = (0..numel(ishape)).map(|_| rng.below(2 * n) as i64 - n as i64).collect();
        let vals = rng.vec(numel(ishape), -2.0, 2.0);
        // reference: walk the indices in row-major order
        let mut put = data.clone();
        let mut add = data.clone();
        let ishape_b: Vec<usize> = (0..shape.len()).map(|i| if i == axis { ishape[i] } else { shape[i] }).collect();
        for j in 0..numel(&ishape_b) {
            let ji = unravel(j, &ishape_b);
            let src: Vec<usize> = ji.iter().zip(ishape).map(|(&i, &d)| if d == 1 { 0 } else { i }).collect();
            let k = idx[ravel(&src, ishape)];
            let k = if k < 0 { k + n as i64 } else { k } as usize;
            let mut xi = ji.clone();
            xi[axis] = k;
            let o = ravel(&xi, shape);
            let v = vals[ravel(&src, ishape)];
            put[o] = v;
            add[o] += v;
        }
        for strided in [false, true] {
            let x = make(&data, shape, DType::F64, strided);
            let ind = int_array(&idx, ishape, DType::I64);
            let v = make(&vals, ishape, DType::F64, strided);
            let p = ct::put_along_axis(&x, &ind, &v, axis as isize);
            assert_eq!(p.shape(), shape);
            assert_eq!(p.to_vec::<f64>().unwrap(), put, "put {shape:?} {ishape:?}");
            let a = ct::scatter_add_along_axis(&x, &ind, &v, axis as isize);
            assert_close(&a.to_vec::<f64>().unwrap(), &add, 1e-12, &format!("scatter_add_along_axis {shape:?}"));
        }
    }
    // duplicates: put keeps the last, add accumulates; scalar values broadcast; dtype cast
    let x = ct::zeros(&[4], DType::I32);
    let ind = Array::from_slice(&[1i32, 3, 1, 1], &[4]);
    let v = Array::from_slice(&[5i32, 6, 7, 8], &[4]);
    assert_eq!(x.put_along_axis(&ind, &v, 0).to_vec::<i32>().unwrap(), vec![0, 8, 0, 6]);
    assert_eq!(x.scatter_add_along_axis(&ind, &v, 0).to_vec::<i32>().unwrap(), vec![0, 20, 0, 6]);
    let one = Array::scalar(1.5f64);
    assert_eq!(
        x.astype(DType::F32).scatter_add_along_axis(&ind, &one, -1).to_vec::<f32>().unwrap(),
        vec![0.0, 4.5, 0.0, 1.5]
    );
}

#[test]
fn scatter_add_is_the_adjoint_of_take() {
    let mut rng = Lcg(11);
    let shape = [3, 5, 2];
    let axis = 1;
    let ishape = [2, 4];
    let idx: Vec<i64> = (0..8).map(|_| rng.below(10) as i64 - 5).collect();
    let ushape = [3, 2, 4, 2];
    let upd = rng.vec(numel(&ushape), -2.0, 2.0);
    let base = rng.vec(numel(&shape), -2.0, 2.0);
    let mut want = base.clone();
    for (u, &v) in upd.iter().enumerate() {
        let ui = unravel(u, &ushape);
        let k = idx[ravel(&ui[1..3], &ishape)];
        let k = if k < 0 { k + 5 } else { k } as usize;
        want[ravel(&[ui[0], k, ui[3]], &shape)] += v;
    }
    let x = Array::from_slice(&base, &shape);
    let ind = Array::from_slice(&idx, &ishape);
    let y = ct::scatter_add(&x, &ind, &make(&upd, &ushape, DType::F64, true), axis);
    assert_close(&y.to_vec::<f64>().unwrap(), &want, 1e-12, "scatter_add");
    // <take(x), u> == <x, scatter_add(0, u)>
    let t = x.take(&ind, -2);
    let lhs = (&t * &Array::from_slice(&upd, &ushape)).sum_all().item::<f64>().unwrap();
    let s = ct::zeros(&shape, DType::F64).scatter_add(&ind, &Array::from_slice(&upd, &ushape), 1);
    let rhs = (&x * &s).sum_all().item::<f64>().unwrap();
    assert!((lhs - rhs).abs() < 1e-10, "{lhs} vs {rhs}");
}

#[test]
fn one_hot_forward() {
    let ind = Array::from_slice(&[0i32, 2, -1, 3, 1, 5], &[2, 3]);
    let h = ct::one_hot(&ind, 4, DType::F32);
    assert_eq!(h.shape(), &[2, 3, 4]);
    let got = h.to_vec::<f32>().unwrap();
    let idx = [0i64, 2, -1, 3, 1, 5];
    for (p, &k) in idx.iter().enumerate() {
        for c in 0..4 {
            assert_eq!(got[p * 4 + c], if k == c as i64 { 1.0 } else { 0.0 }, "position {p} class {c}");
        }
    }
    let b = ct::one_hot(&Array::from_slice(&[2u8], &[1]), 3, DType::Bool);
    assert_eq!(b.to_vec::<bool>().unwrap(), vec![false, false, true]);
}

// ----- transforms: VJP/JVP against central finite differences (f64), vmap against loops -------

#[test]
fn reduction_grads() {
    let mut rng = Lcg(12);
    let x = rng.array(&[3, 4, 2], -2.0, 2.0);
    let xt = x.transpose(&[2, 0, 1]); // a strided input of shape [2, 3, 4]
    let pos = rng.array(&[3, 5], 0.5, 1.5);
    check_grads("logsumexp[-1]", |x| x[0].logsumexp(&[-1], false), &[x.clone()]);
    check_grads("logsumexp[0,2] keepdims", |x| x[0].logsumexp(&[0, 2], true), &[xt.clone()]);
    check_grads("logsumexp_all", |x| x[0].logsumexp_all(), &[x.clone()]);
    check_grads("softmax[-1]", |x| x[0].softmax(&[-1]), &[x.clone()]);
    check_grads("softmax[0,1] strided", |x| x[0].softmax(&[0, 1]), &[xt.clone()]);
    check_grads("var ddof=1", |x| x[0].var(&[1], false, 1), &[x.clone()]);
    check_grads("std[0,2]", |x| x[0].std(&[0, -1], true, 0), &[x.clone()]);
    for reverse in [false, true] {
        for inclusive in [true, false] {
            let n = format!("reverse={reverse} inclusive={inclusive}");
            check_grads(&format!("cumsum {n}"), move |x| x[0].cumsum_opts(1, reverse, inclusive), &[x.clone()]);
            check_grads(
                &format!("cumsum strided {n}"),
                move |x| x[0].cumsum_opts(-1, reverse, inclusive),
                &[xt.clone()],
            );
            check_grads(&format!("cumprod {n}"), move |x| x[0].cumprod_opts(-1, reverse, inclusive), &[pos.clone()]);
            check_grads(
                &format!("cumprod axis0 {n}"),
                move |x| x[0].cumprod_opts(0, reverse, inclusive),
                &[pos.clone()],
            );
        }
    }
    // argmax is a constant: the gradient of x[argmax] is one-hot at the argmax
    let g = ct::grad(|x: &[Array]| x[0].take_along_axis(&x[0].argmax(1, true), 1).sum_all())(&[x.clone()]).unwrap();
    let am = x.argmax(1, false);
    let want = ct::one_hot(&am, 4, DType::F64).moveaxis(-1, 1);
    assert_eq!(vals(&g[0]), vals(&want));
    // second order: the softmax VJP rule is itself differentiable
    let w = rng.array(&[3, 4, 2], -1.0, 1.0);
    check_grads(
        "grad of softmax",
        move |x| {
            ct::grad({
                let w = w.clone();
                move |x: &[Array]| (x[0].softmax(&[1]) * &w).sum_all()
            })(x)
            .unwrap()
            .remove(0)
        },
        &[x.clone()],
    );
}

#[test]
fn index_grads() {
    let mut rng = Lcg(13);
    let x = rng.array(&[4, 5], -1.0, 1.0);
    let idx = Array::from_slice(&[0i32, -1, 3, 3, 1, 0], &[2, 3]); // duplicates accumulate
    let i2 = idx.clone();
    check_grads("take axis 1", move |x| x[0].take(&i2, 1), &[x.clone()]);
    let i2 = idx.clone();
    check_grads("take axis 0 strided", move |x| x[0].t().take(&i2, 0), &[x.clone()]);
    let ia = Array::from_slice(&[4i64, 0, 0, 2, 1, 1, -1, 3], &[4, 2]);
    let i2 = ia.clone();
    check_grads("take_along_axis", move |x| x[0].take_along_axis(&i2, 1), &[x.clone()]);
    let ib = Array::from_slice(&[2i64, 0, 4], &[1, 3]); // broadcast over axis 0
    check_grads("take_along_axis broadcast", move |x| x[0].take_along_axis(&ib, -1), &[x.clone()]);
    // one index per row (a cross-entropy's picked logits): the cotangent lands on the picked
    // element, negative indices count from the end, for every index dtype and along either axis
    let c = rng.array(&[4, 1], -1.0, 1.0);
    let picks = [1i64, -1, 4, -5];
    for dtype in [DType::I32, DType::I64, DType::U32, DType::U8] {
        let signed = matches!(dtype, DType::I32 | DType::I64);
        let picks: Vec<i64> = picks.iter().map(|&p| if signed || p >= 0 { p } else { p + 5 }).collect();
        let idx = Array::from_slice(&picks, &[4, 1]).astype(dtype);
        let (_, g) = ct::vjp(|a: &[Array]| a[0].take_along_axis(&idx, 1), &[x.clone()], &[c.clone()]).unwrap();
        let cv = vals(&c);
        let mut want = vec![0.0; 20];
        for (r, &p) in picks.iter().enumerate() {
            want[r * 5 + p.rem_euclid(5) as usize] = cv[r];
        }
        assert_eq!(vals(&g[0]), want, "{dtype}");
        let i2 = idx.clone();
        check_grads(
            &format!("take_along_axis one per row {dtype}"),
            move |x| x[0].take_along_axis(&i2, 1),
            &[x.clone()],
        );
        let i2 = idx.reshape(&[1, 4]);
        check_grads(
            &format!("take_along_axis one per column {dtype}"),
            move |x| x[0].take_along_axis(&i2, 0),
            &[x.t()],
        );
    }
    // an axis longer than the index dtype's range: positions past 255 must not match a u8 index
    let wide = rng.array(&[2, 300], -1.0, 1.0);
    let wide_idx = Array::from_slice(&[200u8, 255], &[2, 1]);
    let (_, g) = ct::vjp(
        |a: &[Array]| a[0].take_along_axis(&wide_idx, 1),
        &[wide],
        &[Array::from_slice(&[1.5f64, -2.0], &[2, 1])],
    )
    .unwrap();
    let mut want = vec![0.0; 600];
    (want[200], want[300 + 255]) = (1.5, -2.0);
    assert_eq!(vals(&g[0]), want);
    // batched: each batch member picks its own elements
    let xs = rng.array(&[3, 4, 5], -1.0, 1.0);
    let ids = Array::from_slice(&[0i32, 1, 2, 3, 4, -1, -2, -3, 0, 0, 4, 4], &[3, 4, 1]);
    let per_member = ct::vmap(
        |a: &[Array]| {
            ct::grad(|b: &[Array]| (b[0].take_along_axis(&b[1], 1).square()).sum_all())(&[a[0].clone(), a[1].clone()])
                .unwrap()
                .remove(0)
        },
        &[Some(0), Some(0)],
        &[Some(0)],
    )(&[xs.clone(), ids.clone()])
    .unwrap();
    for b in 0..3 {
        let b = b as isize;
        let xb = xs.slice(&[b, 0, 0], &[b + 1, 4, 5], &[1, 1, 1]).squeeze(&[0]);
        let ib = ids.slice(&[b, 0, 0], &[b + 1, 4, 1], &[1, 1, 1]).squeeze(&[0]);
        let one = ct::grad(move |a: &[Array]| (a[0].take_along_axis(&ib, 1).square()).sum_all())(&[xb]).unwrap();
        let got = per_member[0].slice(&[b, 0, 0], &[b + 1, 4, 5], &[1, 1, 1]).squeeze(&[0]);
        assert_eq!(vals(&got), vals(&one[0]), "batch member {b}");
    }
    // put with duplicates: only the last writer of a position gets gradient
    let v = rng.array(&[4, 2], -1.0, 1.0);
    let ip = Array::from_slice(&[1i64, 1, 0, 3, 2, 2, 4, 0], &[4, 2]);
    let i2 = ip.clone();
    check_grads("put_along_axis", move |a| a[0].put_along_axis(&i2, &a[1], 1), &[x.clone(), v.clone()]);
    let i2 = ip.clone();
    check_grads("scatter_add_along_axis", move |a| a[0].scatter_add_along_axis(&i2, &a[1], 1), &[x.clone(), v.clone()]);
    let u = rng.array(&[2, 3, 5], -1.0, 1.0);
    check_grads("scatter_add", move |a| a[0].scatter_add(&idx, &a[1], 0), &[x.clone(), u]);
    // the put VJP for duplicates, explicitly: value 0 at position 1 is overwritten by value 1
    let (_, g) = ct::vjp(
        |a: &[Array]| a[0].put_along_axis(&Array::from_slice(&[1i32, 1], &[2]), &a[1], 0),
        &[ct::zeros(&[3], DType::F64), ct::zeros(&[2], DType::F64)],
        &[Array::from_slice(&[1.0f64, 2.0, 3.0], &[3])],
    )
    .unwrap();
    assert_eq!(vals(&g[0]), vec![1.0, 0.0, 3.0]);
    assert_eq!(vals(&g[1]), vec![0.0, 2.0]);
}

/// `f` vmapped with `in_axes` equals `f` applied to each batch element (outputs stacked on 0).
fn check_vmap(
    name: &str,
    f: impl Fn(&[Array]) -> Array + Send + Sync + Clone + 'static,
    xs: &[Array],
    in_axes: &[Option<isize>],
) {
    let batched = ct::vmap(f.clone(), in_axes, &[Some(0)]);
    let out = batched(xs).unwrap().remove(0);
    let b = xs.iter().zip(in_axes).find_map(|(x, a)| a.map(|a| x.dim(a))).unwrap();
    assert_eq!(out.shape()[0], b, "{name}: batch size");
    let got = vals(&out);
    let per = got.len() / b.max(1);
    for k in 0..b {
        let args: Vec<Array> = xs
            .iter()
            .zip(in_axes)
            .map(|(x, a)| match a {
                Some(a) => x.take(&Array::scalar(k as i32), *a),
                None => x.clone(),
            })
            .collect();
        let r = f(&args);
        assert_eq!(r.shape(), &out.shape()[1..], "{name}: element shape");
        assert_close(&got[k * per..(k + 1) * per], &vals(&r), 1e-12, &format!("{name}: batch {k}"));
    }
}

#[test]
fn vmap_rules_match_loops() {
    let mut rng = Lcg(14);
    let x = rng.array(&[3, 4, 5], -2.0, 2.0); // batch on axis 1 (size 4)
    let b1 = [Some(1isize)];
    check_vmap("logsumexp", |x| x[0].logsumexp(&[-1], false), &[x.clone()], &b1);
    check_vmap("logsumexp two axes", |x| x[0].logsumexp(&[0, 1], true), &[x.clone()], &b1);
    check_vmap("softmax", |x| x[0].softmax(&[0]), &[x.clone()], &b1);
    check_vmap("cumsum", |x| x[0].cumsum_opts(-1, true, false), &[x.clone()], &b1);
    check_vmap("cumprod", |x| x[0].cumprod(0), &[x.clone()], &b1);
    check_vmap("argmax", |x| x[0].argmax(-1, false), &[x.clone()], &b1);
    check_vmap("argmin", |x| x[0].argmin(0, true), &[x.clone()], &b1);
    check_vmap("all", |x| x[0].greater(0.0).all(&[0], false), &[x.clone()], &b1);
    check_vmap("any", |x| x[0].greater(1.5).any(&[-1], true), &[x.clone()], &b1);
    check_vmap("var", |x| x[0].var(&[0], false, 1), &[x.clone()], &b1);
    // indexing: batched data, batched indices, or both
    let idx = Array::from_slice(&[0i32, 4, -1, 2, 2, 1], &[2, 3]);
    let bidx = Array::from_slice(&[0i64, 1, 2, 4, 3, 3, 0, 0, 1, -2, 4, 4], &[4, 3]); // batch on 0
    check_vmap("take data", move |a| a[0].take(&a[1], -1), &[x.clone(), idx.clone()], &[Some(1), None]);
    check_vmap("take indices", move |a| a[0].take(&a[1], 2), &[x.clone(), bidx.clone()], &[None, Some(0)]);
    check_vmap("take both", move |a| a[0].take(&a[1], 1), &[x.clone(), bidx.clone()], &[Some(1), Some(0)]);
    let ia = Array::from_slice(&[0i32, 4, 1, 1, 3, 2], &[3, 2]); // along axis 1 of a [3, 5] slice
    let v = rng.array(&[3, 4, 2], -1.0, 1.0); // batch on axis 1
    check_vmap("take_along_axis", move |a| a[0].take_along_axis(&a[1], 1), &[x.clone(), ia.clone()], &[Some(1), None]);
    check_vmap(
        "put_along_axis values batched",
        move |a| a[0].put_along_axis(&a[1], &a[2], 1),
        &[ct::zeros(&[3, 5], DType::F64), ia.clone(), v.clone()],
        &[None, None, Some(1)],
    );
    check_vmap(
        "scatter_add_along_axis all batched",
        move |a| a[0].scatter_add_along_axis(&a[1], &a[2], -1),
        &[x.clone(), ia.expand_dims(&[0]).broadcast_to(&[4, 3, 2]), v.clone()],
        &[Some(1), Some(0), Some(1)],
    );
    let u = rng.array(&[4, 3, 2, 3], -1.0, 1.0);
    check_vmap(
        "scatter_add",
        move |a| a[0].scatter_add(&a[1], &a[2], 1),
        &[ct::zeros(&[3, 5], DType::F64), idx.clone(), u.clone()],
        &[None, None, Some(0)],
    );
    // vmap of grad through a gather
    let g = ct::vmap(ct::grad(|a: &[Array]| a[0].logsumexp_all()), &[Some(0)], &[Some(0)]);
    let xs = rng.array(&[3, 6], -1.0, 1.0);
    assert_close(&vals(&g(&[xs.clone()]).unwrap()[0]), &vals(&xs.softmax(&[-1])), 1e-12, "vmap(grad(logsumexp))");
}

// ----- var and std with ddof >= n --------------------------------------------------------------

#[test]
fn var_with_ddof_at_least_n_is_inf_or_nan() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]);
    assert_eq!(x.var_all(3).item::<f32>().unwrap(), f32::INFINITY);
    assert_eq!(x.var_all(2).item::<f32>().unwrap(), f32::INFINITY);
    assert_eq!(x.std_all(3).item::<f32>().unwrap(), f32::INFINITY);
    assert_eq!(x.var_all(1).item::<f32>().unwrap(), 0.5);
    // no deviation at all: 0 / 0
    assert!(Array::from_slice(&[4.0f64], &[1]).var_all(1).item::<f64>().unwrap().is_nan());
    assert!(Array::from_slice(&[1.0f32, 1.0], &[2]).var_all(5).item::<f32>().unwrap().is_nan());
    // per row, and for integers (computed in f32)
    let m = Array::from_slice(&[1i32, 2, 3, 3], &[2, 2]);
    let v = ct::var(&m, &[1], false, 2).to_vec::<f32>().unwrap();
    assert_eq!(v[0], f32::INFINITY);
    assert!(v[1].is_nan());
    assert!(
        ct::var(&m, &[1], false, 7).to_vec::<f32>().unwrap().iter().all(|v| v.is_nan() || *v >= 0.0),
        "never negative"
    );
}

// ----- exact prod and cumprod derivatives where the input has zeros ------------------------------

/// Inputs with no zero, one zero and two zeros (as f64 arrays of `shape`, zeros at `at`).
fn with_zeros(shape: &[usize], at: &[usize]) -> Array {
    let mut rng = Lcg(21);
    let n = numel(shape);
    let mut v: Vec<f64> =
        (0..n).map(|_| if rng.next() < 0.5 { -rng.uniform(0.5, 1.5) } else { rng.uniform(0.5, 1.5) }).collect();
    for &i in at {
        v[i] = 0.0;
    }
    Array::from_vec(v, shape)
}

#[test]
fn prod_gradients_are_exact_at_zeros() {
    // x = [2, 0, 3]: d prod = [0, 6, 0]; [0, 0, 3]: all zero
    let g = ct::grad(|x: &[Array]| x[0].prod_all());
    let x = Array::from_slice(&[2.0f64, 0.0, 3.0], &[3]);
    assert_eq!(vals(&g(&[x]).unwrap()[0]), vec![0.0, 6.0, 0.0]);
    let x = Array::from_slice(&[0.0f64, 0.0, 3.0], &[3]);
    assert_eq!(vals(&g(&[x.clone()]).unwrap()[0]), vec![0.0, 0.0, 0.0]);
    // second order through the rule: column 1 of the Hessian of x0·x1·x2 at [0, 0, 3] is [3, 0, 0]
    let e1 = Array::from_slice(&[0.0f64, 1.0, 0.0], &[3]);
    let (_, hv) = ct::jvp(g.clone(), &[x], &[e1]).unwrap();
    assert_eq!(vals(&hv[0]), vec![3.0, 0.0, 0.0]);
    // against finite differences (prod is multilinear, so they are exact up to rounding), over
    // one axis, two axes and all, with no, one and two zeros in a group
    for at in [vec![], vec![5], vec![5, 7], vec![0, 5, 13, 22]] {
        let x = with_zeros(&[3, 4, 2], &at);
        let w = format!("zeros at {at:?}");
        check_grads(&format!("prod[1] {w}"), |x| x[0].prod(&[1], false), &[x.clone()]);
        check_grads(&format!("prod[0, 2] {w}"), |x| x[0].prod(&[0, 2], true), &[x.clone()]);
        check_grads(&format!("prod_all {w}"), |x| x[0].prod_all(), &[x.clone()]);
        let xt = x.transpose(&[2, 0, 1]);
        check_grads(&format!("prod[-1] strided {w}"), |x| x[0].prod(&[-1], false), &[xt]);
        let gv = vals(&g(&[x.reshape(&[-1])]).unwrap()[0]);
        assert!(gv.iter().all(|v| v.is_finite()), "prod_all gradient {w}: {gv:?}");
    }
}

#[test]
fn cumprod_gradients_are_exact_at_zeros() {
    // [2, 0, 3, 4] inclusive forward: out = [2, 0, 0, 0]; the gradient of sum(out) is
    // [1, 2 + 2·3 + 2·3·4, 0, 0] = [1, 32, 0, 0]
    let g = ct::grad(|x: &[Array]| x[0].cumprod(0).sum_all());
    let x = Array::from_slice(&[2.0f64, 0.0, 3.0, 4.0], &[4]);
    assert_eq!(vals(&g(&[x]).unwrap()[0]), vec![1.0, 32.0, 0.0, 0.0]);
    let x = Array::from_slice(&[2.0f64, 0.0, 3.0, 0.0, 5.0], &[5]);
    assert_eq!(vals(&g(&[x]).unwrap()[0]), vec![1.0, 8.0, 0.0, 0.0, 0.0]);
    for at in [vec![], vec![6], vec![6, 8], vec![1, 6, 7, 13]] {
        let x = with_zeros(&[3, 5], &at);
        for reverse in [false, true] {
            for inclusive in [true, false] {
                let n = format!("reverse={reverse} inclusive={inclusive} zeros at {at:?}");
                check_grads(&format!("cumprod {n}"), move |x| x[0].cumprod_opts(-1, reverse, inclusive), &[x.clone()]);
                check_grads(
                    &format!("cumprod axis0 {n}"),
                    move |x| x[0].cumprod_opts(0, reverse, inclusive),
                    &[x.clone()],
                );
            }
        }
    }
    // second order: d²/dx1dx3 of sum(cumprod([2, 0, 3, 0, 5])) = 2·3 + 2·3·5 = 36 (terms of
    // outputs 3 and 4), through the rule's own scans
    let x = Array::from_slice(&[2.0f64, 0.0, 3.0, 0.0, 5.0], &[5]);
    let e3 = Array::from_slice(&[0.0f64, 0.0, 0.0, 1.0, 0.0], &[5]);
    let (_, hv) = ct::jvp(g, &[x], &[e3]).unwrap();
    let hv = vals(&hv[0]);
    assert_eq!(hv[1], 36.0, "{hv:?}");
    assert!(hv.iter().all(|v| v.is_finite()), "{hv:?}");
}
