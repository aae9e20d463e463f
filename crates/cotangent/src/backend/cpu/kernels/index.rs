//! CPU kernels of the index primitives (see `crate::primitives::index` for their rules).
use super::CpuKernel;
use crate::backend::cpu::gather::{gather_along_axis, scatter_along_axis, ScatterElement};
use crate::backend::cpu::Data;
use crate::primitive::Spec;
#[allow(unused_imports)]
use crate::primitives::index::*;
use crate::{Array, DType, Error, Result};

/// Dispatch on an integer index dtype.
macro_rules! dispatch_index {
    ($dtype:expr, $i:ident => $body:expr) => {
        match $dtype {
            DType::U8 => {
                type $i = u8;
                $body
            }
            DType::U32 => {
                type $i = u32;
                $body
            }
            DType::I32 => {
                type $i = i32;
                $body
            }
            DType::I64 => {
                type $i = i64;
                $body
            }
            other => return Err(Error::Eval(format!("indices must be integers, got {other}"))),
        }
    };
}

fn scatter_kernel<T: ScatterElement, I: crate::backend::cpu::buffer::BufferElement>(
    mode: ScatterMode,
    x: &Array,
    idx: &Array,
    upd: &Array,
    axis: usize,
) -> Result<Data> {
    let (dx, di, du) = (x.computed_data()?, idx.computed_data()?, upd.computed_data()?);
    let v = match mode {
        ScatterMode::Put => scatter_along_axis::<T, I>(dx, x.shape(), di, idx.shape(), du, axis, |_, u| u),
        ScatterMode::Add => scatter_along_axis::<T, I>(dx, x.shape(), di, idx.shape(), du, axis, T::accumulate),
    }?;
    Ok(Data::from_vec(v, x.shape()))
}

impl CpuKernel for TakeAlongAxis {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let (x, idx) = (&inputs[0], &inputs[1]);
        let (dx, di) = (x.computed_data()?, idx.computed_data()?);
        let d = dispatch_index!(idx.dtype(), I => crate::dispatch_dtype!(x.dtype(), T =>
            gather_along_axis::<T, I>(dx, x.shape(), di, idx.shape(), self.axis)
                .map(|v| Data::from_vec(v, idx.shape()))))?;
        Ok(vec![d])
    }
}

impl CpuKernel for ScatterAlongAxis {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let (x, idx, upd) = (&inputs[0], &inputs[1], &inputs[2]);
        let d = dispatch_index!(idx.dtype(), I => crate::dispatch_dtype!(x.dtype(), T =>
            scatter_kernel::<T, I>(self.mode, x, idx, upd, self.axis)))?;
        Ok(vec![d])
    }
}
