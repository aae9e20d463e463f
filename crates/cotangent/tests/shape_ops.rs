//! Shape ops: forward values against reference index arithmetic (f64 loops written here),
//! views (strides/offsets through chains of views), zero-size arrays, several dtypes, panics,
//! and property tests.
mod common;

use common::{check_grads, Lcg};
use cotangent::{self as ct, Array, DType};
use half::f16;
use proptest::prelude::*;

/// One axis of a numpy slice: `(start, stop, step)`, `None` for an open end.
type AxisSlice = (Option<isize>, Option<isize>, isize);

// ----- reference machinery -----------------------------------------------------------------------

/// A reference n-d array: row-major f64 values and a shape.
#[derive(Clone, Debug, PartialEq)]
struct Nd {
    v: Vec<f64>,
    shape: Vec<usize>,
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

/// All multi-indices of `shape` in row-major order.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n = numel(shape);
    let mut out = Vec::with_capacity(n);
    for mut k in 0..n {
        let mut idx = vec![0; shape.len()];
        for a in (0..shape.len()).rev() {
            idx[a] = k % shape[a];
            k /= shape[a];
        }
        out.push(idx);
    }
    out
}

impl Nd {
    fn new(shape: &[usize], f: impl Fn(usize) -> f64) -> Nd {
        Nd { v: (0..numel(shape)).map(f).collect(), shape: shape.to_vec() }
    }
    fn at(&self, idx: &[usize]) -> f64 {
        let mut k = 0;
        for (a, &i) in idx.iter().enumerate() {
            assert!(i < self.shape[a]);
            k = k * self.shape[a] + i;
        }
        self.v[k]
    }
    /// Build an array of `shape` whose element at `idx` is `f(idx)`.
    fn build(shape: &[usize], f: impl Fn(&[usize]) -> f64) -> Nd {
        Nd { v: indices(shape).iter().map(|i| f(i)).collect(), shape: shape.to_vec() }
    }
    fn array_f64(&self) -> Array {
        Array::from_slice(&self.v, &self.shape)
    }
    fn array(&self, dtype: DType) -> Array {
        self.array_f64().astype(dtype)
    }
}

fn read(a: &Array) -> Nd {
    Nd { v: a.to_f64_vec().unwrap(), shape: a.shape().to_vec() }
}

#[track_caller]
fn check(a: &Array, want: &Nd) {
    assert_eq!(a.shape(), want.shape.as_slice(), "shape");
    let got = a.to_f64_vec().unwrap();
    assert_eq!(got, want.v, "values of shape {:?}", want.shape);
}

/// numpy's index list for `start:stop:step` on an axis of extent `n` (written independently of
/// the library: walk the clamped range).
fn ref_range(n: usize, start: Option<isize>, stop: Option<isize>, step: isize) -> Vec<usize> {
    let n = n as isize;
    let wrap = |v: isize| if v < 0 { v + n } else { v };
    let mut out = vec![];
    if step > 0 {
        let lo = start.map(wrap).unwrap_or(0).clamp(0, n);
        let hi = stop.map(wrap).unwrap_or(n).clamp(0, n);
        let mut i = lo;
        while i < hi {
            out.push(i as usize);
            i += step;
        }
    } else {
        let lo = start.map(wrap).unwrap_or(n - 1).clamp(-1, n - 1);
        let hi = stop.map(wrap).unwrap_or(-1).clamp(-1, n - 1);
        let mut i = lo;
        while i > hi {
            out.push(i as usize);
            i += step;
        }
    }
    out
}

fn ref_slice(x: &Nd, spec: &[AxisSlice]) -> Nd {
    let lists: Vec<Vec<usize>> = (0..x.shape.len())
        .map(|a| match spec.get(a) {
            Some(&(s, e, st)) => ref_range(x.shape[a], s, e, st),
            None => (0..x.shape[a]).collect(),
        })
        .collect();
    let shape: Vec<usize> = lists.iter().map(|l| l.len()).collect();
    Nd::build(&shape, |idx| {
        let src: Vec<usize> = idx.iter().enumerate().map(|(a, &i)| lists[a][i]).collect();
        x.at(&src)
    })
}

fn ref_transpose(x: &Nd, perm: &[usize]) -> Nd {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    Nd::build(&shape, |idx| {
        let mut src = vec![0; idx.len()];
        for (i, &p) in perm.iter().enumerate() {
            src[p] = idx[i];
        }
        x.at(&src)
    })
}

fn ref_flip(x: &Nd, axes: &[usize]) -> Nd {
    Nd::build(&x.shape, |idx| {
        let src: Vec<usize> =
            idx.iter().enumerate().map(|(a, &i)| if axes.contains(&a) { x.shape[a] - 1 - i } else { i }).collect();
        x.at(&src)
    })
}

fn ref_concat(xs: &[Nd], axis: usize) -> Nd {
    let mut shape = xs[0].shape.clone();
    shape[axis] = xs.iter().map(|x| x.shape[axis]).sum();
    Nd::build(&shape, |idx| {
        let mut i = idx[axis];
        for x in xs {
            if i < x.shape[axis] {
                let mut src = idx.to_vec();
                src[axis] = i;
                return x.at(&src);
            }
            i -= x.shape[axis];
        }
        unreachable!()
    })
}

fn ref_pad(x: &Nd, w: &[(usize, usize)], value: f64) -> Nd {
    let shape: Vec<usize> = x.shape.iter().zip(w).map(|(&d, &(b, a))| d + b + a).collect();
    Nd::build(&shape, |idx| {
        let mut src = vec![];
        for (a, &i) in idx.iter().enumerate() {
            if i < w[a].0 || i >= w[a].0 + x.shape[a] {
                return value;
            }
            src.push(i - w[a].0);
        }
        x.at(&src)
    })
}

fn ref_tile(x: &Nd, reps: &[usize]) -> Nd {
    let nd = x.shape.len().max(reps.len());
    let mut xs = vec![1; nd - x.shape.len()];
    xs.extend_from_slice(&x.shape);
    let mut rs = vec![1; nd - reps.len()];
    rs.extend_from_slice(reps);
    let xr = Nd { v: x.v.clone(), shape: xs.clone() };
    let shape: Vec<usize> = xs.iter().zip(&rs).map(|(&d, &r)| d * r).collect();
    Nd::build(&shape, |idx| {
        let src: Vec<usize> = idx.iter().zip(&xs).map(|(&i, &d)| i % d).collect();
        xr.at(&src)
    })
}

fn ref_repeat(x: &Nd, r: usize, axis: usize) -> Nd {
    let mut shape = x.shape.clone();
    shape[axis] *= r;
    Nd::build(&shape, |idx| {
        let mut src = idx.to_vec();
        src[axis] /= r;
        x.at(&src)
    })
}

fn iota(shape: &[usize]) -> Nd {
    Nd::new(shape, |i| i as f64 * 0.5 - 3.0)
}

// ----- slice ---------------------------------------------------------------------------------------

const O: Option<isize> = None;

#[test]
fn slice_matches_reference() {
    let x = iota(&[4, 5, 6]);
    let a = x.array_f64();
    let cases: Vec<Vec<AxisSlice>> = vec![
        vec![(Some(1), Some(3), 1)],
        vec![(Some(-3), Some(-1), 1), (Some(0), Some(5), 2)],
        vec![(O, O, -1), (O, O, -2), (Some(4), Some(0), -3)],
        vec![(Some(10), Some(-10), -1), (Some(-10), Some(10), 3), (Some(-2), O, 1)],
        vec![(Some(3), Some(1), 1)],  // empty
        vec![(Some(0), Some(0), -1)], // empty
        vec![(Some(-100), Some(100), 1), (Some(100), Some(-100), -2), (Some(5), Some(-7), -4)],
        vec![(Some(2), Some(3), 1), (Some(4), Some(3), -1), (Some(5), Some(4), -1)],
    ];
    for spec in cases {
        let want = ref_slice(&x, &spec);
        // via slice() with isize::MIN / MAX as open ends
        let starts: Vec<isize> =
            spec.iter().map(|&(s, _, st)| s.unwrap_or(if st > 0 { isize::MIN } else { isize::MAX })).collect();
        let stops: Vec<isize> =
            spec.iter().map(|&(_, e, st)| e.unwrap_or(if st > 0 { isize::MAX } else { isize::MIN })).collect();
        let steps: Vec<isize> = spec.iter().map(|&(_, _, st)| st).collect();
        check(&a.slice(&starts, &stops, &steps), &want);
        check(&ct::slice(&a, &starts, &stops, &steps), &want);
        // via slice_axis chains (one axis at a time)
        let mut y = a.clone();
        for (ax, &(s, e, st)) in spec.iter().enumerate() {
            y = y.slice_axis(ax as isize, s, e, st);
        }
        check(&y, &want);
    }
}

#[test]
fn slice_axis_negative_axis_and_defaults() {
    let x = iota(&[3, 4]);
    let a = x.array_f64();
    check(&a.slice_axis(-1, O, O, -1), &ref_flip(&x, &[1]));
    check(&ct::slice_axis(&a, -2, Some(1), O, 1), &ref_slice(&x, &[(Some(1), O, 1)]));
    check(&a.slice_axis(1, O, O, 1), &x);
    // steps may be omitted; fewer axes than ndim slice the leading ones
    check(&a.slice(&[1], &[3], &[]), &ref_slice(&x, &[(Some(1), Some(3), 1)]));
}

#[test]
fn slice_dtypes() {
    let x = Nd::new(&[3, 4], |i| (i as f64) - 5.0);
    let spec = [(Some(-1), O, -1), (Some(1), O, 2)];
    let want = ref_slice(&x, &spec);
    let (st, sp, sd) = (&[-1, 1][..], &[isize::MIN, isize::MAX][..], &[-1, 2][..]);
    // i32
    let a = Array::from_vec(x.v.iter().map(|&v| v as i32).collect::<Vec<_>>(), &x.shape);
    let got = a.slice(st, sp, sd).to_vec::<i32>().unwrap();
    assert_eq!(got, want.v.iter().map(|&v| v as i32).collect::<Vec<_>>());
    // f16
    let a = Array::from_vec(x.v.iter().map(|&v| f16::from_f64(v)).collect::<Vec<_>>(), &x.shape);
    let got = a.slice(st, sp, sd).to_vec::<f16>().unwrap();
    assert_eq!(got, want.v.iter().map(|&v| f16::from_f64(v)).collect::<Vec<_>>());
    // bool
    let a = Array::from_vec(x.v.iter().map(|&v| v > -1.5).collect::<Vec<_>>(), &x.shape);
    let got = a.slice(st, sp, sd).to_vec::<bool>().unwrap();
    assert_eq!(got, want.v.iter().map(|&v| v > -1.5).collect::<Vec<_>>());
    // f32
    let a = x.array(DType::F32);
    let got = a.slice(st, sp, sd).to_vec::<f32>().unwrap();
    assert_eq!(got, want.v.iter().map(|&v| v as f32).collect::<Vec<_>>());
}

#[test]
fn chained_views_keep_strides_and_offsets() {
    let x = iota(&[3, 4, 5]);
    let a = x.array_f64();
    // flip of slice of transpose
    let t = ref_transpose(&x, &[2, 0, 1]);
    let s = ref_slice(&t, &[(Some(1), Some(5), 2), (O, O, -1), (Some(1), O, 1)]);
    let want = ref_flip(&s, &[0, 2]);
    let got =
        a.transpose(&[2, 0, 1]).slice(&[1, isize::MAX, 1], &[5, isize::MIN, isize::MAX], &[2, -1, 1]).flip(&[0, -1]);
    check(&got, &want);
    // ... then reshape (copies a non-contiguous view), broadcast against it, reduce it
    check(&got.reshape(&[-1]), &Nd { v: want.v.clone(), shape: vec![want.v.len()] });
    let sum: f64 = want.v.iter().sum();
    assert!((got.sum_all().item::<f64>().unwrap() - sum).abs() < 1e-9);
    let twice = (&got + &got).to_f64_vec().unwrap();
    assert_eq!(twice, want.v.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
    // slice of slice of flip, then transpose back
    let f = ref_flip(&x, &[1]);
    let s1 = ref_slice(&f, &[(Some(-1), O, -2), (Some(1), Some(-1), 1), (O, O, -2)]);
    let s2 = ref_slice(&s1, &[(O, O, -1), (Some(1), O, 1), (Some(1), O, 1)]);
    let got = a.flip(&[1]).slice(&[-1, 1, isize::MAX], &[isize::MIN, -1, isize::MIN], &[-2, 1, -2]).slice(
        &[isize::MAX, 1, 1],
        &[isize::MIN, isize::MAX, isize::MAX],
        &[-1, 1, 1],
    );
    check(&got, &s2);
    check(&got.transpose(&[]), &ref_transpose(&s2, &[2, 1, 0]));
    // a contiguous leading slice reshapes as a view with the right offset
    let rows = a.slice(&[1], &[3], &[]);
    check(&rows.reshape(&[-1]), &Nd { v: ref_slice(&x, &[(Some(1), Some(3), 1)]).v, shape: vec![40] });
    // views of a broadcast (zero strides)
    let b = Array::from_slice(&[1.0f64, 2.0, 3.0], &[3]).broadcast_to(&[4, 3]);
    let bx = Nd::build(&[4, 3], |i| (i[1] + 1) as f64);
    check(&b.slice(&[3, 2], &[0, isize::MIN], &[-2, -1]), &ref_slice(&bx, &[(Some(3), Some(0), -2), (Some(2), O, -1)]));
}

#[test]
fn flip_matches_reference() {
    let x = iota(&[2, 3, 4]);
    let a = x.array_f64();
    check(&a.flip(&[]), &ref_flip(&x, &[0, 1, 2]));
    check(&ct::flip(&a, &[1]), &ref_flip(&x, &[1]));
    check(&a.flip(&[-1, 0]), &ref_flip(&x, &[0, 2]));
    check(&a.flip(&[1]).flip(&[1]), &x);
    let i = Array::from_slice(&[1i32, 2, 3], &[3]);
    assert_eq!(i.flip(&[0]).to_vec::<i32>().unwrap(), vec![3, 2, 1]);
}

// ----- concatenate / stack / split -----------------------------------------------------------------

#[test]
fn concatenate_matches_reference() {
    let xs = [iota(&[2, 3, 4]), Nd::new(&[2, 1, 4], |i| 100.0 + i as f64), Nd::new(&[2, 2, 4], |i| -(i as f64))];
    let arrs: Vec<Array> = xs.iter().map(|x| x.array_f64()).collect();
    check(&ct::concatenate(&arrs, 1), &ref_concat(&xs, 1));
    check(&Array::concatenate(&arrs, -2), &ref_concat(&xs, 1));
    // along axis 0 and 2, with strided inputs
    let a = iota(&[3, 2]);
    let b = Nd::new(&[2, 2], |i| 10.0 + i as f64);
    let at = a.array_f64().t(); // [2, 3] view
    let bt = b.array_f64().flip(&[0]); // [2, 2] view
    let want = ref_concat(&[ref_transpose(&a, &[1, 0]), ref_flip(&b, &[0])], 1);
    check(&ct::concatenate(&[at.clone(), bt.clone()], -1), &want);
    check(&ct::concatenate(&[at], 0), &ref_transpose(&a, &[1, 0]));
}

#[test]
fn concatenate_promotes_dtypes() {
    let a = Array::from_slice(&[1i32, 2], &[2]);
    let b = Array::from_slice(&[true, false], &[2]);
    let c = ct::concatenate(&[a.clone(), b.clone()], 0);
    assert_eq!(c.dtype(), DType::I32);
    assert_eq!(c.to_vec::<i32>().unwrap(), vec![1, 2, 1, 0]);
    let f = Array::from_slice(&[f16::from_f32(0.5)], &[1]);
    let d = ct::concatenate(&[f, b.clone(), a.clone()], 0);
    assert_eq!(d.dtype(), DType::F16.promote(DType::I32));
    assert_eq!(d.to_f64_vec().unwrap(), vec![0.5, 1.0, 0.0, 1.0, 2.0]);
    let g = ct::concatenate(&[b.clone(), b], 0);
    assert_eq!(g.to_vec::<bool>().unwrap(), vec![true, false, true, false]);
}

#[test]
fn stack_matches_reference() {
    let xs = [iota(&[2, 3]), Nd::new(&[2, 3], |i| i as f64 * 7.0)];
    let arrs: Vec<Array> = xs.iter().map(|x| x.array_f64()).collect();
    for axis in [0isize, 1, 2, -1, -3] {
        let a = if axis < 0 { (axis + 3) as usize } else { axis as usize };
        let want = Nd::build(
            &{
                let mut s = vec![2, 3];
                s.insert(a, 2);
                s
            },
            |idx| {
                let mut src = idx.to_vec();
                let k = src.remove(a);
                xs[k].at(&src)
            },
        );
        check(&ct::stack(&arrs, axis), &want);
        check(&Array::stack(&arrs, axis), &want);
    }
    // stacking scalars gives a vector
    let s = ct::stack(&[Array::scalar(1.0f32), Array::scalar(2.0f32)], 0);
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
}

#[test]
fn split_sections_and_indices() {
    let x = iota(&[6, 4]);
    let a = x.array_f64();
    let parts = a.split(3usize, 0);
    assert_eq!(parts.len(), 3);
    for (k, p) in parts.iter().enumerate() {
        check(p, &ref_slice(&x, &[(Some(2 * k as isize), Some(2 * k as isize + 2), 1)]));
    }
    let parts = ct::split(&a, 2usize, -1);
    check(&parts[1], &ref_slice(&x, &[(O, O, 1), (Some(2), O, 1)]));
    // indices, with negatives, decreasing and out-of-range entries (numpy semantics)
    let idx: [isize; 4] = [1, -2, 3, 10];
    let parts = a.split(idx, 0);
    let bounds = [(Some(0), Some(1)), (Some(1), Some(-2)), (Some(-2), Some(3)), (Some(3), Some(10)), (Some(10), O)];
    assert_eq!(parts.len(), bounds.len());
    for (p, &(s, e)) in parts.iter().zip(&bounds) {
        check(p, &ref_slice(&x, &[(s, e, 1)]));
    }
    assert_eq!(parts[2].shape(), &[0, 4]);
    assert_eq!(parts[4].shape(), &[0, 4]);
    // concatenating the pieces gives back the array
    check(&ct::concatenate(&a.split(vec![2, 3], 1), 1), &x);
}

// ----- pad / tile / repeat / slice_update --------------------------------------------------------

#[test]
fn pad_matches_reference() {
    let x = iota(&[2, 3]);
    let a = x.array_f64();
    check(&a.pad(&[(1, 2), (0, 3)], 9.5), &ref_pad(&x, &[(1, 2), (0, 3)], 9.5));
    check(&ct::pad(&a, &[(2, 1)], -1.0), &ref_pad(&x, &[(2, 1), (2, 1)], -1.0));
    check(&a.t().pad(&[(0, 1), (1, 0)], 0.0), &ref_pad(&ref_transpose(&x, &[1, 0]), &[(0, 1), (1, 0)], 0.0));
    let i = Array::from_slice(&[1i32, 2], &[2]).pad(&[(1, 1)], 7.0);
    assert_eq!(i.to_vec::<i32>().unwrap(), vec![7, 1, 2, 7]);
    let b = Array::from_slice(&[true], &[1]).pad(&[(2, 0)], 0.0);
    assert_eq!(b.to_vec::<bool>().unwrap(), vec![false, false, true]);
}

#[test]
fn tile_matches_reference() {
    let x = iota(&[2, 3]);
    let a = x.array_f64();
    for reps in [vec![2usize, 1], vec![1, 3], vec![2, 2], vec![3], vec![2, 1, 2], vec![0, 2], vec![]] {
        check(&a.tile(&reps), &ref_tile(&x, &reps));
        check(&ct::tile(&a, &reps), &ref_tile(&x, &reps));
    }
    check(&a.t().tile(&[2, 2]), &ref_tile(&ref_transpose(&x, &[1, 0]), &[2, 2]));
}

#[test]
fn repeat_matches_reference() {
    let x = iota(&[2, 3]);
    let a = x.array_f64();
    for (r, axis) in [(2usize, 0isize), (3, 1), (2, -1), (1, 0), (0, 1)] {
        let ax = if axis < 0 { (axis + 2) as usize } else { axis as usize };
        check(&a.repeat(r, axis), &ref_repeat(&x, r, ax));
        check(&ct::repeat(&a, r, axis), &ref_repeat(&x, r, ax));
    }
    let f = Array::from_slice(&[1.0f32, 2.0], &[2]).repeat(2, 0);
    assert_eq!(f.to_vec::<f32>().unwrap(), vec![1.0, 1.0, 2.0, 2.0]);
}

#[test]
fn slice_update_matches_reference() {
    let x = iota(&[4, 5]);
    let a = x.array_f64();
    let u = Nd::new(&[2, 2], |i| 100.0 + i as f64);
    let got = a.slice_update(&u.array_f64(), &[-1, 0], &[isize::MIN, 5], &[-2, 3]);
    let rows = ref_range(4, Some(-1), O, -2);
    let cols = ref_range(5, Some(0), Some(5), 3);
    let want = Nd::build(&[4, 5], |idx| {
        match (rows.iter().position(|&r| r == idx[0]), cols.iter().position(|&c| c == idx[1])) {
            (Some(i), Some(j)) => u.at(&[i, j]),
            _ => x.at(idx),
        }
    });
    check(&got, &want);
    // broadcast and cast the update
    let got = ct::slice_update(&a, &Array::scalar(1i32), &[1, 1], &[2, 3], &[]);
    let want = Nd::build(&[4, 5], |i| if i[0] == 1 && (1..3).contains(&i[1]) { 1.0 } else { x.at(i) });
    check(&got, &want);
}

// ----- zero-size arrays ----------------------------------------------------------------------------

#[test]
fn zero_size_arrays() {
    let e = Array::from_vec(Vec::<f32>::new(), &[0, 3]);
    assert_eq!(e.slice(&[1], &[2], &[]).shape(), &[0, 3]);
    assert_eq!(e.slice(&[0, 1], &[0, 3], &[1, 1]).shape(), &[0, 2]);
    assert_eq!(e.flip(&[]).shape(), &[0, 3]);
    assert_eq!(e.flip(&[0]).to_vec::<f32>().unwrap(), Vec::<f32>::new());
    let x = iota(&[2, 3]);
    let a = x.array(DType::F32);
    // slices that select nothing
    let z = a.slice(&[0, 2], &[2, 2], &[1, 1]);
    assert_eq!(z.shape(), &[2, 0]);
    assert!(z.to_vec::<f32>().unwrap().is_empty());
    assert_eq!(z.flip(&[1]).slice(&[1], &[0], &[-1]).shape(), &[1, 0]);
    assert_eq!(z.sum(&[1], false).to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    // concatenate with empty pieces
    let c = ct::concatenate(&[e.clone(), a.clone(), e.clone()], 0);
    check(&c, &x);
    let cz = ct::concatenate(&[e.clone(), e.clone()], 0);
    assert_eq!(cz.shape(), &[0, 3]);
    assert!(cz.to_vec::<f32>().unwrap().is_empty());
    let c1 = ct::concatenate(&[z.clone(), a.clone()], 1);
    check(&c1, &x);
    // stack of empties, split of an empty axis
    assert_eq!(ct::stack(&[e.clone(), e.clone()], 1).shape(), &[0, 2, 3]);
    let parts = e.split(3usize, 0);
    assert_eq!(parts.iter().map(|p| p.shape().to_vec()).collect::<Vec<_>>(), vec![vec![0, 3]; 3]);
    // pad of an empty array is all padding
    let p = e.pad(&[(1, 0), (0, 1)], 2.0);
    assert_eq!(p.shape(), &[1, 4]);
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![2.0; 4]);
    // tile / repeat to and from zero size
    assert_eq!(a.tile(&[0, 1]).shape(), &[0, 3]);
    assert_eq!(e.tile(&[2, 2]).shape(), &[0, 6]);
    assert_eq!(a.repeat(0, 0).shape(), &[0, 3]);
    assert_eq!(e.repeat(3, 1).shape(), &[0, 9]);
    assert!(e.repeat(3, 1).to_vec::<f32>().unwrap().is_empty());
    // slice_update with an empty region leaves the array unchanged
    check(&a.slice_update(&z, &[0, 2], &[2, 2], &[]), &x);
    // reshape/transpose of empties
    assert_eq!(e.t().reshape(&[3, -1]).shape(), &[3, 0]);
}

// ----- errors --------------------------------------------------------------------------------------

#[test]
#[should_panic(expected = "cotangent::slice: step of axis 0 is zero")]
fn slice_zero_step_panics() {
    Array::from_slice(&[1.0f32, 2.0], &[2]).slice(&[0], &[2], &[0]);
}

#[test]
#[should_panic(expected = "cotangent::slice: 2 axes sliced but the array has shape [2]")]
fn slice_too_many_axes_panics() {
    Array::from_slice(&[1.0f32, 2.0], &[2]).slice(&[0, 0], &[1, 1], &[]);
}

#[test]
#[should_panic(expected = "cotangent::slice_axis: axis 2 is out of range")]
fn slice_axis_bad_axis_panics() {
    Array::from_slice(&[1.0f32, 2.0], &[2, 1]).slice_axis(2, None, None, 1);
}

#[test]
#[should_panic(expected = "cotangent::concatenate: shapes [[2, 3], [2, 4]] disagree outside axis 0")]
fn concatenate_bad_shapes_panics() {
    ct::concatenate(&[ct::zeros(&[2, 3], DType::F32), ct::zeros(&[2, 4], DType::F32)], 0);
}

#[test]
#[should_panic(expected = "cotangent::concatenate: 0-d arrays cannot be concatenated")]
fn concatenate_scalars_panics() {
    ct::concatenate(&[Array::scalar(1.0f32), Array::scalar(2.0f32)], 0);
}

#[test]
#[should_panic(expected = "cotangent::stack: shapes [[2], [3]] differ")]
fn stack_bad_shapes_panics() {
    ct::stack(&[ct::zeros(&[2], DType::F32), ct::zeros(&[3], DType::F32)], 0);
}

#[test]
#[should_panic(expected = "does not divide into 4 equal sections")]
fn split_uneven_panics() {
    ct::zeros(&[6], DType::F32).split(4usize, 0);
}

#[test]
#[should_panic(expected = "cotangent::pad: 3 (before, after) pairs for shape [2, 2]")]
fn pad_bad_widths_panics() {
    ct::zeros(&[2, 2], DType::F32).pad(&[(1, 1), (1, 1), (1, 1)], 0.0);
}

#[test]
#[should_panic(expected = "cotangent::flip: axis 0 repeated")]
fn flip_repeated_axis_panics() {
    ct::zeros(&[2, 2], DType::F32).flip(&[0, -2]);
}

#[test]
#[should_panic(expected = "cotangent::slice_update: update of shape [3] does not broadcast")]
fn slice_update_bad_shape_panics() {
    ct::zeros(&[4], DType::F32).slice_update(&ct::zeros(&[3], DType::F32), &[0], &[2], &[]);
}

// ----- property tests ------------------------------------------------------------------------------

fn shape_strategy(max_nd: usize, max_d: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..=max_d, 0..=max_nd)
}

fn slice_spec(shape: Vec<usize>) -> impl Strategy<Value = (Vec<usize>, Vec<AxisSlice>)> {
    let nd = shape.len();
    let bound = || prop_oneof![Just(None), (-7isize..=7).prop_map(Some)];
    let step = prop_oneof![1isize..=3, -3isize..=-1];
    (Just(shape), prop::collection::vec((bound(), bound(), step), nd))
}

fn to_params(spec: &[AxisSlice]) -> (Vec<isize>, Vec<isize>, Vec<isize>) {
    let starts = spec.iter().map(|&(s, _, st)| s.unwrap_or(if st > 0 { isize::MIN } else { isize::MAX })).collect();
    let stops = spec.iter().map(|&(_, e, st)| e.unwrap_or(if st > 0 { isize::MAX } else { isize::MIN })).collect();
    let steps = spec.iter().map(|&(_, _, st)| st).collect();
    (starts, stops, steps)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn prop_reshape_round_trip(shape in shape_strategy(4, 4), perm_seed in any::<u64>()) {
        let x = iota(&shape);
        let a = x.array_f64();
        // flatten and back, and via a transposed (non-contiguous) view
        check(&a.flatten().reshape_exact(&shape), &x);
        let nd = shape.len();
        let mut perm: Vec<usize> = (0..nd).collect();
        let mut s = perm_seed;
        for i in (1..nd).rev() {
            perm.swap(i, (s % (i as u64 + 1)) as usize);
            s /= 7;
        }
        let p: Vec<isize> = perm.iter().map(|&v| v as isize).collect();
        let t = a.transpose(&p);
        let want_t = ref_transpose(&x, &perm);
        check(&t, &want_t);
        let flat = t.reshape(&[-1]);
        prop_assert_eq!(flat.to_f64_vec().unwrap(), want_t.v.clone());
        // transpose back with the inverse permutation
        let mut inv = vec![0isize; nd];
        for (i, &q) in perm.iter().enumerate() { inv[q] = i as isize; }
        check(&t.transpose(&inv), &x);
        check(&flat.reshape_exact(&want_t.shape).transpose(&inv), &x);
    }

    #[test]
    fn prop_broadcast_matches_reference(shape in shape_strategy(4, 3), mask in prop::collection::vec(any::<bool>(), 4), extra in 0usize..=2) {
        // a shape that broadcasts to `shape`: drop some leading axes, set some extents to 1
        let nd = shape.len();
        let keep = nd.saturating_sub(extra);
        let small: Vec<usize> = shape[nd - keep..].iter().enumerate()
            .map(|(i, &d)| if mask[i] { 1 } else { d }).collect();
        let x = iota(&small);
        let want = Nd::build(&shape, |idx| {
            let src: Vec<usize> = small.iter().enumerate()
                .map(|(i, &d)| if d == 1 { 0 } else { idx[nd - keep + i] }).collect();
            x.at(&src)
        });
        check(&x.array_f64().broadcast_to(&shape), &want);
        // and through a binary op with zeros of the big shape (both orders)
        let z = ct::zeros(&shape, DType::F64);
        check(&(&x.array_f64() + &z), &want);
        check(&(&z + &x.array_f64()), &want);
    }

    #[test]
    fn prop_slice_matches_reference((shape, spec) in shape_strategy(3, 5).prop_flat_map(slice_spec)) {
        let x = iota(&shape);
        let (st, sp, sd) = to_params(&spec);
        check(&x.array_f64().slice(&st, &sp, &sd), &ref_slice(&x, &spec));
    }

    #[test]
    fn prop_slice_of_slice_is_composed_slice(
        (shape, s1) in shape_strategy(3, 6).prop_flat_map(slice_spec),
        seeds in prop::collection::vec((-7isize..=7, -7isize..=7, prop_oneof![1isize..=3, -3isize..=-1]), 3),
    ) {
        let x = iota(&shape);
        let a = x.array_f64();
        let (st1, sp1, sd1) = to_params(&s1);
        let y = a.slice(&st1, &sp1, &sd1);
        let s2: Vec<AxisSlice> =
            seeds.iter().take(shape.len()).map(|&(s, e, st)| (Some(s), Some(e), st)).collect();
        let (st2, sp2, sd2) = to_params(&s2);
        let z = y.slice(&st2, &sp2, &sd2);
        // compose the index lists: axis a takes l1[l2[i]]
        let mut starts = vec![];
        let mut stops = vec![];
        let mut steps = vec![];
        for ax in 0..shape.len() {
            let l1 = ref_range(shape[ax], s1[ax].0, s1[ax].1, s1[ax].2);
            let l2 = ref_range(l1.len(), s2[ax].0, s2[ax].1, s2[ax].2);
            let step = s1[ax].2 * s2[ax].2;
            if l2.is_empty() {
                starts.push(0); stops.push(0); steps.push(1);
            } else {
                let first = l1[l2[0]] as isize;
                let stop = first + step * l2.len() as isize;
                starts.push(first);
                stops.push(if stop < 0 { isize::MIN } else { stop });
                steps.push(step);
            }
        }
        let direct = a.slice(&starts, &stops, &steps);
        prop_assert_eq!(z.shape(), direct.shape());
        prop_assert_eq!(z.to_f64_vec().unwrap(), direct.to_f64_vec().unwrap());
        let want = ref_slice(&ref_slice(&x, &s1), &s2);
        check(&z, &want);
    }

    #[test]
    fn prop_split_concatenate_round_trip(shape in prop::collection::vec(0usize..=5, 1..=3), cuts in prop::collection::vec(-6isize..=6, 0..=3), axis_seed in any::<usize>()) {
        let x = iota(&shape);
        let a = x.array_f64();
        let axis = axis_seed % shape.len();
        let mut sorted: Vec<isize> = cuts.iter().map(|&c| {
            let n = shape[axis] as isize;
            (if c < 0 { c + n } else { c }).clamp(0, n)
        }).collect();
        sorted.sort_unstable();
        let parts = a.split(sorted.clone(), axis as isize);
        prop_assert_eq!(parts.len(), sorted.len() + 1);
        check(&ct::concatenate(&parts, axis as isize), &x);
    }
}

#[test]
fn read_helper_round_trips() {
    let x = iota(&[2, 2]);
    assert_eq!(read(&x.array_f64()), x);
}

// ----- transforms: VJP / JVP against finite differences, vmap against loops ------------------------

/// Element `b` of `x` along axis `ax`.
fn take(x: &Array, ax: usize, b: usize) -> Array {
    x.slice_axis(ax as isize, Some(b as isize), Some(b as isize + 1), 1).squeeze(&[ax as isize])
}

/// `vmap(f)` with the given input axes against a loop over the batch, stacking on axis 0.
#[track_caller]
fn check_vmap(
    name: &str,
    f: impl Fn(&[Array]) -> Array + Send + Sync + Clone + 'static,
    xs: &[Array],
    axes: &[Option<isize>],
) {
    let b = xs.iter().zip(axes).find_map(|(x, a)| a.map(|a| x.dim(a))).unwrap();
    let got = ct::vmap(f.clone(), axes, &[Some(0)])(xs).unwrap().remove(0);
    let outs: Vec<Array> = (0..b)
        .map(|k| {
            let args: Vec<Array> = xs
                .iter()
                .zip(axes)
                .map(|(x, a)| match a {
                    Some(a) => take(x, if *a < 0 { (*a + x.ndim() as isize) as usize } else { *a as usize }, k),
                    None => x.clone(),
                })
                .collect();
            f(&args)
        })
        .collect();
    let want = ct::stack(&outs, 0);
    assert_eq!(got.shape(), want.shape(), "{name}: vmap shape with axes {axes:?}");
    assert_eq!(got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap(), "{name}: vmap values with axes {axes:?}");
}

/// Nonlinear wrappers so the weighting of each output element matters.
fn sq(x: &Array) -> Array {
    x * x + x.sin()
}

#[test]
fn slice_and_flip_grads() {
    let mut rng = Lcg(1);
    let x = rng.signed(&[4, 5, 3]);
    check_grads("slice", |x: &[Array]| sq(&x[0].slice(&[3, 1], &[0, isize::MAX], &[-2, 2])), std::slice::from_ref(&x));
    check_grads("slice_axis", |x: &[Array]| sq(&x[0].slice_axis(-1, Some(-1), None, -1)), std::slice::from_ref(&x));
    check_grads("flip", |x: &[Array]| sq(&x[0].flip(&[0, 2])), std::slice::from_ref(&x));
    check_grads(
        "slice of transpose",
        |x: &[Array]| sq(&x[0].t().slice(&[1], &[isize::MAX], &[2])),
        std::slice::from_ref(&x),
    );
    check_grads(
        "empty slice",
        |x: &[Array]| x[0].slice(&[2], &[2], &[]).sum_all() + x[0].sum_all(),
        std::slice::from_ref(&x),
    );
    // second order: differentiate the gradient (its rules are SliceUpdate and Slice again)
    let g = ct::grad(|x: &[Array]| sq(&x[0].slice(&[-1, 0], &[isize::MIN, 5], &[-1, 3])).sum_all());
    check_grads("grad of slice", move |x: &[Array]| sq(&g(x).unwrap()[0]), std::slice::from_ref(&x));
}

#[test]
fn slice_update_and_pad_grads() {
    let mut rng = Lcg(2);
    let x = rng.signed(&[4, 5]);
    let u = rng.signed(&[2, 2]);
    check_grads(
        "slice_update",
        |x: &[Array]| sq(&x[0].slice_update(&x[1], &[-1, 0], &[isize::MIN, 5], &[-2, 3])),
        &[x.clone(), u.clone()],
    );
    check_grads("pad", |x: &[Array]| sq(&x[0].pad(&[(1, 2), (0, 1)], 0.5)), std::slice::from_ref(&x));
    check_grads("tile", |x: &[Array]| sq(&x[0].tile(&[2, 1, 2])), std::slice::from_ref(&u));
    check_grads("repeat", |x: &[Array]| sq(&x[0].repeat(3, -1)), std::slice::from_ref(&u));
    let g = ct::grad(|x: &[Array]| sq(&x[0].pad(&[(1, 0)], 0.0)).sum_all());
    check_grads("grad of pad", move |x: &[Array]| sq(&g(x).unwrap()[0]), std::slice::from_ref(&u));
}

#[test]
fn concatenate_stack_split_grads() {
    let mut rng = Lcg(3);
    let a = rng.signed(&[2, 3]);
    let b = rng.signed(&[2, 1]);
    let c = rng.signed(&[2, 2]);
    check_grads("concatenate", |x: &[Array]| sq(&ct::concatenate(x, -1)), &[a.clone(), b.clone(), c.clone()]);
    check_grads(
        "concatenate axis 0",
        |x: &[Array]| sq(&ct::concatenate(&[x[0].t(), x[1].t()], 0)),
        &[a.clone(), c.clone()],
    );
    check_grads("stack", |x: &[Array]| sq(&ct::stack(x, 1)), &[a.clone(), a.sin()]);
    check_grads(
        "split",
        |x: &[Array]| {
            let p = x[0].split([1, -1], 1);
            sq(&p[0]) * 2.0 + (&p[2] * &p[1]).sum(&[1], true)
        },
        std::slice::from_ref(&a),
    );
    // a constant (captured) input gets zeros in the JVP and no cotangent
    let k = b.clone();
    check_grads(
        "concatenate with constant",
        move |x: &[Array]| sq(&ct::concatenate(&[k.clone(), x[0].clone()], 1)),
        &[c],
    );
    let g = ct::grad(|x: &[Array]| sq(&ct::concatenate(x, 1)).sum_all());
    check_grads("grad of concatenate", move |x: &[Array]| sq(&g(x).unwrap()[1]), &[a, b]);
}

#[test]
fn shape_vmaps() {
    let mut rng = Lcg(4);
    let x = rng.signed(&[3, 4, 5]);
    for ax in [Some(0isize), Some(1), Some(-1)] {
        check_vmap(
            "slice",
            |x: &[Array]| x[0].slice(&[-1, 1], &[isize::MIN, 4], &[-2, 2]),
            std::slice::from_ref(&x),
            &[ax],
        );
        check_vmap("flip", |x: &[Array]| x[0].flip(&[]), std::slice::from_ref(&x), &[ax]);
        check_vmap("pad", |x: &[Array]| x[0].pad(&[(1, 0), (2, 1)], 3.0), std::slice::from_ref(&x), &[ax]);
        check_vmap("tile", |x: &[Array]| x[0].tile(&[2, 1]), std::slice::from_ref(&x), &[ax]);
        check_vmap("repeat", |x: &[Array]| x[0].repeat(2, 0), std::slice::from_ref(&x), &[ax]);
        check_vmap("split", |x: &[Array]| x[0].split([1, -1], -1)[1].clone(), std::slice::from_ref(&x), &[ax]);
        check_vmap("stack", |x: &[Array]| ct::stack(&[x[0].clone(), x[0].exp()], -1), std::slice::from_ref(&x), &[ax]);
    }
    // multi-input: batch axes at different positions, some inputs unbatched
    let a = rng.signed(&[3, 2, 4]); // batch on axis 0
    let b = rng.signed(&[2, 5, 3]); // batch on axis 2 -> per-example [2, 5]
    let c = rng.signed(&[2, 1]); // unbatched
    let cat = |x: &[Array]| ct::concatenate(&[x[0].clone(), x[1].clone(), x[2].clone()], 1);
    check_vmap("concatenate", cat, &[a.clone(), b.clone(), c.clone()], &[Some(0), Some(-1), None]);
    let cat0 = |x: &[Array]| ct::concatenate(&[x[0].t(), x[1].clone()], 0);
    check_vmap("concatenate axis 0", cat0, &[rng.signed(&[2, 3, 4]), rng.signed(&[1, 3, 2])], &[Some(1), Some(1)]);
    // slice_update: batched base with unbatched update, and the reverse
    let upd = |x: &[Array]| x[0].slice_update(&x[1], &[1, 0], &[3, 5], &[1, 2]);
    check_vmap("slice_update base", upd, &[rng.signed(&[4, 5, 2]), rng.signed(&[2, 3])], &[Some(-1), None]);
    check_vmap("slice_update update", upd, &[rng.signed(&[4, 5]), rng.signed(&[2, 6, 3])], &[None, Some(1)]);
    check_vmap("slice_update both", upd, &[rng.signed(&[2, 4, 5]), rng.signed(&[2, 3, 2])], &[Some(0), Some(2)]);
    // vmap of grad through a slice
    let g = ct::grad(|x: &[Array]| sq(&x[0].slice(&[1], &[isize::MAX], &[2])).sum_all());
    check_vmap("grad of slice", move |x: &[Array]| g(x).unwrap()[0].clone(), &[x], &[Some(1)]);
}

#[test]
fn gradients_of_many_slices_of_one_array() {
    let mut rng = Lcg(91);
    // a loop over the rows (disjoint slices, merged into one scatter in reverse mode), with a
    // nonlinear use per row: d/dx_t of sum_t sum(sin(x_t) * (t+1)) = cos(x_t) * (t+1)
    let x = rng.array(&[300, 3], -1.0, 1.0);
    let rows = |a: &[Array]| {
        (0..300isize)
            .map(|t| a[0].slice_axis(0, Some(t), Some(t + 1), 1).sin().sum_all() * (t + 1) as f64)
            .reduce(|s, v| s + v)
            .unwrap()
    };
    let g = ct::grad(rows)(std::slice::from_ref(&x)).unwrap();
    let xv = common::vals(&x);
    let want: Vec<f64> = xv.iter().enumerate().map(|(i, v)| v.cos() * (i / 3 + 1) as f64).collect();
    common::assert_close(&common::vals(&g[0]), &want, 1e-12, "row loop");
    // overlapping windows (their slices hold more elements than the array, so reverse mode
    // merges them in several groups), strided and reversed slices, plus a dense use of x
    let windows = |a: &[Array]| {
        let x = &a[0];
        let mut acc = (x * x).sum_all();
        for s in 0..40isize {
            acc = acc + x.slice_axis(0, Some(s), Some(s + 8), 1).square().sum_all() * (1.0 + s as f64 / 10.0);
        }
        acc + x.slice_axis(0, Some(47), None, -3).exp().sum_all()
    };
    check_grads("overlapping windows", windows, &[rng.array(&[48, 2], -1.0, 1.0)]);
    // vmap of the gradient (the merged scatter's batching rule), batch axis in the middle,
    // against a loop; and its jvp (forward mode through the scatter) against the hvp identity
    let small = |a: &[Array]| {
        (0..6isize).map(|t| a[0].slice_axis(0, Some(t), Some(t + 1), 1).sin().sum_all()).reduce(|s, v| s + v).unwrap()
    };
    let xs = rng.array(&[6, 4, 2], -1.0, 1.0);
    let batched = ct::vmap(ct::grad(small), &[Some(1)], &[Some(1)])(std::slice::from_ref(&xs)).unwrap();
    for b in 0..4isize {
        let xb = xs.slice_axis(1, Some(b), Some(b + 1), 1).squeeze(&[1]);
        let one = ct::grad(small)(&[xb]).unwrap();
        let row = batched[0].slice_axis(1, Some(b), Some(b + 1), 1).squeeze(&[1]);
        common::assert_close(&common::vals(&row), &common::vals(&one[0]), 1e-14, "vmap(grad) of slices");
    }
    let x0 = rng.array(&[6, 2], -1.0, 1.0);
    let v = rng.array(&[6, 2], -1.0, 1.0);
    let (_, hv) = ct::jvp(ct::grad(small), std::slice::from_ref(&x0), std::slice::from_ref(&v)).unwrap();
    let want: Vec<f64> = common::vals(&x0).iter().zip(common::vals(&v)).map(|(x, v)| -x.sin() * v).collect();
    common::assert_close(&common::vals(&hv[0]), &want, 1e-14, "jvp(grad) of slices");
}
