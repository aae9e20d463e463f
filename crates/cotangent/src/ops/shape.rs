//! Shape ops: reshape, transpose, broadcast, expand/squeeze, slicing (views), flip,
//! concatenate/stack/split, pad, tile and repeat.
use crate::primitives::shape::{Broadcast, Concatenate, Reshape, Slice, SliceUpdate, Transpose};
use crate::shape::{broadcast_shapes, normalize_axis, numel, Shape};
use crate::Array;

/// Normalise an axis for `op`, panicking with a clear message when out of range.
///
/// The panic is raised here, in a `#[track_caller]` function (never inside a closure, which
/// would not forward the location), so it points at the line that called the public op —
/// provided every function between that op and this one is `#[track_caller]` too and calls it
/// outside closures (use a loop, or [`axes_for`], to normalise several axes).
#[track_caller]
pub(crate) fn axis_for(op: &str, axis: isize, x_shape: &[usize], ndim: usize) -> usize {
    match normalize_axis(axis, ndim) {
        Some(a) => a,
        None if ndim == x_shape.len() => {
            panic!("cotangent::{op}: axis {axis} is out of range for shape {x_shape:?} ({ndim} axes)")
        }
        None => {
            panic!("cotangent::{op}: axis {axis} is out of range for a result of {ndim} axes (input shape {x_shape:?})")
        }
    }
}

/// [`axis_for`] of every axis in `axes`, in order.
#[track_caller]
pub(crate) fn axes_for(op: &str, axes: &[isize], x_shape: &[usize], ndim: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        out.push(axis_for(op, a, x_shape, ndim));
    }
    out
}

impl Array {
    /// The same elements in a new shape; one entry may be `-1` (inferred). A view when the data
    /// is contiguous.
    #[track_caller]
    pub fn reshape(&self, shape: &[isize]) -> Array {
        let _op = crate::array::OpScope::enter("reshape");
        let n = self.size();
        let known = shape.iter().filter(|&&d| d >= 0).try_fold(1usize, |k, &d| k.checked_mul(d as usize));
        let Some(known) = known else {
            panic!(
                "cotangent::reshape: cannot reshape {:?} ({}) to {shape:?}: the element count of the target \
                 overflows usize",
                self.shape(),
                self.dtype()
            )
        };
        let holes = shape.iter().filter(|&&d| d < 0).count();
        if holes > 1 || shape.iter().any(|&d| d < -1) {
            panic!("cotangent::reshape: at most one -1 allowed (the others must be >= 0), got {shape:?}");
        }
        let mut target = Shape::with_capacity(shape.len());
        for &d in shape {
            if d >= 0 {
                target.push(d as usize);
            } else if known != 0 && n.is_multiple_of(known) {
                target.push(n / known);
            } else {
                panic!(
                    "cotangent::reshape: cannot reshape {:?} ({n} elements) to {shape:?}: the -1 cannot be \
                     inferred, {n} is not a multiple of {known}",
                    self.shape()
                );
            }
        }
        crate::shape::check_shape(|| "reshape".into(), &target, self.dtype());
        if numel(&target) != n {
            panic!("cotangent::reshape: cannot reshape {:?} ({n} elements) to {shape:?}", self.shape());
        }
        self.reshape_exact(&target)
    }

    /// Reshape to an exact shape (no `-1`).
    #[track_caller]
    pub fn reshape_exact(&self, shape: &[usize]) -> Array {
        let _op = crate::array::OpScope::enter("reshape_exact");
        if self.shape() == shape {
            return self.clone();
        }
        crate::shape::check_shape(|| "reshape".into(), shape, self.dtype());
        assert!(numel(shape) == self.size(), "cotangent::reshape: cannot reshape {:?} to {shape:?}", self.shape());
        Array::from_primitive(Reshape(Shape::from_slice(shape)), vec![self.clone()], shape, self.dtype())
    }

    /// Flatten to one axis.
    #[track_caller]
    pub fn flatten(&self) -> Array {
        let _op = crate::array::OpScope::enter("flatten");
        self.reshape_exact(&[self.size()])
    }

    /// Permute the axes: axis `i` of the result is axis `perm[i]` of `self`. An empty `perm`
    /// reverses the axes.
    #[track_caller]
    pub fn transpose(&self, perm: &[isize]) -> Array {
        let _op = crate::array::OpScope::enter("transpose");
        let nd = self.ndim();
        if perm.is_empty() {
            return self.permute(&(0..nd).rev().collect::<Vec<_>>());
        }
        assert!(perm.len() == nd, "cotangent::transpose: permutation {perm:?} does not fit shape {:?}", self.shape());
        let p = axes_for("transpose", perm, self.shape(), nd);
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
    #[track_caller]
    pub fn t(&self) -> Array {
        let _op = crate::array::OpScope::enter("t");
        if self.ndim() < 2 {
            return self.clone();
        }
        self.swapaxes(-1, -2)
    }

    /// Swap two axes.
    #[track_caller]
    pub fn swapaxes(&self, a: isize, b: isize) -> Array {
        let _op = crate::array::OpScope::enter("swapaxes");
        let nd = self.ndim();
        let (a, b) = (axis_for("swapaxes", a, self.shape(), nd), axis_for("swapaxes", b, self.shape(), nd));
        let mut p: Vec<usize> = (0..nd).collect();
        p.swap(a, b);
        self.permute(&p)
    }

    /// Move axis `src` to position `dst`.
    #[track_caller]
    pub fn moveaxis(&self, src: isize, dst: isize) -> Array {
        let _op = crate::array::OpScope::enter("moveaxis");
        let nd = self.ndim();
        let (s, d) = (axis_for("moveaxis", src, self.shape(), nd), axis_for("moveaxis", dst, self.shape(), nd));
        let mut p: Vec<usize> = (0..nd).filter(|&i| i != s).collect();
        p.insert(d, s);
        self.permute(&p)
    }

    /// Broadcast to `shape` (numpy rules); a view.
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[usize]) -> Array {
        let _op = crate::array::OpScope::enter("broadcast_to");
        if self.shape() == shape {
            return self.clone();
        }
        let ok = broadcast_shapes(self.shape(), shape).map(|s| s.as_slice() == shape).unwrap_or(false);
        assert!(ok, "cotangent::broadcast_to: cannot broadcast {:?} to {shape:?}", self.shape());
        crate::shape::check_shape(|| "broadcast_to".into(), shape, self.dtype());
        Array::from_primitive(Broadcast(Shape::from_slice(shape)), vec![self.clone()], shape, self.dtype())
    }

    /// Insert unit axes at the given positions (positions in the result; negative allowed).
    #[track_caller]
    pub fn expand_dims(&self, axes: &[isize]) -> Array {
        let _op = crate::array::OpScope::enter("expand_dims");
        let nd = self.ndim() + axes.len();
        let mut ax = axes_for("expand_dims", axes, self.shape(), nd);
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
        let _op = crate::array::OpScope::enter("squeeze");
        let nd = self.ndim();
        let ax: Vec<usize> = if axes.is_empty() {
            (0..nd).filter(|&i| self.shape()[i] == 1).collect()
        } else {
            axes_for("squeeze", axes, self.shape(), nd)
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
    let _op = crate::array::OpScope::enter("reshape");
    x.reshape(shape)
}
/// See [`Array::flatten`].
#[track_caller]
pub fn flatten(x: &Array) -> Array {
    let _op = crate::array::OpScope::enter("flatten");
    x.flatten()
}
/// See [`Array::transpose`].
#[track_caller]
pub fn transpose(x: &Array, perm: &[isize]) -> Array {
    let _op = crate::array::OpScope::enter("transpose");
    x.transpose(perm)
}
/// See [`Array::swapaxes`].
#[track_caller]
pub fn swapaxes(x: &Array, a: isize, b: isize) -> Array {
    let _op = crate::array::OpScope::enter("swapaxes");
    x.swapaxes(a, b)
}
/// See [`Array::moveaxis`].
#[track_caller]
pub fn moveaxis(x: &Array, src: isize, dst: isize) -> Array {
    let _op = crate::array::OpScope::enter("moveaxis");
    x.moveaxis(src, dst)
}
/// See [`Array::broadcast_to`].
#[track_caller]
pub fn broadcast_to(x: &Array, shape: &[usize]) -> Array {
    let _op = crate::array::OpScope::enter("broadcast_to");
    x.broadcast_to(shape)
}
/// See [`Array::expand_dims`].
#[track_caller]
pub fn expand_dims(x: &Array, axes: &[isize]) -> Array {
    let _op = crate::array::OpScope::enter("expand_dims");
    x.expand_dims(axes)
}
/// See [`Array::squeeze`].
#[track_caller]
pub fn squeeze(x: &Array, axes: &[isize]) -> Array {
    let _op = crate::array::OpScope::enter("squeeze");
    x.squeeze(axes)
}

// ----- slicing ----------------------------------------------------------------------------------

/// Normalise one numpy slice `start:stop:step` of an axis of extent `n`: returns the first
/// index taken (0 when the result is empty) and the number of elements. Out-of-range bounds
/// clamp as in numpy; `None` is the open end in the direction of `step`.
pub(crate) fn normalize_slice(n: usize, start: Option<isize>, stop: Option<isize>, step: isize) -> (usize, usize) {
    assert!(step != 0, "slice step must not be zero");
    let n = n as isize;
    // adjust one bound as numpy's PySlice_AdjustIndices does
    let adjust = |v: isize| -> isize {
        if v < 0 {
            let v = v.saturating_add(n);
            if v < 0 {
                if step < 0 {
                    -1
                } else {
                    0
                }
            } else {
                v
            }
        } else if v >= n {
            if step < 0 {
                n - 1
            } else {
                n
            }
        } else {
            v
        }
    };
    let (start, stop) = if step > 0 {
        (start.map_or(0, adjust), stop.map_or(n, adjust))
    } else {
        (start.map_or(n - 1, adjust), stop.map_or(-1, adjust))
    };
    let len = if step > 0 {
        if stop > start {
            (stop - start - 1) / step + 1
        } else {
            0
        }
    } else if start > stop {
        (start - stop - 1) / (-step) + 1
    } else {
        0
    };
    if len == 0 {
        (0, 0)
    } else {
        (start as usize, len as usize)
    }
}

/// Build a [`Slice`] node (identity slices return `x` itself).
pub(crate) fn slice_raw(x: &Array, s: Slice) -> Array {
    if s.shape.as_slice() == x.shape() && s.starts.iter().all(|&v| v == 0) && s.steps.iter().all(|&v| v == 1) {
        return x.clone();
    }
    let shape = s.shape.clone();
    Array::from_primitive(s, vec![x.clone()], &shape, x.dtype())
}

/// Build a [`SliceUpdate`] node: `base` with the region `starts`/`steps` (shape of `update`)
/// replaced by `update` (same dtype).
pub(crate) fn slice_update_raw(base: &Array, update: &Array, starts: &[usize], steps: &[isize]) -> Array {
    if update.shape() == base.shape() && starts.iter().all(|&v| v == 0) && steps.iter().all(|&v| v == 1) {
        return update.clone();
    }
    if update.size() == 0 {
        return base.clone();
    }
    Array::from_primitive(
        SliceUpdate { starts: starts.to_vec(), steps: steps.to_vec() },
        vec![base.clone(), update.clone()],
        base.shape(),
        base.dtype(),
    )
}

/// Build a [`Concatenate`] node over arrays of one dtype (a single input is returned as is).
///
/// # Panics
/// If the joined extent overflows `usize` or the result is too large (see
/// [`check_shape`](crate::shape::check_shape)).
#[track_caller]
pub(crate) fn concatenate_raw(xs: &[Array], axis: usize) -> Array {
    if xs.len() == 1 {
        return xs[0].clone();
    }
    let mut shape = Shape::from_slice(xs[0].shape());
    let joined = xs.iter().try_fold(0usize, |n, x| n.checked_add(x.shape()[axis]));
    shape[axis] = match joined {
        Some(n) => n,
        None => {
            let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape()).collect();
            panic!("cotangent::concatenate: the joined extent of axis {axis} of shapes {shapes:?} overflows usize")
        }
    };
    crate::shape::check_shape(|| "concatenate".into(), &shape, xs[0].dtype());
    Array::from_primitive(Concatenate(axis), xs.to_vec(), &shape, xs[0].dtype())
}

/// Normalise numpy-style per-axis slices of `x` (missing trailing axes are taken whole).
#[track_caller]
fn slice_params(op: &str, x: &Array, starts: &[Option<isize>], stops: &[Option<isize>], steps: &[isize]) -> Slice {
    let nd = x.ndim();
    assert!(
        starts.len() == stops.len() && (steps.is_empty() || steps.len() == starts.len()),
        "cotangent::{op}: starts ({}), stops ({}) and steps ({}) must have the same length (steps may be empty)",
        starts.len(),
        stops.len(),
        steps.len()
    );
    assert!(
        starts.len() <= nd,
        "cotangent::{op}: {} axes sliced but the array has shape {:?}",
        starts.len(),
        x.shape()
    );
    let mut s = Slice { starts: vec![0; nd], steps: vec![1; nd], shape: Shape::from_slice(x.shape()) };
    for i in 0..starts.len() {
        let step = if steps.is_empty() { 1 } else { steps[i] };
        assert!(step != 0, "cotangent::{op}: step of axis {i} is zero (shape {:?})", x.shape());
        let (b, len) = normalize_slice(x.shape()[i], starts[i], stops[i], step);
        s.starts[i] = b;
        s.steps[i] = step;
        s.shape[i] = len;
    }
    s
}

/// What [`split`] cuts an axis into: a number of equal sections, or the indices where the
/// pieces begin (numpy's `split`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitSpec {
    /// This many equal pieces (the axis must divide evenly).
    Sections(usize),
    /// Cut before each of these indices (numpy slicing rules: negative indices count from the
    /// end, out-of-range indices clamp, decreasing indices give empty pieces).
    Indices(Vec<isize>),
}

impl From<usize> for SplitSpec {
    fn from(n: usize) -> SplitSpec {
        SplitSpec::Sections(n)
    }
}
impl From<&[isize]> for SplitSpec {
    fn from(v: &[isize]) -> SplitSpec {
        SplitSpec::Indices(v.to_vec())
    }
}
impl<const N: usize> From<&[isize; N]> for SplitSpec {
    fn from(v: &[isize; N]) -> SplitSpec {
        SplitSpec::Indices(v.to_vec())
    }
}
impl<const N: usize> From<[isize; N]> for SplitSpec {
    fn from(v: [isize; N]) -> SplitSpec {
        SplitSpec::Indices(v.to_vec())
    }
}
impl From<Vec<isize>> for SplitSpec {
    fn from(v: Vec<isize>) -> SplitSpec {
        SplitSpec::Indices(v)
    }
}

impl Array {
    /// numpy basic slicing `x[starts[0]:stops[0]:steps[0], ...]`: entry `i` slices axis `i`,
    /// axes beyond `starts.len()` are taken whole, `steps` may be empty (all 1). Negative
    /// indices count from the end, out-of-range bounds clamp, negative steps walk backwards
    /// (use `isize::MIN` / `isize::MAX` as open ends). The result is a view sharing `self`'s
    /// buffer.
    ///
    /// ```
    /// use cotangent::Array;
    /// let x = Array::from_slice(&[0i32, 1, 2, 3, 4, 5], &[2, 3]);
    /// assert_eq!(x.slice(&[0, -1], &[2, isize::MIN], &[1, -2]).to_vec::<i32>().unwrap(), vec![2, 0, 5, 3]);
    /// ```
    ///
    /// # Panics
    /// If the lengths disagree, more axes are given than `self` has, or a step is zero.
    #[track_caller]
    pub fn slice(&self, starts: &[isize], stops: &[isize], steps: &[isize]) -> Array {
        let _op = crate::array::OpScope::enter("slice");
        let st: Vec<Option<isize>> = starts.iter().map(|&v| Some(v)).collect();
        let sp: Vec<Option<isize>> = stops.iter().map(|&v| Some(v)).collect();
        slice_raw(self, slice_params("slice", self, &st, &sp, steps))
    }

    /// Row `i` of the first axis, numpy's `x[i]`: an array of shape `x.shape()[1..]`.
    /// Negative `i` counts from the end. A view; differentiable (the gradient of the row goes
    /// back to row `i`).
    ///
    /// ```
    /// use cotangent::{self as ct, Array};
    /// let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    /// assert_eq!(x.index(-1).to_vec::<f32>()?, vec![5.0, 6.0]);
    /// assert_eq!(x.index(1).index(0).item::<f32>()?, 3.0);
    /// # Ok::<(), ct::Error>(())
    /// ```
    ///
    /// # Panics
    /// If `self` is 0-d or `i` is out of range (reported at the caller's line).
    #[track_caller]
    pub fn index(&self, i: isize) -> Array {
        let _op = crate::array::OpScope::enter("index");
        if self.ndim() == 0 {
            panic!("cotangent::index: a 0-d array ({}) has no axis to index (index {i})", self.dtype());
        }
        self.index_in("index", 0, i)
    }

    /// Entry `i` of axis `axis`, numpy's `x[.., i, ..]` (or `np.take(x, i, axis)` with a
    /// scalar `i`): `self`'s shape without that axis. Negative `axis` and `i` count from the
    /// end. A view; differentiable.
    ///
    /// ```
    /// use cotangent::Array;
    /// let x = Array::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3]);
    /// assert_eq!(x.index_axis(1, -1).to_vec::<i32>().unwrap(), vec![3, 6]);
    /// ```
    ///
    /// # Panics
    /// If `axis` or `i` is out of range (reported at the caller's line).
    #[track_caller]
    pub fn index_axis(&self, axis: isize, i: isize) -> Array {
        let _op = crate::array::OpScope::enter("index_axis");
        let a = axis_for("index_axis", axis, self.shape(), self.ndim());
        self.index_in("index_axis", a, i)
    }

    /// Entry `i` of the normalised axis `a`, for op `op`.
    #[track_caller]
    fn index_in(&self, op: &str, a: usize, i: isize) -> Array {
        let n = self.shape()[a];
        let Some(k) = normalize_axis(i, n) else {
            panic!(
                "cotangent::{op}: index {i} is out of range for axis {a} of extent {n} (shape {:?}, {})",
                self.shape(),
                self.dtype()
            )
        };
        let nd = self.ndim();
        let mut s = Slice { starts: vec![0; nd], steps: vec![1; nd], shape: Shape::from_slice(self.shape()) };
        s.starts[a] = k;
        s.shape[a] = 1;
        let mut out = Shape::from_slice(self.shape());
        out.remove(a);
        slice_raw(self, s).reshape_exact(&out)
    }

    /// Slice one axis: `x[.., start:stop:step, ..]` with numpy semantics (`None` is the open
    /// end; negative indices count from the end; out-of-range bounds clamp). A view.
    ///
    /// # Panics
    /// If `axis` is out of range or `step` is zero.
    #[track_caller]
    pub fn slice_axis(&self, axis: isize, start: Option<isize>, stop: Option<isize>, step: isize) -> Array {
        let _op = crate::array::OpScope::enter("slice_axis");
        let nd = self.ndim();
        let a = axis_for("slice_axis", axis, self.shape(), nd);
        let mut st = vec![None; a + 1];
        let mut sp = vec![None; a + 1];
        let mut steps = vec![1; a + 1];
        st[a] = start;
        sp[a] = stop;
        steps[a] = step;
        slice_raw(self, slice_params("slice_axis", self, &st, &sp, &steps))
    }

    /// `self` with the region `starts:stops:steps` (as in [`slice`](Array::slice)) replaced by
    /// `update` (cast to `self`'s dtype and broadcast to the region's shape); JAX's
    /// `x.at[...].set(update)`. Returns a new array.
    ///
    /// # Panics
    /// As [`slice`](Array::slice), or if `update` does not broadcast to the region.
    #[track_caller]
    pub fn slice_update(&self, update: &Array, starts: &[isize], stops: &[isize], steps: &[isize]) -> Array {
        let _op = crate::array::OpScope::enter("slice_update");
        let st: Vec<Option<isize>> = starts.iter().map(|&v| Some(v)).collect();
        let sp: Vec<Option<isize>> = stops.iter().map(|&v| Some(v)).collect();
        let s = slice_params("slice_update", self, &st, &sp, steps);
        let ok = broadcast_shapes(update.shape(), &s.shape).map(|b| b == s.shape).unwrap_or(false);
        assert!(
            ok,
            "cotangent::slice_update: update of shape {:?} does not broadcast to the region's shape {:?}",
            update.shape(),
            s.shape.as_slice()
        );
        let u = update.astype(self.dtype()).broadcast_to(&s.shape);
        slice_update_raw(self, &u, &s.starts, &s.steps)
    }

    /// Reverse the order of elements along `axes` (all axes when `axes` is empty). A view with
    /// negative strides.
    ///
    /// # Panics
    /// If an axis is out of range or repeated.
    #[track_caller]
    pub fn flip(&self, axes: &[isize]) -> Array {
        let _op = crate::array::OpScope::enter("flip");
        let nd = self.ndim();
        let ax: Vec<usize> = if axes.is_empty() { (0..nd).collect() } else { axes_for("flip", axes, self.shape(), nd) };
        let mut s = Slice { starts: vec![0; nd], steps: vec![1; nd], shape: Shape::from_slice(self.shape()) };
        for &a in &ax {
            assert!(s.steps[a] == 1, "cotangent::flip: axis {a} repeated in {axes:?}");
            s.steps[a] = -1;
            s.starts[a] = self.shape()[a].saturating_sub(1);
        }
        if self.size() == 0 || ax.iter().all(|&a| self.shape()[a] <= 1) {
            return self.clone();
        }
        Array::from_primitive(s, vec![self.clone()], self.shape(), self.dtype())
    }

    /// Split into pieces along `axis`: `n` equal sections (`usize`), or cut before the given
    /// indices (`&[isize]`, `Vec<isize>`), as numpy's `split`. The pieces are views.
    ///
    /// ```
    /// use cotangent::Array;
    /// let x = Array::from_slice(&[0i32, 1, 2, 3, 4, 5], &[6]);
    /// assert_eq!(x.split(3, 0).len(), 3);
    /// let p = x.split(&[1, -2], 0);
    /// assert_eq!(p[1].to_vec::<i32>().unwrap(), vec![1, 2, 3]);
    /// ```
    ///
    /// # Panics
    /// If `axis` is out of range, `n` is zero, or `n` does not divide the axis.
    #[track_caller]
    pub fn split(&self, spec: impl Into<SplitSpec>, axis: isize) -> Vec<Array> {
        let _op = crate::array::OpScope::enter("split");
        let nd = self.ndim();
        let a = axis_for("split", axis, self.shape(), nd);
        let n = self.shape()[a];
        let bounds: Vec<(Option<isize>, Option<isize>)> = match spec.into() {
            SplitSpec::Sections(k) => {
                assert!(k > 0, "cotangent::split: number of sections must be positive");
                assert!(
                    n.is_multiple_of(k),
                    "cotangent::split: axis {a} of shape {:?} does not divide into {k} equal sections",
                    self.shape()
                );
                let w = (n / k) as isize;
                (0..k as isize).map(|i| (Some(i * w), Some((i + 1) * w))).collect()
            }
            SplitSpec::Indices(idx) => {
                let mut b = Vec::with_capacity(idx.len() + 1);
                let mut prev = Some(0);
                for &i in &idx {
                    b.push((prev, Some(i)));
                    prev = Some(i);
                }
                b.push((prev, None));
                b
            }
        };
        bounds
            .into_iter()
            .map(|(s, e)| {
                let (start, len) = normalize_slice(n, s, e, 1);
                let mut sl = Slice { starts: vec![0; nd], steps: vec![1; nd], shape: Shape::from_slice(self.shape()) };
                sl.starts[a] = start;
                sl.shape[a] = len;
                slice_raw(self, sl)
            })
            .collect()
    }

    /// Pad with a constant: `widths[i] = (before, after)` elements of `value` (converted to the
    /// dtype) around axis `i`; a single pair applies to every axis.
    ///
    /// # Panics
    /// If `widths` has neither one entry nor one per axis.
    #[track_caller]
    pub fn pad(&self, widths: &[(usize, usize)], value: f64) -> Array {
        let _op = crate::array::OpScope::enter("pad");
        let nd = self.ndim();
        assert!(
            widths.len() == nd || widths.len() == 1,
            "cotangent::pad: {} (before, after) pairs for shape {:?} (need 1 or {nd})",
            widths.len(),
            self.shape()
        );
        let w = |i: usize| if widths.len() == 1 { widths[0] } else { widths[i] };
        if (0..nd).all(|i| w(i) == (0, 0)) {
            return self.clone();
        }
        let mut shape: Vec<usize> = Vec::with_capacity(nd);
        for i in 0..nd {
            let (b, a) = w(i);
            match self.shape()[i].checked_add(b).and_then(|d| d.checked_add(a)) {
                Some(d) => shape.push(d),
                None => {
                    panic!("cotangent::pad: padding axis {i} of shape {:?} by ({b}, {a}) overflows usize", self.shape())
                }
            }
        }
        crate::shape::check_shape(|| "pad".into(), &shape, self.dtype());
        let starts: Vec<usize> = (0..nd).map(|i| w(i).0).collect();
        let base = crate::ops::full(&shape, value, self.dtype());
        if self.size() == 0 {
            return base;
        }
        slice_update_raw(&base, self, &starts, &vec![1; nd])
    }

    /// Repeat the whole array `reps[i]` times along axis `i`, as numpy's `tile` (a shorter
    /// `reps` applies to the trailing axes; a longer one adds leading axes).
    #[track_caller]
    pub fn tile(&self, reps: &[usize]) -> Array {
        let _op = crate::array::OpScope::enter("tile");
        let nd = self.ndim().max(reps.len());
        let mut xs: Vec<usize> = vec![1; nd - self.ndim()];
        xs.extend_from_slice(self.shape());
        let mut rs: Vec<usize> = vec![1; nd - reps.len()];
        rs.extend_from_slice(reps);
        let x = self.reshape_exact(&xs);
        if rs.iter().all(|&r| r == 1) {
            return x;
        }
        // [d0, d1, ..] -> [1, d0, 1, d1, ..] -> broadcast [r0, d0, r1, d1, ..] -> [r0*d0, ..]
        let inter: Vec<usize> = xs.iter().flat_map(|&d| [1, d]).collect();
        let big: Vec<usize> = xs.iter().zip(&rs).flat_map(|(&d, &r)| [r, d]).collect();
        let mut out: Vec<usize> = Vec::with_capacity(nd);
        for (&d, &r) in xs.iter().zip(&rs) {
            match d.checked_mul(r) {
                Some(e) => out.push(e),
                None => panic!("cotangent::tile: tiling shape {:?} by {reps:?} overflows usize", self.shape()),
            }
        }
        crate::shape::check_shape(|| "tile".into(), &out, self.dtype());
        x.reshape_exact(&inter).broadcast_to(&big).reshape_exact(&out)
    }

    /// Repeat every element `repeats` times along `axis`, as numpy's `repeat` with a scalar
    /// count (flatten first for numpy's `axis=None`).
    ///
    /// # Panics
    /// If `axis` is out of range.
    #[track_caller]
    pub fn repeat(&self, repeats: usize, axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("repeat");
        let nd = self.ndim();
        let a = axis_for("repeat", axis, self.shape(), nd);
        if repeats == 1 {
            return self.clone();
        }
        let x = self.expand_dims(&[a as isize + 1]);
        let mut big = x.shape().to_vec();
        big[a + 1] = repeats;
        let mut out = self.shape().to_vec();
        out[a] = match out[a].checked_mul(repeats) {
            Some(e) => e,
            None => panic!(
                "cotangent::repeat: repeating axis {a} of shape {:?} {repeats} times overflows usize",
                self.shape()
            ),
        };
        crate::shape::check_shape(|| "repeat".into(), &out, self.dtype());
        x.broadcast_to(&big).reshape_exact(&out)
    }

    /// Join arrays along an existing axis, as numpy's `concatenate`; dtypes promote.
    /// See [`concatenate`].
    #[track_caller]
    pub fn concatenate(xs: &[Array], axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("concatenate");
        concatenate(xs, axis)
    }

    /// Join arrays of one shape along a new axis, as numpy's `stack`. See [`stack`].
    #[track_caller]
    pub fn stack(xs: &[Array], axis: isize) -> Array {
        let _op = crate::array::OpScope::enter("stack");
        stack(xs, axis)
    }
}

/// Join arrays along an existing axis, as numpy's `concatenate`. Dtypes promote to a common
/// dtype; every extent other than `axis` must agree; 0-d arrays cannot be joined.
///
/// ```
/// use cotangent::{self as ct, Array};
/// let a = Array::from_slice(&[1i32, 2], &[1, 2]);
/// let b = Array::from_slice(&[3.5f32, 4.5, 5.5, 6.5], &[2, 2]);
/// assert_eq!(ct::concatenate(&[a, b], 0).to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.5, 4.5, 5.5, 6.5]);
/// ```
///
/// # Panics
/// If `xs` is empty, an array is 0-d, ranks or extents disagree, or `axis` is out of range.
#[track_caller]
pub fn concatenate(xs: &[Array], axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("concatenate");
    assert!(!xs.is_empty(), "cotangent::concatenate: needs at least one array");
    let nd = xs[0].ndim();
    let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape()).collect();
    assert!(nd > 0, "cotangent::concatenate: 0-d arrays cannot be concatenated (shapes {shapes:?})");
    let a = axis_for("concatenate", axis, xs[0].shape(), nd);
    for x in xs {
        let ok = x.ndim() == nd && (0..nd).all(|i| i == a || x.shape()[i] == xs[0].shape()[i]);
        assert!(ok, "cotangent::concatenate: shapes {shapes:?} disagree outside axis {axis}");
    }
    let dtype = xs.iter().skip(1).fold(xs[0].dtype(), |d, x| d.promote(x.dtype()));
    let cast: Vec<Array> = xs.iter().map(|x| x.astype(dtype)).collect();
    concatenate_raw(&cast, a)
}

/// Join arrays of one shape along a new axis `axis` (an axis of the result), as numpy's
/// `stack`; dtypes promote.
///
/// # Panics
/// If `xs` is empty, the shapes differ, or `axis` is out of range.
#[track_caller]
pub fn stack(xs: &[Array], axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("stack");
    assert!(!xs.is_empty(), "cotangent::stack: needs at least one array");
    let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape()).collect();
    assert!(xs.iter().all(|x| x.shape() == xs[0].shape()), "cotangent::stack: shapes {shapes:?} differ");
    let nd = xs[0].ndim() + 1;
    let a = axis_for("stack", axis, xs[0].shape(), nd);
    let mut out = xs[0].shape().to_vec();
    out.insert(a, xs.len());
    crate::shape::check_shape(|| "stack".into(), &out, xs[0].dtype());
    let ex: Vec<Array> = xs.iter().map(|x| x.expand_dims(&[a as isize])).collect();
    concatenate(&ex, a as isize)
}

/// See [`Array::slice`].
#[track_caller]
pub fn slice(x: &Array, starts: &[isize], stops: &[isize], steps: &[isize]) -> Array {
    let _op = crate::array::OpScope::enter("slice");
    x.slice(starts, stops, steps)
}
/// See [`Array::index`].
#[track_caller]
pub fn index(x: &Array, i: isize) -> Array {
    let _op = crate::array::OpScope::enter("index");
    x.index(i)
}
/// See [`Array::index_axis`].
#[track_caller]
pub fn index_axis(x: &Array, axis: isize, i: isize) -> Array {
    let _op = crate::array::OpScope::enter("index_axis");
    x.index_axis(axis, i)
}
/// See [`Array::slice_axis`].
#[track_caller]
pub fn slice_axis(x: &Array, axis: isize, start: Option<isize>, stop: Option<isize>, step: isize) -> Array {
    let _op = crate::array::OpScope::enter("slice_axis");
    x.slice_axis(axis, start, stop, step)
}
/// See [`Array::slice_update`].
#[track_caller]
pub fn slice_update(x: &Array, update: &Array, starts: &[isize], stops: &[isize], steps: &[isize]) -> Array {
    let _op = crate::array::OpScope::enter("slice_update");
    x.slice_update(update, starts, stops, steps)
}
/// See [`Array::flip`].
#[track_caller]
pub fn flip(x: &Array, axes: &[isize]) -> Array {
    let _op = crate::array::OpScope::enter("flip");
    x.flip(axes)
}
/// See [`Array::split`].
#[track_caller]
pub fn split(x: &Array, spec: impl Into<SplitSpec>, axis: isize) -> Vec<Array> {
    let _op = crate::array::OpScope::enter("split");
    x.split(spec, axis)
}
/// See [`Array::pad`].
#[track_caller]
pub fn pad(x: &Array, widths: &[(usize, usize)], value: f64) -> Array {
    let _op = crate::array::OpScope::enter("pad");
    x.pad(widths, value)
}
/// See [`Array::tile`].
#[track_caller]
pub fn tile(x: &Array, reps: &[usize]) -> Array {
    let _op = crate::array::OpScope::enter("tile");
    x.tile(reps)
}
/// See [`Array::repeat`].
#[track_caller]
pub fn repeat(x: &Array, repeats: usize, axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("repeat");
    x.repeat(repeats, axis)
}
