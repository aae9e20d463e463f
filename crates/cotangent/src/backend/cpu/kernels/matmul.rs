//! CPU kernels of the matmul primitives (see `crate::primitives::matmul` for their rules).
use super::CpuKernel;
use crate::backend::cpu::Data;
use crate::primitive::Spec;
#[allow(unused_imports)]
use crate::primitives::matmul::*;
use crate::{Array, Result};

impl CpuKernel for Matmul {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let (da, db) = (a.computed_data()?, b.computed_data()?);
        Ok(vec![crate::backend::cpu::matmul::matmul(da, a.shape(), db, b.shape(), &outputs[0].shape, a.dtype())?])
    }
}
