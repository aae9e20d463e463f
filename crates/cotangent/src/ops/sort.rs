//! Sorting ops: [`argsort`], [`sort`] and [`topk`].
//!
//! [`argsort`] is a primitive (a stable sort on the CPU; on a CUDA device it runs on the host);
//! [`sort`] and [`topk`] gather with its indices (`take_along_axis`), so their gradients flow
//! to the elements they picked and their JVP and vmap rules are the gather's. NaN counts as
//! greater than every number: last in an ascending sort (as numpy), first in a descending one
//! and among the largest for `topk` (as PyTorch).
use super::shape::{axis_for, slice_raw};
use crate::primitives::shape::Slice;
use crate::primitives::sort::argsort_raw;
use crate::shape::Shape;
use crate::Array;

impl Array {
    /// The indices (`u32`, as MLX) that sort `self` along `axis`, smallest first or, with
    /// `descending`, largest first. The sort is stable: equal elements keep their order, in
    /// both directions. NaN is greater than every number (last ascending, first descending).
    /// Not differentiable (its gradient is zero).
    ///
    /// ```
    /// use cotangent::{self as ct, Array};
    /// let x = Array::from_slice(&[3.0f32, f32::NAN, 1.0, 3.0, 2.0], &[5]);
    /// assert_eq!(x.argsort(0, false).to_vec::<u32>()?, vec![2, 4, 0, 3, 1]);
    /// assert_eq!(x.argsort(-1, true).to_vec::<u32>()?, vec![1, 0, 3, 4, 2]);
    /// # Ok::<(), ct::Error>(())
    /// ```
    ///
    /// # Panics
    /// If `self` is 0-d or `axis` is out of range (reported at the caller's line).
    #[track_caller]
    pub fn argsort(&self, axis: isize, descending: bool) -> Array {
        let _op = crate::array::OpScope::enter("argsort");
        let a = sort_axis("argsort", self, axis);
        argsort_raw(self, a, descending)
    }

    /// `self` sorted along `axis` (ascending, or descending with `descending`), with NaN as in
    /// [`argsort`](Array::argsort). Built as `take_along_axis(self, argsort(self))`: the
    /// gradient of each sorted element goes back to the element it came from.
    ///
    /// ```
    /// use cotangent::{self as ct, Array};
    /// let x = Array::from_slice(&[3i32, 1, 2, 0, 5, 4], &[2, 3]);
    /// assert_eq!(x.sort(1, false).to_vec::<i32>()?, vec![1, 2, 3, 0, 4, 5]);
    /// assert_eq!(x.sort(0, true).to_vec::<i32>()?, vec![3, 5, 4, 0, 1, 2]);
    /// # Ok::<(), ct::Error>(())
    /// ```
    ///
    /// # Panics
    /// If `self` is 0-d or `axis` is out of range (reported at the caller's line).
    #[track_caller]
    pub fn sort(&self, axis: isize, descending: bool) -> Array {
        let _op = crate::array::OpScope::enter("sort");
        let a = sort_axis("sort", self, axis);
        self.take_along_axis(&argsort_raw(self, a, descending), a as isize)
    }

    /// The `k` largest elements along `axis` and their indices (`u32`), largest first, as
    /// `torch.topk(x, k, dim)`: `(values, indices)` with extent `k` on `axis`. Equal elements
    /// come in their order in `self`; NaN counts as the largest. The values are differentiable
    /// (a gather of `self`).
    ///
    /// ```
    /// use cotangent::{self as ct, Array};
    /// let x = Array::from_slice(&[1.0f32, 4.0, 2.0, 4.0, 0.5, 3.0], &[2, 3]);
    /// let (values, indices) = x.topk(2, -1);
    /// assert_eq!(values.to_vec::<f32>()?, vec![4.0, 2.0, 4.0, 3.0]);
    /// assert_eq!(indices.to_vec::<u32>()?, vec![1, 2, 0, 2]);
    /// # Ok::<(), ct::Error>(())
    /// ```
    ///
    /// # Panics
    /// If `self` is 0-d, `axis` is out of range or `k` exceeds the axis' extent (reported at
    /// the caller's line).
    #[track_caller]
    pub fn topk(&self, k: usize, axis: isize) -> (Array, Array) {
        let _op = crate::array::OpScope::enter("topk");
        let a = sort_axis("topk", self, axis);
        let n = self.shape()[a];
        assert!(
            k <= n,
            "cotangent::topk: k = {k} exceeds the extent {n} of axis {axis} of the array of shape {:?} ({})",
            self.shape(),
            self.dtype()
        );
        let order = argsort_raw(self, a, true);
        let nd = self.ndim();
        let mut shape = Shape::from_slice(self.shape());
        shape[a] = k;
        let indices = slice_raw(&order, Slice { starts: vec![0; nd], steps: vec![1; nd], shape });
        (self.take_along_axis(&indices, a as isize), indices)
    }
}

/// The normalised sort axis of `x` for `op`.
#[track_caller]
fn sort_axis(op: &str, x: &Array, axis: isize) -> usize {
    assert!(x.ndim() > 0, "cotangent::{op}: a 0-d array ({}) has no axis to sort along (axis {axis})", x.dtype());
    axis_for(op, axis, x.shape(), x.ndim())
}

/// See [`Array::argsort`].
///
/// ```
/// use cotangent::{self as ct, Array};
/// let x = Array::from_slice(&[2.0f32, 0.0, 1.0], &[3]);
/// assert_eq!(ct::argsort(&x, 0, false).to_vec::<u32>()?, vec![1, 2, 0]);
/// # Ok::<(), ct::Error>(())
/// ```
#[track_caller]
pub fn argsort(x: &Array, axis: isize, descending: bool) -> Array {
    let _op = crate::array::OpScope::enter("argsort");
    x.argsort(axis, descending)
}

/// See [`Array::sort`].
///
/// ```
/// use cotangent::{self as ct, Array};
/// let x = Array::from_slice(&[2.0f32, 0.0, 1.0], &[3]);
/// assert_eq!(ct::sort(&x, 0, false).to_vec::<f32>()?, vec![0.0, 1.0, 2.0]);
/// # Ok::<(), ct::Error>(())
/// ```
#[track_caller]
pub fn sort(x: &Array, axis: isize, descending: bool) -> Array {
    let _op = crate::array::OpScope::enter("sort");
    x.sort(axis, descending)
}

/// See [`Array::topk`].
///
/// ```
/// use cotangent::{self as ct, Array};
/// let x = Array::from_slice(&[2.0f32, 0.0, 1.0], &[3]);
/// let (v, i) = ct::topk(&x, 1, 0);
/// assert_eq!((v.to_vec::<f32>()?, i.to_vec::<u32>()?), (vec![2.0], vec![0]));
/// # Ok::<(), ct::Error>(())
/// ```
#[track_caller]
pub fn topk(x: &Array, k: usize, axis: isize) -> (Array, Array) {
    let _op = crate::array::OpScope::enter("topk");
    x.topk(k, axis)
}
