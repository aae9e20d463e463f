//! Shape primitives. Views (reshape of contiguous data, transpose, broadcast) share the input's
//! buffer through strides instead of copying.
use crate::primitive::{Op, Primitive};
use crate::shape::Shape;
use crate::{Array, Result};

/// Reshape to a shape with the same number of elements (a view when the input is contiguous).
#[derive(Debug, Clone)]
pub struct Reshape(pub Shape);

impl Primitive for Reshape {
    fn op(&self) -> Op<'_> {
        Op::Reshape(self)
    }
    fn name(&self) -> &str {
        "reshape"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reshape{:?}", self.0.as_slice())
    }
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        Ok(vec![cotangents[0].reshape_exact(primals[0].shape())])
    }
    fn jvp(
        &self,
        _primals: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        Ok(vec![tangents[0].reshape_exact(&self.0)])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let ax = axes[0].expect("batched input");
        let x = inputs[0].moveaxis(ax as isize, 0);
        let mut shape = vec![x.shape()[0]];
        shape.extend_from_slice(&self.0);
        Ok((vec![x.reshape_exact(&shape)], vec![Some(0)]))
    }
}

/// Permute the axes (always a view).
#[derive(Debug, Clone)]
pub struct Transpose(pub Vec<usize>);

impl Primitive for Transpose {
    fn op(&self) -> Op<'_> {
        Op::Transpose(self)
    }
    fn name(&self) -> &str {
        "transpose"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "transpose{:?}", self.0)
    }
    fn vjp(
        &self,
        _primals: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let mut inv = vec![0; self.0.len()];
        for (i, &p) in self.0.iter().enumerate() {
            inv[p] = i;
        }
        Ok(vec![cotangents[0].permute(&inv)])
    }
    fn jvp(
        &self,
        _primals: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        Ok(vec![tangents[0].permute(&self.0)])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let ax = axes[0].expect("batched input");
        let x = inputs[0].moveaxis(ax as isize, 0);
        let mut perm = vec![0];
        perm.extend(self.0.iter().map(|&p| p + 1));
        Ok((vec![x.permute(&perm)], vec![Some(0)]))
    }
}

/// Broadcast to a larger shape, numpy rules (always a view with zero strides).
#[derive(Debug, Clone)]
pub struct Broadcast(pub Shape);

impl Primitive for Broadcast {
    fn op(&self) -> Op<'_> {
        Op::Broadcast(self)
    }
    fn name(&self) -> &str {
        "broadcast_to"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "broadcast_to{:?}", self.0.as_slice())
    }
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::sum_to_shape(&cotangents[0], primals[0].shape())])
    }
    fn jvp(
        &self,
        _primals: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        Ok(vec![tangents[0].broadcast_to(&self.0)])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let ax = axes[0].expect("batched input");
        let x = inputs[0].moveaxis(ax as isize, 0);
        // align the unbatched axes to the right of the target shape
        let r = x.ndim() - 1;
        let mut shape = vec![x.shape()[0]];
        shape.extend(std::iter::repeat_n(1, self.0.len() - r));
        shape.extend_from_slice(&x.shape()[1..]);
        let x = x.reshape_exact(&shape);
        let mut target = vec![x.shape()[0]];
        target.extend_from_slice(&self.0);
        Ok((vec![x.broadcast_to(&target)], vec![Some(0)]))
    }
}

/// Move the batch axis of a vmapped input to the front, or broadcast an unbatched input to
/// batch size `b` along a new leading axis.
pub(crate) fn batch_front(x: &Array, axis: Option<usize>, b: usize) -> Array {
    match axis {
        Some(ax) => x.moveaxis(ax as isize, 0),
        None => {
            let mut shape = vec![b];
            shape.extend_from_slice(x.shape());
            x.expand_dims(&[0]).broadcast_to(&shape)
        }
    }
}

/// The batch size of a vmapped primitive's inputs (the extent of the first batch axis).
pub(crate) fn batch_size(inputs: &[Array], axes: &[Option<usize>]) -> Result<usize> {
    inputs
        .iter()
        .zip(axes)
        .find_map(|(x, a)| a.map(|a| x.shape()[a]))
        .ok_or_else(|| crate::Error::Transform("vmap rule called without a batched input".into()))
}

/// A strided view of part of the input: along axis `i`, `shape[i]` elements starting at
/// `starts[i]`, every `steps[i]`-th (negative steps walk backwards). The parameters are
/// normalised (in range), as the ops layer computes them from numpy-style slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// First index taken along every axis (0 where the output axis is empty).
    pub starts: Vec<usize>,
    /// Step along every axis (non-zero, may be negative).
    pub steps: Vec<isize>,
    /// The output shape.
    pub shape: Shape,
}

impl Slice {
    fn with_batch(&self, b: usize) -> Slice {
        let mut starts = vec![0];
        starts.extend_from_slice(&self.starts);
        let mut steps = vec![1];
        steps.extend_from_slice(&self.steps);
        let mut shape = Shape::from_slice(&[b]);
        shape.extend_from_slice(&self.shape);
        Slice { starts, steps, shape }
    }
}

impl Primitive for Slice {
    fn op(&self) -> Op<'_> {
        Op::Slice(self)
    }
    fn name(&self) -> &str {
        "slice"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slice(starts={:?}, steps={:?}, shape={:?})", self.starts, self.steps, self.shape.as_slice())
    }
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let region = (self.starts.clone(), self.steps.clone());
        Ok(vec![ScatterSlices::apply(primals[0].shape(), vec![region], vec![cotangents[0].clone()])])
    }
    fn jvp(
        &self,
        _primals: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::shape::slice_raw(&tangents[0], self.clone())])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let b = batch_size(inputs, axes)?;
        let x = batch_front(&inputs[0], axes[0], b);
        Ok((vec![crate::ops::shape::slice_raw(&x, self.with_batch(b))], vec![Some(0)]))
    }
    fn is_equivalent(&self, other: &dyn Primitive) -> bool {
        crate::primitive::same_as(self, other)
    }
}

/// A copy of `base` (input 0) with the strided region described by `starts`/`steps` (as in
/// [`Slice`], with the region's shape being the shape of input 1) replaced by `update`
/// (input 1). Both inputs have the same dtype. The VJP of [`Slice`] and the kernel of `pad`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceUpdate {
    /// First index of the region along every axis.
    pub starts: Vec<usize>,
    /// Step of the region along every axis.
    pub steps: Vec<isize>,
}

impl SliceUpdate {
    fn as_slice(&self, shape: &[usize]) -> Slice {
        Slice { starts: self.starts.clone(), steps: self.steps.clone(), shape: Shape::from_slice(shape) }
    }
}

impl Primitive for SliceUpdate {
    fn op(&self) -> Op<'_> {
        Op::SliceUpdate(self)
    }
    fn name(&self) -> &str {
        "slice_update"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slice_update(starts={:?}, steps={:?})", self.starts, self.steps)
    }
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let c = &cotangents[0];
        let upd = &primals[1];
        Ok(argnums
            .iter()
            .map(|&i| {
                if i == 0 {
                    let z = crate::ops::zeros(upd.shape(), c.dtype());
                    crate::ops::shape::slice_update_raw(c, &z, &self.starts, &self.steps)
                } else {
                    crate::ops::shape::slice_raw(c, self.as_slice(upd.shape()))
                }
            })
            .collect())
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], _outputs: &[Array]) -> Result<Vec<Array>> {
        let dtype = tangents[0].dtype();
        let t = |i: usize| match argnums.iter().position(|&a| a == i) {
            Some(k) => tangents[k].clone(),
            None => crate::ops::zeros(primals[i].shape(), dtype),
        };
        Ok(vec![crate::ops::shape::slice_update_raw(&t(0), &t(1), &self.starts, &self.steps)])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let b = batch_size(inputs, axes)?;
        let base = batch_front(&inputs[0], axes[0], b);
        let upd = batch_front(&inputs[1], axes[1], b);
        let mut starts = vec![0];
        starts.extend_from_slice(&self.starts);
        let mut steps = vec![1];
        steps.extend_from_slice(&self.steps);
        Ok((vec![crate::ops::shape::slice_update_raw(&base, &upd, &starts, &steps)], vec![Some(0)]))
    }
    fn is_equivalent(&self, other: &dyn Primitive) -> bool {
        crate::primitive::same_as(self, other)
    }
}

/// Join arrays of the same dtype along an existing axis (all other extents equal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concatenate(pub usize);

impl Primitive for Concatenate {
    fn op(&self) -> Op<'_> {
        Op::Concatenate(self)
    }
    fn name(&self) -> &str {
        "concatenate"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "concatenate(axis={})", self.0)
    }
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let c = &cotangents[0];
        let mut begins = Vec::with_capacity(primals.len());
        let mut acc = 0;
        for p in primals {
            begins.push(acc);
            acc += p.shape()[self.0];
        }
        Ok(argnums
            .iter()
            .map(|&i| {
                let mut starts = vec![0; c.ndim()];
                starts[self.0] = begins[i];
                let slice = Slice { starts, steps: vec![1; c.ndim()], shape: Shape::from_slice(primals[i].shape()) };
                crate::ops::shape::slice_raw(c, slice)
            })
            .collect())
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], _outputs: &[Array]) -> Result<Vec<Array>> {
        let dtype = tangents[0].dtype();
        let ts: Vec<Array> = (0..primals.len())
            .map(|i| match argnums.iter().position(|&a| a == i) {
                Some(k) => tangents[k].clone(),
                None => crate::ops::zeros(primals[i].shape(), dtype),
            })
            .collect();
        Ok(vec![crate::ops::shape::concatenate_raw(&ts, self.0)])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let b = batch_size(inputs, axes)?;
        let xs: Vec<Array> = inputs.iter().zip(axes).map(|(x, &a)| batch_front(x, a, b)).collect();
        Ok((vec![crate::ops::shape::concatenate_raw(&xs, self.0 + 1)], vec![Some(0)]))
    }
    fn is_equivalent(&self, other: &dyn Primitive) -> bool {
        crate::primitive::same_as(self, other)
    }
}

/// Zeros of `shape` with every input added into its strided region: `regions[i]` gives the
/// starts and steps (as in [`Slice`]) of input `i`, whose shape is the region's shape;
/// overlapping regions sum.
///
/// It is the VJP of [`Slice`], and reverse mode merges the slice cotangents that reach one
/// array into a single node (see `transforms::vjp`), so differentiating a loop over the T rows
/// of an array costs one pass over the array instead of T zero-filled copies of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScatterSlices {
    /// The output shape.
    pub shape: Shape,
    /// Starts and steps of each input's region.
    pub regions: Vec<(Vec<usize>, Vec<isize>)>,
}

impl ScatterSlices {
    /// The node adding `updates[i]` into `regions[i]` of zeros of `shape`.
    pub(crate) fn apply(shape: &[usize], regions: Vec<(Vec<usize>, Vec<isize>)>, updates: Vec<Array>) -> Array {
        let dtype = updates[0].dtype();
        Array::from_primitive(ScatterSlices { shape: Shape::from_slice(shape), regions }, updates, shape, dtype)
    }

    fn slice_of(&self, i: usize, x: &Array, shape: &[usize]) -> Array {
        let (starts, steps) = self.regions[i].clone();
        crate::ops::shape::slice_raw(x, Slice { starts, steps, shape: Shape::from_slice(shape) })
    }
}

impl Primitive for ScatterSlices {
    fn op(&self) -> Op<'_> {
        Op::ScatterSlices(self)
    }
    fn name(&self) -> &str {
        "scatter_slices"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scatter_slices(shape={:?}, {} regions)", self.shape, self.regions.len())
    }
    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        Ok(argnums.iter().map(|&i| self.slice_of(i, &cotangents[0], primals[i].shape())).collect())
    }
    fn jvp(&self, _p: &[Array], tangents: &[Array], argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        // linear: the other inputs contribute zeros
        let regions = argnums.iter().map(|&i| self.regions[i].clone()).collect();
        Ok(vec![ScatterSlices::apply(&self.shape, regions, tangents.to_vec())])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let b = batch_size(inputs, axes)?;
        let xs = inputs.iter().zip(axes).map(|(x, &a)| batch_front(x, a, b)).collect();
        let regions = self
            .regions
            .iter()
            .map(|(starts, steps)| {
                (
                    std::iter::once(0).chain(starts.iter().copied()).collect(),
                    std::iter::once(1).chain(steps.iter().copied()).collect(),
                )
            })
            .collect();
        let mut shape = vec![b];
        shape.extend_from_slice(&self.shape);
        Ok((vec![ScatterSlices::apply(&shape, regions, xs)], vec![Some(0)]))
    }
}
