//! The CPU side of the device seam: every [`Op`] evaluated on host memory.
//!
//! Each primitive family has a file here whose [`CpuKernel`] impls do the dtype dispatch and call
//! the kernels of `backend/cpu`. [`eval`] and [`eval_owned`] are the only entry points the
//! evaluator uses.
mod binary;
mod fused;
mod index;
mod matmul;
mod random;
mod reduce;
mod shape;
mod sort;
mod unary;

use crate::backend::cpu::Data;
use crate::primitive::{Op, Spec};
use crate::primitives::{binary::Binary, binary::Select, matmul::Matmul, unary::Cast, unary::Unary};
use crate::{Array, Error, Result};

/// A descriptor's CPU implementation. Inputs are computed arrays on the CPU.
pub(crate) trait CpuKernel {
    /// The outputs, given borrowed inputs.
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>>;

    /// [`eval`](CpuKernel::eval) with the inputs handed over by ownership, called when the node
    /// does not keep its inputs after evaluation (no transform is tracing through it). A kernel
    /// may then write its output into an input's buffer when nobody else can observe it
    /// (`Array::take_unique_data` decides; element-wise kernels do this).
    fn eval_owned(&self, inputs: Vec<Array>, outputs: &[Spec]) -> Result<Vec<Data>> {
        self.eval(&inputs, outputs)
    }
}

/// Calls `$call` on the [`CpuKernel`] of `$op` bound to `$k` (no allocation: descriptors that
/// carry only an enum are rebuilt as their primitive's struct on the stack).
macro_rules! with_kernel {
    ($op:expr, $k:ident => $call:expr) => {
        match $op {
            Op::Unary(u) => {
                let $k = &Unary(u);
                $call
            }
            Op::Cast(d) => {
                let $k = &Cast(d);
                $call
            }
            Op::Binary(b) => {
                let $k = &Binary(b);
                $call
            }
            Op::Select => {
                let $k = &Select;
                $call
            }
            Op::Matmul => {
                let $k = &Matmul;
                $call
            }
            Op::Reduce($k) => $call,
            Op::ArgReduce($k) => $call,
            Op::ArgSort($k) => $call,
            Op::LogSumExp($k) => $call,
            Op::Softmax($k) => $call,
            Op::Scan($k) => $call,
            Op::Gather($k) => $call,
            Op::Scatter($k) => $call,
            Op::Reshape($k) => $call,
            Op::Transpose($k) => $call,
            Op::Broadcast($k) => $call,
            Op::Slice($k) => $call,
            Op::SliceUpdate($k) => $call,
            Op::Concatenate($k) => $call,
            Op::ScatterSlices($k) => $call,
            Op::Random($k) => $call,
            Op::Fused($k) => $call,
            Op::FusedBatch($k) => $call,
            op @ (Op::PassThrough { .. } | Op::Call(_) | Op::ToDevice(_)) => {
                Err(Error::Eval(format!("{op:?} is evaluated by the graph, not by a backend")))
            }
        }
    };
}

/// Evaluate `op` on CPU inputs.
pub(crate) fn eval(op: Op<'_>, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
    with_kernel!(op, k => k.eval(inputs, outputs))
}

/// Evaluate `op` on CPU inputs handed over by ownership (buffer donation allowed).
pub(crate) fn eval_owned(op: Op<'_>, inputs: Vec<Array>, outputs: &[Spec]) -> Result<Vec<Data>> {
    with_kernel!(op, k => k.eval_owned(inputs, outputs))
}
