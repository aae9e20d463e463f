//! Creating arrays: constants, ranges, identity and triangular masks.
use crate::dtype::BufferElement;
use crate::dtype::Element;
use crate::{Array, DType};

/// A 0-d array of `dtype` holding `v` (converted as `as` would).
pub(crate) fn scalar_f64(v: f64, dtype: DType) -> Array {
    crate::dispatch_dtype!(dtype, T => Array::scalar(<T as Element>::from_f64(v)))
}

/// A 0-d array of `dtype` holding the integer `v` (exact for integer dtypes).
pub(crate) fn scalar_i64(v: i64, dtype: DType) -> Array {
    crate::dispatch_dtype!(dtype, T => Array::scalar(<T as Element>::from_i64(v)))
}

/// An array of `shape` filled with `v` converted to `dtype`. It is a broadcast view of one
/// element: no memory is used until an op writes a result.
#[track_caller]
pub fn full(shape: &[usize], v: f64, dtype: DType) -> Array {
    scalar_f64(v, dtype).broadcast_to(shape)
}

/// Zeros of `shape` and `dtype`.
#[track_caller]
pub fn zeros(shape: &[usize], dtype: DType) -> Array {
    full(shape, 0.0, dtype)
}

/// Ones of `shape` and `dtype`.
#[track_caller]
pub fn ones(shape: &[usize], dtype: DType) -> Array {
    full(shape, 1.0, dtype)
}

/// Zeros with the shape, dtype and device of `x`.
pub fn zeros_like(x: &Array) -> Array {
    full_like(x, 0.0)
}

/// Ones with the shape, dtype and device of `x`.
pub fn ones_like(x: &Array) -> Array {
    full_like(x, 1.0)
}

/// `v` with the shape, dtype and device of `x`.
pub fn full_like(x: &Array, v: f64) -> Array {
    scalar_f64(v, x.dtype()).to_device(x.device()).broadcast_to(x.shape())
}

/// `start, start + step, ...` up to (not including) `stop`, as numpy's `arange`.
///
/// # Panics
/// If `step` is zero.
#[track_caller]
pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Array {
    assert!(step != 0.0, "cotangent::arange: step must not be zero");
    let n = ((stop - start) / step).ceil().max(0.0) as usize;
    crate::dispatch_dtype!(dtype, T => Array::from_vec(
        (0..n).map(|i| <T as Element>::from_f64(start + i as f64 * step)).collect::<Vec<T>>(), &[n]))
}

/// `num` evenly spaced values from `start` to `stop` inclusive, as numpy's `linspace`.
pub fn linspace(start: f64, stop: f64, num: usize, dtype: DType) -> Array {
    let step = if num > 1 { (stop - start) / (num - 1) as f64 } else { 0.0 };
    crate::dispatch_dtype!(dtype, T => Array::from_vec(
        (0..num).map(|i| <T as Element>::from_f64(if i + 1 == num && num > 1 { stop } else { start + i as f64 * step }))
            .collect::<Vec<T>>(), &[num]))
}

/// An `n × m` matrix with ones on diagonal `k` (0 = main, positive above) and zeros elsewhere.
pub fn eye(n: usize, m: usize, k: isize, dtype: DType) -> Array {
    mask(n, m, dtype, |i, j| j as isize - i as isize == k)
}

/// An `n × m` matrix with ones on and below diagonal `k`, as numpy's `tri`.
pub fn tri(n: usize, m: usize, k: isize, dtype: DType) -> Array {
    mask(n, m, dtype, |i, j| j as isize - i as isize <= k)
}

fn mask(n: usize, m: usize, dtype: DType, f: impl Fn(usize, usize) -> bool) -> Array {
    fn build<T: BufferElement>(n: usize, m: usize, f: impl Fn(usize, usize) -> bool) -> Array {
        let mut v = Vec::with_capacity(n * m);
        for i in 0..n {
            for j in 0..m {
                v.push(T::from_f64(f(i, j) as u8 as f64));
            }
        }
        Array::from_vec(v, &[n, m])
    }
    crate::dispatch_dtype!(dtype, T => build::<T>(n, m, f))
}

/// The lower triangle (on and below diagonal `k`) of the last two axes; zeros elsewhere.
#[track_caller]
pub fn tril(x: &Array, k: isize) -> Array {
    assert!(x.ndim() >= 2, "cotangent::tril: needs at least 2 axes, got shape {:?}", x.shape());
    let (n, m) = (x.shape()[x.ndim() - 2], x.shape()[x.ndim() - 1]);
    crate::ops::select(&tri(n, m, k, DType::Bool).to_device(x.device()), x, zeros_like(x))
}

/// The upper triangle (on and above diagonal `k`) of the last two axes; zeros elsewhere.
#[track_caller]
pub fn triu(x: &Array, k: isize) -> Array {
    assert!(x.ndim() >= 2, "cotangent::triu: needs at least 2 axes, got shape {:?}", x.shape());
    let (n, m) = (x.shape()[x.ndim() - 2], x.shape()[x.ndim() - 1]);
    crate::ops::select(&tri(n, m, k - 1, DType::Bool).to_device(x.device()), zeros_like(x), x)
}

impl Array {
    /// Lower triangle, see [`tril`].
    #[track_caller]
    pub fn tril(&self, k: isize) -> Array {
        tril(self, k)
    }
    /// Upper triangle, see [`triu`].
    #[track_caller]
    pub fn triu(&self, k: isize) -> Array {
        triu(self, k)
    }
}
