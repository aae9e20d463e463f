//! CPU kernels of the shape primitives (see `crate::primitives::shape` for their rules).
use super::CpuKernel;
use crate::backend::cpu::Data;
use crate::primitive::{Primitive, Spec};
#[allow(unused_imports)]
use crate::primitives::shape::*;
use crate::shape::contiguous_strides;
use crate::{Array, Result};
/// Copy a strided view into a new dense buffer.
pub(crate) fn dense_copy(x: &Array) -> Result<Data> {
    let d = x.computed_data()?;
    Ok(crate::dispatch_dtype!(x.dtype(), T => Data::from_vec(d.try_to_vec::<T>(x.shape())?, x.shape())))
}

/// Offset and strides, in a contiguous array of `shape`, of the region starting at `starts`
/// with steps `steps`.
fn region_layout(shape: &[usize], starts: &[usize], steps: &[isize]) -> (isize, Vec<isize>) {
    let cs = contiguous_strides(shape);
    let offset = starts.iter().zip(&cs).map(|(&s, &c)| s as isize * c).sum();
    (offset, cs.iter().zip(steps).map(|(&c, &s)| c * s).collect())
}

fn slice_update_kernel<T: crate::backend::cpu::buffer::BufferElement>(
    base: &Array,
    update: &Array,
    starts: &[usize],
    steps: &[isize],
) -> Result<Data> {
    let shape = base.shape();
    let mut out: Vec<T> = base.computed_data()?.try_to_vec::<T>(shape)?;
    let (offset, strides) = region_layout(shape, starts, steps);
    crate::backend::cpu::copy::scatter_strided(&mut out, offset, &strides, update.computed_data()?, update.shape());
    Ok(Data::from_vec(out, shape))
}

fn scatter_slices_kernel<T: crate::backend::cpu::buffer::BufferElement + std::ops::Add<Output = T> + Default>(
    shape: &[usize],
    regions: &[(Vec<usize>, Vec<isize>)],
    updates: &[Array],
) -> Result<Data> {
    let mut out = crate::backend::cpu::buffer::try_filled(T::default(), crate::shape::numel(shape))?;
    for ((starts, steps), u) in regions.iter().zip(updates) {
        let (offset, strides) = region_layout(shape, starts, steps);
        crate::backend::cpu::copy::scatter_add_strided(&mut out, offset, &strides, u.computed_data()?, u.shape());
    }
    Ok(Data::from_vec(out, shape))
}

impl CpuKernel for Reshape {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let base = if d.is_contiguous(x.shape()) { d.clone() } else { dense_copy(x)? };
        Ok(vec![Data { buf: base.buf, strides: contiguous_strides(&self.0), offset: base.offset }])
    }
}

impl CpuKernel for Transpose {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let d = inputs[0].computed_data()?;
        Ok(vec![Data { buf: d.buf.clone(), strides: self.0.iter().map(|&p| d.strides[p]).collect(), offset: d.offset }])
    }
}

impl CpuKernel for Broadcast {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let strides = crate::backend::cpu::elementwise::broadcast_strides(x.shape(), &d.strides, &self.0);
        Ok(vec![Data { buf: d.buf.clone(), strides, offset: d.offset }])
    }
}

impl CpuKernel for Slice {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let d = inputs[0].computed_data()?;
        if crate::shape::numel(&self.shape) == 0 {
            // nothing is ever read: keep the offset valid and the strides dense
            return Ok(vec![Data { buf: d.buf.clone(), strides: contiguous_strides(&self.shape), offset: d.offset }]);
        }
        let mut offset = d.offset as isize;
        let mut strides = crate::shape::Strides::with_capacity(self.shape.len());
        for i in 0..self.shape.len() {
            offset += self.starts[i] as isize * d.strides[i];
            strides.push(d.strides[i] * self.steps[i]);
        }
        if offset < 0 {
            return Err(crate::Error::Eval(format!("{}: negative offset (internal error)", self.name())));
        }
        Ok(vec![Data { buf: d.buf.clone(), strides, offset: offset as usize }])
    }
}

impl CpuKernel for SliceUpdate {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let (base, update) = (&inputs[0], &inputs[1]);
        if base.dtype() != update.dtype() {
            return Err(crate::Error::Eval(format!("{}: dtypes differ (internal error)", self.name())));
        }
        Ok(vec![
            crate::dispatch_dtype!(base.dtype(), T => slice_update_kernel::<T>(base, update, &self.starts, &self.steps)?),
        ])
    }
}

impl CpuKernel for Concatenate {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let dtype = outputs[0].dtype;
        let mut parts = Vec::with_capacity(inputs.len());
        for x in inputs {
            if x.dtype() != dtype {
                return Err(crate::Error::Eval(format!("{}: dtypes differ (internal error)", self.name())));
            }
            parts.push((x.computed_data()?, x.shape()));
        }
        let out = &outputs[0].shape;
        Ok(vec![crate::dispatch_dtype!(dtype, T => crate::backend::cpu::copy::concatenate::<T>(&parts, self.0, out)
            .map(|v| Data::from_vec(v, out)))?])
    }
}

impl CpuKernel for ScatterSlices {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        use crate::DType::*;
        macro_rules! run {
            ($t:ty) => {
                scatter_slices_kernel::<$t>(&self.shape, &self.regions, inputs)?
            };
        }
        let out = match outputs[0].dtype {
            F32 => run!(f32),
            F64 => run!(f64),
            F16 => run!(half::f16),
            BF16 => run!(half::bf16),
            I32 => run!(i32),
            I64 => run!(i64),
            U32 => run!(u32),
            U8 => run!(u8),
            Bool => return Err(crate::Error::Eval(format!("{}: bool is not summable (internal error)", self.name()))),
        };
        Ok(vec![out])
    }
}
