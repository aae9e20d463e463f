//! Shape primitives. Views (reshape of contiguous data, transpose, broadcast) share the input's
//! buffer through strides instead of copying.
use crate::backend::cpu::Data;
use crate::primitive::{Primitive, Spec};
use crate::shape::{contiguous_strides, Shape};
use crate::{Array, Result};

/// Copy a strided view into a new dense buffer.
pub(crate) fn dense_copy(x: &Array) -> Result<Data> {
    let d = x.computed_data()?;
    Ok(crate::dispatch_dtype!(x.dtype(), T => Data::from_vec(d.to_contiguous::<T>(x.shape()).into_owned(), x.shape())))
}

/// Reshape to a shape with the same number of elements (a view when the input is contiguous).
#[derive(Debug, Clone)]
pub struct Reshape(pub Shape);

impl Primitive for Reshape {
    fn name(&self) -> String {
        format!("reshape{:?}", self.0.as_slice())
    }
    fn eval_cpu(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let base = if d.is_contiguous(x.shape()) { d.clone() } else { dense_copy(x)? };
        Ok(vec![Data { buf: base.buf, strides: contiguous_strides(&self.0), offset: base.offset }])
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
    fn name(&self) -> String {
        format!("transpose{:?}", self.0)
    }
    fn eval_cpu(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let d = inputs[0].computed_data()?;
        Ok(vec![Data { buf: d.buf.clone(), strides: self.0.iter().map(|&p| d.strides[p]).collect(), offset: d.offset }])
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
    fn name(&self) -> String {
        format!("broadcast_to{:?}", self.0.as_slice())
    }
    fn eval_cpu(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let strides = crate::backend::cpu::elementwise::broadcast_strides(x.shape(), &d.strides, &self.0);
        Ok(vec![Data { buf: d.buf.clone(), strides, offset: d.offset }])
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
