//! Shape ops: reshape, transpose, broadcast, expand/squeeze and friends.
use crate::primitives::shape::{Broadcast, Reshape, Transpose};
use crate::shape::{broadcast_shapes, normalize_axis, numel, Shape};
use crate::Array;

/// Normalise an axis for `op`, panicking with a clear message when out of range.
#[track_caller]
pub(crate) fn axis_for(op: &str, axis: isize, x_shape: &[usize], ndim: usize) -> usize {
    normalize_axis(axis, ndim)
        .unwrap_or_else(|| panic!("cotangent::{op}: axis {axis} is out of range for shape {x_shape:?}"))
}

impl Array {
    /// The same elements in a new shape; one entry may be `-1` (inferred). A view when the data
    /// is contiguous.
    #[track_caller]
    pub fn reshape(&self, shape: &[isize]) -> Array {
        let n = self.size();
        let known: usize = shape.iter().filter(|&&d| d >= 0).map(|&d| d as usize).product();
        let holes = shape.iter().filter(|&&d| d < 0).count();
        assert!(
            holes <= 1 && shape.iter().all(|&d| d >= -1),
            "cotangent::reshape: at most one -1 allowed, got {shape:?}"
        );
        let target: Shape = shape
            .iter()
            .map(|&d| {
                if d >= 0 {
                    d as usize
                } else {
                    assert!(
                        known != 0 && n % known == 0,
                        "cotangent::reshape: cannot reshape {:?} to {shape:?}",
                        self.shape()
                    );
                    n / known
                }
            })
            .collect();
        assert!(
            numel(&target) == n,
            "cotangent::reshape: cannot reshape {:?} ({n} elements) to {shape:?}",
            self.shape()
        );
        self.reshape_exact(&target)
    }

    /// Reshape to an exact shape (no `-1`).
    #[track_caller]
    pub fn reshape_exact(&self, shape: &[usize]) -> Array {
        if self.shape() == shape {
            return self.clone();
        }
        assert!(numel(shape) == self.size(), "cotangent::reshape: cannot reshape {:?} to {shape:?}", self.shape());
        Array::from_primitive(Reshape(Shape::from_slice(shape)), vec![self.clone()], shape, self.dtype())
    }

    /// Flatten to one axis.
    pub fn flatten(&self) -> Array {
        self.reshape_exact(&[self.size()])
    }

    /// Permute the axes: axis `i` of the result is axis `perm[i]` of `self`. An empty `perm`
    /// reverses the axes.
    #[track_caller]
    pub fn transpose(&self, perm: &[isize]) -> Array {
        let nd = self.ndim();
        if perm.is_empty() {
            return self.permute(&(0..nd).rev().collect::<Vec<_>>());
        }
        assert!(perm.len() == nd, "cotangent::transpose: permutation {perm:?} does not fit shape {:?}", self.shape());
        let p: Vec<usize> = perm.iter().map(|&a| axis_for("transpose", a, self.shape(), nd)).collect();
        let mut seen = vec![false; nd];
        for &a in &p {
            assert!(!seen[a], "cotangent::transpose: {perm:?} is not a permutation");
            seen[a] = true;
        }
        self.permute(&p)
    }

    pub(crate) fn permute(&self, perm: &[usize]) -> Array {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return self.clone();
        }
        let shape: Shape = perm.iter().map(|&p| self.shape()[p]).collect();
        Array::from_primitive(Transpose(perm.to_vec()), vec![self.clone()], &shape, self.dtype())
    }

    /// The last two axes swapped (the matrix transpose); a 1-D array is returned unchanged.
    pub fn t(&self) -> Array {
        if self.ndim() < 2 {
            return self.clone();
        }
        self.swapaxes(-1, -2)
    }

    /// Swap two axes.
    #[track_caller]
    pub fn swapaxes(&self, a: isize, b: isize) -> Array {
        let nd = self.ndim();
        let (a, b) = (axis_for("swapaxes", a, self.shape(), nd), axis_for("swapaxes", b, self.shape(), nd));
        let mut p: Vec<usize> = (0..nd).collect();
        p.swap(a, b);
        self.permute(&p)
    }

    /// Move axis `src` to position `dst`.
    #[track_caller]
    pub fn moveaxis(&self, src: isize, dst: isize) -> Array {
        let nd = self.ndim();
        let (s, d) = (axis_for("moveaxis", src, self.shape(), nd), axis_for("moveaxis", dst, self.shape(), nd));
        let mut p: Vec<usize> = (0..nd).filter(|&i| i != s).collect();
        p.insert(d, s);
        self.permute(&p)
    }

    /// Broadcast to `shape` (numpy rules); a view.
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[usize]) -> Array {
        if self.shape() == shape {
            return self.clone();
        }
        let ok = broadcast_shapes(self.shape(), shape).map(|s| s.as_slice() == shape).unwrap_or(false);
        assert!(ok, "cotangent::broadcast_to: cannot broadcast {:?} to {shape:?}", self.shape());
        Array::from_primitive(Broadcast(Shape::from_slice(shape)), vec![self.clone()], shape, self.dtype())
    }

    /// Insert unit axes at the given positions (positions in the result; negative allowed).
    #[track_caller]
    pub fn expand_dims(&self, axes: &[isize]) -> Array {
        let nd = self.ndim() + axes.len();
        let mut ax: Vec<usize> = axes.iter().map(|&a| axis_for("expand_dims", a, self.shape(), nd)).collect();
        ax.sort_unstable();
        ax.dedup();
        assert!(ax.len() == axes.len(), "cotangent::expand_dims: repeated axis in {axes:?}");
        let mut shape = Shape::new();
        let mut it = self.shape().iter();
        for i in 0..nd {
            if ax.binary_search(&i).is_ok() {
                shape.push(1);
            } else {
                shape.push(*it.next().unwrap());
            }
        }
        self.reshape_exact(&shape)
    }

    /// Remove unit axes: the given ones, or all when `axes` is empty.
    #[track_caller]
    pub fn squeeze(&self, axes: &[isize]) -> Array {
        let nd = self.ndim();
        let ax: Vec<usize> = if axes.is_empty() {
            (0..nd).filter(|&i| self.shape()[i] == 1).collect()
        } else {
            axes.iter().map(|&a| axis_for("squeeze", a, self.shape(), nd)).collect()
        };
        for &a in &ax {
            assert!(self.shape()[a] == 1, "cotangent::squeeze: axis {a} of shape {:?} is not of size 1", self.shape());
        }
        let shape: Shape = (0..nd).filter(|i| !ax.contains(i)).map(|i| self.shape()[i]).collect();
        self.reshape_exact(&shape)
    }
}

/// See [`Array::reshape`].
#[track_caller]
pub fn reshape(x: &Array, shape: &[isize]) -> Array {
    x.reshape(shape)
}
/// See [`Array::flatten`].
pub fn flatten(x: &Array) -> Array {
    x.flatten()
}
/// See [`Array::transpose`].
#[track_caller]
pub fn transpose(x: &Array, perm: &[isize]) -> Array {
    x.transpose(perm)
}
/// See [`Array::swapaxes`].
#[track_caller]
pub fn swapaxes(x: &Array, a: isize, b: isize) -> Array {
    x.swapaxes(a, b)
}
/// See [`Array::moveaxis`].
#[track_caller]
pub fn moveaxis(x: &Array, src: isize, dst: isize) -> Array {
    x.moveaxis(src, dst)
}
/// See [`Array::broadcast_to`].
#[track_caller]
pub fn broadcast_to(x: &Array, shape: &[usize]) -> Array {
    x.broadcast_to(shape)
}
/// See [`Array::expand_dims`].
#[track_caller]
pub fn expand_dims(x: &Array, axes: &[isize]) -> Array {
    x.expand_dims(axes)
}
/// See [`Array::squeeze`].
#[track_caller]
pub fn squeeze(x: &Array, axes: &[isize]) -> Array {
    x.squeeze(axes)
}
