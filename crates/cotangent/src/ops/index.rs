//! Indexing ops: [`take`], [`take_along_axis`], [`put_along_axis`], [`scatter_add`],
//! [`scatter_add_along_axis`] and [`one_hot`], with numpy semantics.
//!
//! Indices are any integer dtype (`u8`, `u32`, `i32`, `i64`); negative indices count from the
//! end. Evaluation is lazy, so an out-of-range index cannot panic when the op is built: instead
//! evaluating the result returns `Err(Error::Eval(..))` naming the index, axis and extent.
use super::shape::axis_for;
use crate::primitives::index::{gather, scatter, ScatterMode};
use crate::shape::broadcast_shapes;
use crate::{Array, DType};

#[track_caller]
fn check_indices(op: &str, idx: &Array) {
    assert!(
        idx.dtype().is_int(),
        "cotangent::{op}: indices must have an integer dtype, got {} (shape {:?})",
        idx.dtype(),
        idx.shape()
    );
}

/// Broadcast the extents of `x` and `idx` on every axis but `axis` (numpy's along-axis rule).
/// Returns the broadcast non-axis shape as a full-rank shape with `axis` left as in `x`.
#[track_caller]
fn along_axis_shape(op: &str, x: &Array, idx: &Array, axis: usize) -> Vec<usize> {
    assert!(
        x.ndim() == idx.ndim(),
        "cotangent::{op}: indices of shape {:?} must have the rank of the array's shape {:?}",
        idx.shape(),
        x.shape()
    );
    let mut shape = Vec::with_capacity(x.ndim());
    for i in 0..x.ndim() {
        if i == axis {
            shape.push(x.shape()[i]);
            continue;
        }
        match broadcast_shapes(&[x.shape()[i]], &[idx.shape()[i]]) {
            Some(s) => shape.push(s[0]),
            None => panic!(
                "cotangent::{op}: indices of shape {:?} do not broadcast against the array's shape {:?} ({}) on \
                 axis {i}",
                idx.shape(),
                x.shape(),
                x.dtype()
            ),
        }
    }
    shape
}

fn with_axis(shape: &[usize], axis: usize, n: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[axis] = n;
    s
}

impl Array {
    /// Elements gathered along `axis` by an integer index array of any shape (numpy's `take`):
    /// the result has shape `x.shape[..axis] ++ indices.shape ++ x.shape[axis+1..]`.
    ///
    /// # Panics
    /// If `axis` is out of range or `indices` is not an integer array.
    #[track_caller]
    pub fn take(&self, indices: &Array, axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("take");
        check_indices("take", indices);
        let a = axis_for("take", axis, self.shape(), self.ndim());
        let (pre, post) = (&self.shape()[..a], &self.shape()[a + 1..]);
        let m = indices.size();
        let mut ishape = vec![1; self.ndim()];
        ishape[a] = m;
        let idx = indices.reshape_exact(&ishape).broadcast_to(&with_axis(self.shape(), a, m));
        let out: Vec<usize> = pre.iter().chain(indices.shape()).chain(post).copied().collect();
        gather(self, &idx, a).reshape_exact(&out)
    }

    /// Elements picked along `axis` by `indices` of the same rank (numpy's `take_along_axis`):
    /// `out[.., j, ..] = x[.., indices[.., j, ..], ..]`; the other axes broadcast.
    ///
    /// # Panics
    /// If the ranks differ, the other axes do not broadcast, or `indices` is not integer.
    #[track_caller]
    pub fn take_along_axis(&self, indices: &Array, axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("take_along_axis");
        check_indices("take_along_axis", indices);
        let a = axis_for("take_along_axis", axis, self.shape(), self.ndim());
        let s = along_axis_shape("take_along_axis", self, indices, a);
        let x = self.broadcast_to(&s);
        let idx = indices.broadcast_to(&with_axis(&s, a, indices.shape()[a]));
        gather(&x, &idx, a)
    }

    /// A copy of `x` with `values` written at `indices` along `axis` (numpy's `put_along_axis`,
    /// returning a new array). `indices` has `x`'s rank and broadcasts to `x` on the other axes;
    /// `values` is cast to `x`'s dtype and broadcast to the indices' shape. With duplicate
    /// indices the last one (in row-major order) wins; its gradient goes to that value only.
    #[track_caller]
    pub fn put_along_axis(&self, indices: &Array, values: &Array, axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("put_along_axis");
        self.scatter_along("put_along_axis", ScatterMode::Put, indices, values, axis)
    }

    /// A copy of `x` with `updates` added at `indices` along `axis`, duplicates accumulating:
    /// `out[.., indices[.., j, ..], ..] += updates[.., j, ..]`. Shapes as in
    /// [`put_along_axis`](Array::put_along_axis).
    #[track_caller]
    pub fn scatter_add_along_axis(&self, indices: &Array, updates: &Array, axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("scatter_add_along_axis");
        self.scatter_along("scatter_add_along_axis", ScatterMode::Add, indices, updates, axis)
    }

    #[track_caller]
    fn scatter_along(&self, op: &str, mode: ScatterMode, indices: &Array, values: &Array, axis: isize) -> Array {
        check_indices(op, indices);
        let a = axis_for(op, axis, self.shape(), self.ndim());
        let s = along_axis_shape(op, self, indices, a);
        assert!(
            s.as_slice() == self.shape(),
            "cotangent::{op}: indices of shape {:?} would broadcast the array of shape {:?}",
            indices.shape(),
            self.shape()
        );
        let ishape = with_axis(&s, a, indices.shape()[a]);
        let idx = indices.broadcast_to(&ishape);
        let ok = broadcast_shapes(values.shape(), &ishape).map(|b| b.as_slice() == ishape.as_slice()).unwrap_or(false);
        assert!(
            ok,
            "cotangent::{op}: values of shape {:?} do not broadcast to the indices' shape {ishape:?}",
            values.shape()
        );
        let v = values.astype(self.dtype()).broadcast_to(&ishape);
        scatter(mode, self, &idx, &v, a)
    }

    /// The adjoint of [`take`](Array::take): a copy of `x` with `updates` added at `indices`
    /// along `axis`, duplicates accumulating. `updates` broadcasts to
    /// `x.shape[..axis] ++ indices.shape ++ x.shape[axis+1..]` and is cast to `x`'s dtype.
    #[track_caller]
    pub fn scatter_add(&self, indices: &Array, updates: &Array, axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("scatter_add");
        check_indices("scatter_add", indices);
        let a = axis_for("scatter_add", axis, self.shape(), self.ndim());
        let (pre, post) = (&self.shape()[..a], &self.shape()[a + 1..]);
        let ushape: Vec<usize> = pre.iter().chain(indices.shape()).chain(post).copied().collect();
        let ok = broadcast_shapes(updates.shape(), &ushape).map(|b| b.as_slice() == ushape.as_slice()).unwrap_or(false);
        assert!(
            ok,
            "cotangent::scatter_add: updates of shape {:?} do not broadcast to {ushape:?} (array {:?}, indices {:?}, \
             axis {a})",
            updates.shape(),
            self.shape(),
            indices.shape()
        );
        let m = indices.size();
        let flat = with_axis(self.shape(), a, m);
        let mut ishape = vec![1; self.ndim()];
        ishape[a] = m;
        let idx = indices.reshape_exact(&ishape).broadcast_to(&flat);
        let upd = updates.astype(self.dtype()).broadcast_to(&ushape).reshape_exact(&flat);
        scatter(ScatterMode::Add, self, &idx, &upd, a)
    }
}

/// See [`Array::take`].
#[track_caller]
pub fn take(x: &Array, indices: &Array, axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("take");
    x.take(indices, axis)
}
/// See [`Array::take_along_axis`].
#[track_caller]
pub fn take_along_axis(x: &Array, indices: &Array, axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("take_along_axis");
    x.take_along_axis(indices, axis)
}
/// See [`Array::put_along_axis`].
#[track_caller]
pub fn put_along_axis(x: &Array, indices: &Array, values: &Array, axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("put_along_axis");
    x.put_along_axis(indices, values, axis)
}
/// See [`Array::scatter_add_along_axis`].
#[track_caller]
pub fn scatter_add_along_axis(x: &Array, indices: &Array, updates: &Array, axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("scatter_add_along_axis");
    x.scatter_add_along_axis(indices, updates, axis)
}
/// See [`Array::scatter_add`].
#[track_caller]
pub fn scatter_add(x: &Array, indices: &Array, updates: &Array, axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("scatter_add");
    x.scatter_add(indices, updates, axis)
}

/// One-hot encoding: shape `indices.shape ++ [num_classes]`, `1` at each index and `0`
/// elsewhere, in `dtype`. Indices outside `[0, num_classes)` give all-zero rows (as JAX).
#[track_caller]
pub fn one_hot(indices: &Array, num_classes: usize, dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("one_hot");
    check_indices("one_hot", indices);
    let classes = crate::ops::arange(0.0, num_classes as f64, 1.0, DType::I64);
    indices.astype(DType::I64).expand_dims(&[-1]).equal(&classes).astype(dtype)
}
