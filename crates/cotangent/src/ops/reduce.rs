//! Reductions over axes (`keepdims`, negative axes; an empty axes list reduces nothing) and
//! their `*_all` forms.
use super::shape::axis_for;
use crate::primitives::reduce::{Reduce, ReduceOp};
use crate::{Array, DType};

/// Reduce the given (normalised) axes, keeping them as unit axes.
pub fn reduce_keepdims(op: ReduceOp, x: &Array, mut axes: Vec<usize>) -> Array {
    axes.sort_unstable();
    axes.dedup();
    let shape: Vec<usize> = x.shape().iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    Array::from_primitive(Reduce { op, axes }, vec![x.clone()], &shape, x.dtype())
}

/// Normalise the axes of a reduction named `op`.
#[track_caller]
pub(crate) fn reduce_axes(op: &str, x: &Array, axes: &[isize]) -> Vec<usize> {
    let mut v: Vec<usize> = axes.iter().map(|&a| axis_for(op, a, x.shape(), x.ndim())).collect();
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
    if axes.is_empty() {
        return x.clone();
    }
    let ax = reduce_axes(op.name(), x, axes);
    let x = if op == ReduceOp::Sum || op == ReduceOp::Prod {
        match x.dtype() {
            DType::Bool | DType::U8 => x.astype(if x.dtype() == DType::Bool { DType::I32 } else { DType::U32 }),
            _ => x.clone(),
        }
    } else {
        x.clone()
    };
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
    /// Sum over `axes` (bool and u8 sum in i32/u32).
    #[track_caller]
    pub fn sum(&self, axes: &[isize], keepdims: bool) -> Array {
        reduce(ReduceOp::Sum, self, axes, keepdims)
    }
    /// Sum of all elements (a 0-d array).
    pub fn sum_all(&self) -> Array {
        reduce(ReduceOp::Sum, self, &all_axes(self), false)
    }
    /// Product over `axes`.
    #[track_caller]
    pub fn prod(&self, axes: &[isize], keepdims: bool) -> Array {
        reduce(ReduceOp::Prod, self, axes, keepdims)
    }
    /// Product of all elements.
    pub fn prod_all(&self) -> Array {
        reduce(ReduceOp::Prod, self, &all_axes(self), false)
    }
    /// Maximum over `axes` (NaN propagates).
    #[track_caller]
    pub fn max(&self, axes: &[isize], keepdims: bool) -> Array {
        reduce(ReduceOp::Max, self, axes, keepdims)
    }
    /// Maximum of all elements.
    #[track_caller]
    pub fn max_all(&self) -> Array {
        reduce(ReduceOp::Max, self, &all_axes(self), false)
    }
    /// Minimum over `axes` (NaN propagates).
    #[track_caller]
    pub fn min(&self, axes: &[isize], keepdims: bool) -> Array {
        reduce(ReduceOp::Min, self, axes, keepdims)
    }
    /// Minimum of all elements.
    #[track_caller]
    pub fn min_all(&self) -> Array {
        reduce(ReduceOp::Min, self, &all_axes(self), false)
    }
    /// Mean over `axes` (integers average in `f32`).
    #[track_caller]
    pub fn mean(&self, axes: &[isize], keepdims: bool) -> Array {
        if axes.is_empty() {
            return self.clone();
        }
        let ax = reduce_axes("mean", self, axes);
        let n: usize = ax.iter().map(|&a| self.shape()[a]).product();
        let x = self.astype(self.dtype().to_float());
        x.sum(axes, keepdims) / n as f64
    }
    /// Mean of all elements.
    pub fn mean_all(&self) -> Array {
        self.mean(&all_axes(self), false)
    }
}

/// See [`Array::sum`].
#[track_caller]
pub fn sum(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    x.sum(axes, keepdims)
}
/// See [`Array::prod`].
#[track_caller]
pub fn prod(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    x.prod(axes, keepdims)
}
/// See [`Array::max`].
#[track_caller]
pub fn max(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    x.max(axes, keepdims)
}
/// See [`Array::min`].
#[track_caller]
pub fn min(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    x.min(axes, keepdims)
}
/// See [`Array::mean`].
#[track_caller]
pub fn mean(x: &Array, axes: &[isize], keepdims: bool) -> Array {
    x.mean(axes, keepdims)
}
