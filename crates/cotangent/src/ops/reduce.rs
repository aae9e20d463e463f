//! Reductions over axes (`keepdims`, negative axes; an empty axes list reduces nothing) and
//! their `*_all` forms.
//!
//! Also the row reductions with fused kernels — [`logsumexp`], [`softmax`], [`argmax`] /
//! [`argmin`] — the cumulative scans [`cumsum`] / [`cumprod`], the boolean [`all`] / [`any`],
//! and [`var`] / [`std()`] (compositions of the above, so they need no rules of their own).
use super::shape::axis_for;
use crate::primitives::reduce::{ArgReduce, ArgReduceOp, LogSumExp, Reduce, ReduceOp, Scan, ScanOp, Softmax};
use crate::{Array, DType};

/// Reduce the given (normalised) axes, keeping them as unit axes.
pub(crate) fn reduce_keepdims(op: ReduceOp, x: &Array, mut axes: Vec<usize>) -> Array {
    axes.sort_unstable();
    axes.dedup();
    let shape: Vec<usize> = x.shape().iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    Array::from_primitive(Reduce { op, axes }, vec![x.clone()], &shape, x.dtype())
}

/// Normalise the axes of a reduction named `op`.
#[track_caller]
pub(crate) fn reduce_axes(op: &str, x: &Array, axes: &[isize]) -> Vec<usize> {
    let mut v = super::shape::axes_for(op, axes, x.shape(), x.ndim());
    v.sort_unstable();
    let n = v.len();
    v.dedup();
    assert!(v.len() == n, "cotangent::{op}: repeated axis in {axes:?}");
    v
}

/// Drop the reduced unit axes unless `keepdims`.
pub(crate) fn finish(y: Array, x_shape: &[usize], axes: &[usize], keepdims: bool) -> Array {
    if keepdims {
        return y;
    }
    let shape: Vec<usize> = (0..x_shape.len()).filter(|i| !axes.contains(i)).map(|i| x_shape[i]).collect();
    y.reshape_exact(&shape)
}

#[track_caller]
fn reduce(op: ReduceOp, x: &Array, axes: &[isize], keepdims: bool) -> Array {
    // sums and products of bool / u8 accumulate in i32 / u32 (numpy), also for an empty axes list
    let x = if op == ReduceOp::Sum || op == ReduceOp::Prod {
        match x.dtype() {
            DType::Bool => x.astype(DType::I32),
            DType::U8 => x.astype(DType::U32),
            _ => x.clone(),
        }
    } else {
        x.clone()
    };
    if axes.is_empty() {
        return x;
    }
    let ax = reduce_axes(op.name(), &x, axes);
    if matches!(op, ReduceOp::Max | ReduceOp::Min) {
        for &a in &ax {
            assert!(
                x.shape()[a] > 0,
                "cotangent::{}: cannot reduce the zero-size axis {a} of shape {:?} (no identity)",
                op.name(),
                x.shape()
            );
        }
    }
    finish(reduce_keepdims(op, &x, ax.clone()), x.shape(), &ax, keepdims)
}

fn all_axes(x: &Array) -> Vec<isize> {
    (0..x.ndim() as isize).collect()
}

impl Array {
    /// Sum over `axes` (bool and u8 sum in i32/u32; integer sums wrap, so they are exact
    /// modulo 2^bits).
    ///
    /// # Accuracy of float sums
    /// The CPU backend sums floats pairwise over blocks (`backend::cpu::sum`): `f32` and `f64` in
    /// their own type, `f16` and `bf16` in `f32` (rounded once at the end). For `n` summed
    /// elements the error is bounded by `k·u·Σ|x|`, with `u` the unit roundoff (`2^-24` for
    /// `f32`, `2^-53` for `f64`) and `k = 20 + ⌈log2(n / 256)⌉` when each output's elements are
    /// contiguous in memory (`k = 128 + ⌈log2(n / 128)⌉` when the outputs are, as in a sum over a
    /// leading axis): `O(u log n)` relative to `Σ|x|`, where a left-to-right loop's bound is
    /// `(n - 1)·u` (10^7 times `0.1f32` would come out 8.8 % too large). The order of the
    /// additions depends only on the shape and the memory layout of `x`, never on the number
    /// of threads: results are bit-identical for any `COTANGENT_NUM_THREADS`.
    #[track_caller]
    pub fn sum(&self, axes: &[isize], keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("sum");
        reduce(ReduceOp::Sum, self, axes, keepdims)
    }
    /// Sum of all elements (a 0-d array), with the accuracy of [`sum`](Array::sum).
    #[track_caller]
    pub fn sum_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("sum_all");
        reduce(ReduceOp::Sum, self, &all_axes(self), false)
    }
    /// Product over `axes`.
    ///
    /// Its derivative, the product of the other elements, is computed from exclusive
    /// cumulative products from both sides (no division by `x`), so it is exact also where
    /// `x` has zeros.
    #[track_caller]
    pub fn prod(&self, axes: &[isize], keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("prod");
        reduce(ReduceOp::Prod, self, axes, keepdims)
    }
    /// Product of all elements.
    #[track_caller]
    pub fn prod_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("prod_all");
        reduce(ReduceOp::Prod, self, &all_axes(self), false)
    }
    /// Maximum over `axes` (NaN propagates).
    #[track_caller]
    pub fn max(&self, axes: &[isize], keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("max");
        reduce(ReduceOp::Max, self, axes, keepdims)
    }
    /// Maximum of all elements.
    #[track_caller]
    pub fn max_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("max_all");
        reduce(ReduceOp::Max, self, &all_axes(self), false)
    }
    /// Minimum over `axes` (NaN propagates).
    #[track_caller]
    pub fn min(&self, axes: &[isize], keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("min");
        reduce(ReduceOp::Min, self, axes, keepdims)
    }
    /// Minimum of all elements.
    #[track_caller]
    pub fn min_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("min_all");
        reduce(ReduceOp::Min, self, &all_axes(self), false)
    }
    /// Mean over `axes` (integers average in `f32`): the [`sum`](Array::sum) divided by the
    /// element count `n`, so its relative error is the sum's bound `k·u·Σ|x| / |Σx|` plus one
    /// rounding `u`, with `k = O(log n)` (the mean of 2·10^7 `f32` ones is exactly 1).
    #[track_caller]
    pub fn mean(&self, axes: &[isize], keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("mean");
        if axes.is_empty() {
            return self.astype(self.dtype().to_float());
        }
        let ax = reduce_axes("mean", self, axes);
        let n: usize = ax.iter().map(|&a| self.shape()[a]).product();
        let x = self.astype(self.dtype().to_float());
        x.sum(axes, keepdims) / n as f64
    }
    /// Mean of all elements, see [`mean`](Array::mean).
    #[track_caller]
    pub fn mean_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("mean_all");
        self.mean(&all_axes(self), false)
    }
}

/// See [`Array::sum`].
#[track_caller]
pub fn sum(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("sum");
    x.sum(axes, keepdims)
}
/// See [`Array::prod`].
#[track_caller]
pub fn prod(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("prod");
    x.prod(axes, keepdims)
}
/// See [`Array::max`].
#[track_caller]
pub fn max(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("max");
    x.max(axes, keepdims)
}
/// See [`Array::min`].
#[track_caller]
pub fn min(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("min");
    x.min(axes, keepdims)
}
/// See [`Array::mean`].
#[track_caller]
pub fn mean(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("mean");
    x.mean(axes, keepdims)
}

// ----- internal constructors over normalised axes (used by the ops below and by rules) -------

/// `argmax`/`argmin` along a normalised `axis`, kept with extent 1; `u32` indices.
pub(crate) fn arg_reduce_keepdims(op: ArgReduceOp, x: &Array, axis: usize) -> Array {
    let mut shape = x.shape().to_vec();
    shape[axis] = 1;
    Array::from_primitive(ArgReduce { op, axis }, vec![x.clone()], &shape, DType::U32)
}

/// `logsumexp` over normalised axes of a float array, kept with extent 1.
pub(crate) fn logsumexp_keepdims(x: &Array, mut axes: Vec<usize>) -> Array {
    axes.sort_unstable();
    axes.dedup();
    let shape: Vec<usize> = x.shape().iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    Array::from_primitive(LogSumExp { axes }, vec![x.clone()], &shape, x.dtype())
}

/// `softmax` over normalised axes of a float array.
pub(crate) fn softmax_axes(x: &Array, mut axes: Vec<usize>) -> Array {
    axes.sort_unstable();
    axes.dedup();
    Array::from_primitive(Softmax { axes }, vec![x.clone()], x.shape(), x.dtype())
}

/// A cumulative scan along a normalised axis (input dtype is not bool).
pub(crate) fn scan(op: ScanOp, x: &Array, axis: usize, reverse: bool, inclusive: bool) -> Array {
    Array::from_primitive(Scan { op, axis, reverse, inclusive }, vec![x.clone()], x.shape(), x.dtype())
}

fn to_float(x: &Array) -> Array {
    x.astype(x.dtype().to_float())
}

#[track_caller]
fn arg_reduce(op: ArgReduceOp, x: &Array, axis: isize, keepdims: bool) -> Array {
    let name = if op == ArgReduceOp::ArgMax { "argmax" } else { "argmin" };
    let a = axis_for(name, axis, x.shape(), x.ndim());
    assert!(x.shape()[a] > 0, "cotangent::{name}: cannot reduce the zero-size axis {a} of shape {:?}", x.shape());
    finish(arg_reduce_keepdims(op, x, a), x.shape(), &[a], keepdims)
}

#[track_caller]
fn arg_reduce_all(op: ArgReduceOp, x: &Array) -> Array {
    let name = if op == ArgReduceOp::ArgMax { "argmax_all" } else { "argmin_all" };
    assert!(x.size() > 0, "cotangent::{name}: the array of shape {:?} is empty", x.shape());
    arg_reduce(op, &x.flatten(), 0, false)
}

#[track_caller]
fn scan_op(op: ScanOp, x: &Array, axis: isize, reverse: bool, inclusive: bool) -> Array {
    let name = if op == ScanOp::Sum { "cumsum" } else { "cumprod" };
    let a = axis_for(name, axis, x.shape(), x.ndim());
    let x = match x.dtype() {
        DType::Bool => x.astype(DType::I32),
        DType::U8 => x.astype(DType::U32),
        _ => x.clone(),
    };
    scan(op, &x, a, reverse, inclusive)
}

impl Array {
    /// Whether every element over `axes` is true (nonzero); `true` over no elements. Returns bool.
    #[track_caller]
    pub fn all(&self, axes: &[isize], keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("all");
        reduce(ReduceOp::All, &self.astype(DType::Bool), axes, keepdims)
    }
    /// Whether every element is true (a 0-d bool array).
    #[track_caller]
    pub fn all_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("all_all");
        self.all(&all_axes(self), false)
    }
    /// Whether any element over `axes` is true (nonzero); `false` over no elements. Returns bool.
    #[track_caller]
    pub fn any(&self, axes: &[isize], keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("any");
        reduce(ReduceOp::Any, &self.astype(DType::Bool), axes, keepdims)
    }
    /// Whether any element is true (a 0-d bool array).
    #[track_caller]
    pub fn any_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("any_all");
        self.any(&all_axes(self), false)
    }

    /// Variance over `axes` with `ddof` delta degrees of freedom: `sum((x - mean)^2) / (n - ddof)`
    /// (integers in `f32`), two passes of pairwise sums (see [`sum`](Array::sum)).
    ///
    /// With `ddof >= n` the divisor is taken as 0, as numpy does: the result is `inf`, or NaN
    /// where every deviation is zero (a single element, constant data); never negative.
    #[track_caller]
    pub fn var(&self, axes: &[isize], keepdims: bool, ddof: usize) -> Array {
        let _op = crate::array::OpScope::enter("var");
        let ax = reduce_axes("var", self, axes);
        let n: usize = ax.iter().map(|&a| self.shape()[a]).product();
        let x = to_float(self);
        let d = &x - x.mean(axes, true);
        d.square().sum(axes, keepdims) / (n as f64 - ddof as f64).max(0.0)
    }
    /// Variance of all elements, see [`var`](Array::var).
    #[track_caller]
    pub fn var_all(&self, ddof: usize) -> Array {
        let _op = crate::array::OpScope::enter("var_all");
        self.var(&all_axes(self), false, ddof)
    }
    /// Standard deviation over `axes`: the square root of [`var`](Array::var) (`inf` or NaN
    /// when `ddof >= n`).
    #[track_caller]
    pub fn std(&self, axes: &[isize], keepdims: bool, ddof: usize) -> Array {
        let _op = crate::array::OpScope::enter("std");
        self.var(axes, keepdims, ddof).sqrt()
    }
    /// Standard deviation of all elements.
    #[track_caller]
    pub fn std_all(&self, ddof: usize) -> Array {
        let _op = crate::array::OpScope::enter("std_all");
        self.std(&all_axes(self), false, ddof)
    }

    /// Index of the maximum along `axis` as `u32` (as MLX): the first one on ties; NaN counts
    /// as the maximum (the first NaN), as numpy. Not differentiable.
    ///
    /// # Panics
    /// If the axis is out of range or has extent 0.
    #[track_caller]
    pub fn argmax(&self, axis: isize, keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("argmax");
        arg_reduce(ArgReduceOp::ArgMax, self, axis, keepdims)
    }
    /// Index of the maximum in the flattened array (a 0-d `u32` array).
    #[track_caller]
    pub fn argmax_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("argmax_all");
        arg_reduce_all(ArgReduceOp::ArgMax, self)
    }
    /// Index of the minimum along `axis` as `u32`; ties give the first index, NaN wins.
    #[track_caller]
    pub fn argmin(&self, axis: isize, keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("argmin");
        arg_reduce(ArgReduceOp::ArgMin, self, axis, keepdims)
    }
    /// Index of the minimum in the flattened array (a 0-d `u32` array).
    #[track_caller]
    pub fn argmin_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("argmin_all");
        arg_reduce_all(ArgReduceOp::ArgMin, self)
    }

    /// `log(sum(exp(x)))` over `axes`, computed stably in one fused pass (integers in `f32`),
    /// the exponentials summed pairwise as in [`sum`](Array::sum).
    /// Over no elements it is `-inf`; an empty `axes` list returns `x` (as a float).
    #[track_caller]
    pub fn logsumexp(&self, axes: &[isize], keepdims: bool) -> Array {
        let _op = crate::array::OpScope::enter("logsumexp");
        let x = to_float(self);
        if axes.is_empty() {
            return x;
        }
        let ax = reduce_axes("logsumexp", &x, axes);
        finish(logsumexp_keepdims(&x, ax.clone()), x.shape(), &ax, keepdims)
    }
    /// `log(sum(exp(x)))` of all elements.
    #[track_caller]
    pub fn logsumexp_all(&self) -> Array {
        let _op = crate::array::OpScope::enter("logsumexp_all");
        self.logsumexp(&all_axes(self), false)
    }

    /// Softmax over `axes` (jointly, as one distribution per position of the other axes),
    /// stable and fused (integers in `f32`); the normaliser is summed pairwise as in
    /// [`sum`](Array::sum), so long rows still sum to 1 (2^25 zeros: each `2^-25`). An empty
    /// `axes` list gives ones.
    #[track_caller]
    pub fn softmax(&self, axes: &[isize]) -> Array {
        let _op = crate::array::OpScope::enter("softmax");
        let x = to_float(self);
        if axes.is_empty() {
            return crate::ops::ones_like(&x);
        }
        let ax = reduce_axes("softmax", &x, axes);
        softmax_axes(&x, ax)
    }

    /// Inclusive cumulative sum along `axis` (bool sums in `i32`, `u8` in `u32`).
    ///
    /// Float running sums are blocked (`backend::cpu::reduce::scan_sum_row`): each output goes
    /// through at most `2·256 + n/65536 + 1` roundings rather than up to `n`.
    #[track_caller]
    pub fn cumsum(&self, axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("cumsum");
        scan_op(ScanOp::Sum, self, axis, false, true)
    }
    /// Cumulative sum along `axis`, from the end when `reverse`; `inclusive == false` gives the
    /// exclusive scan (each output leaves out its own element, the first is 0).
    #[track_caller]
    pub fn cumsum_opts(&self, axis: isize, reverse: bool, inclusive: bool) -> Array {
        let _op = crate::array::OpScope::enter("cumsum_opts");
        scan_op(ScanOp::Sum, self, axis, reverse, inclusive)
    }
    /// Inclusive cumulative product along `axis`.
    ///
    /// Its derivatives are exact also where `x` has zeros: no rule divides by zero (the
    /// position of the first zero is handled apart, as MLX does).
    #[track_caller]
    pub fn cumprod(&self, axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("cumprod");
        scan_op(ScanOp::Prod, self, axis, false, true)
    }
    /// Cumulative product along `axis` with `reverse` / `inclusive` as in
    /// [`cumsum_opts`](Array::cumsum_opts) (an exclusive product starts at 1).
    #[track_caller]
    pub fn cumprod_opts(&self, axis: isize, reverse: bool, inclusive: bool) -> Array {
        let _op = crate::array::OpScope::enter("cumprod_opts");
        scan_op(ScanOp::Prod, self, axis, reverse, inclusive)
    }
}

/// See [`Array::all`].
#[track_caller]
pub fn all(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("all");
    x.all(axes, keepdims)
}
/// See [`Array::any`].
#[track_caller]
pub fn any(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("any");
    x.any(axes, keepdims)
}
/// See [`Array::var`].
#[track_caller]
pub fn var(x: &Array, axes: &[isize], keepdims: bool, ddof: usize) -> Array {
    let _op = crate::array::OpScope::enter("var");
    x.var(axes, keepdims, ddof)
}
/// See [`Array::std`].
#[track_caller]
pub fn std(x: &Array, axes: &[isize], keepdims: bool, ddof: usize) -> Array {
    let _op = crate::array::OpScope::enter("std");
    x.std(axes, keepdims, ddof)
}
/// See [`Array::argmax`].
#[track_caller]
pub fn argmax(x: &Array, axis: isize, keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("argmax");
    x.argmax(axis, keepdims)
}
/// See [`Array::argmin`].
#[track_caller]
pub fn argmin(x: &Array, axis: isize, keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("argmin");
    x.argmin(axis, keepdims)
}
/// See [`Array::logsumexp`].
#[track_caller]
pub fn logsumexp(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    let _op = crate::array::OpScope::enter("logsumexp");
    x.logsumexp(axes, keepdims)
}
/// See [`Array::softmax`].
#[track_caller]
pub fn softmax(x: &Array, axes: &[isize]) -> Array {
    let _op = crate::array::OpScope::enter("softmax");
    x.softmax(axes)
}
/// See [`Array::cumsum`].
#[track_caller]
pub fn cumsum(x: &Array, axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("cumsum");
    x.cumsum(axis)
}
/// See [`Array::cumsum_opts`].
#[track_caller]
pub fn cumsum_opts(x: &Array, axis: isize, reverse: bool, inclusive: bool) -> Array {
    let _op = crate::array::OpScope::enter("cumsum_opts");
    x.cumsum_opts(axis, reverse, inclusive)
}
/// See [`Array::cumprod`].
#[track_caller]
pub fn cumprod(x: &Array, axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("cumprod");
    x.cumprod(axis)
}
/// See [`Array::cumprod_opts`].
#[track_caller]
pub fn cumprod_opts(x: &Array, axis: isize, reverse: bool, inclusive: bool) -> Array {
    let _op = crate::array::OpScope::enter("cumprod_opts");
    x.cumprod_opts(axis, reverse, inclusive)
}
