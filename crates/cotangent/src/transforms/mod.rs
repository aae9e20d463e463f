//! Function transformations: [`vjp`], [`jvp`], [`grad`], [`value_and_grad`], [`vmap`],
//! [`stop_gradient`], [`depends`], [`custom_function`], [`checkpoint`], [`compile`], plus [`jacobian`] / [`hessian`] helpers,
//! and the tree-aware [`grad_tree`], [`value_and_grad_tree`] and [`vmap_tree`] for functions of
//! structured inputs ([`ArrayTree`](crate::ArrayTree)s).
//!
//! A transformable function is any `Fn(&[Array]) -> O` where `O` is an `Array`, a
//! `Vec<Array>`, or a `Result` of either. Transforms trace the function on fresh tracer
//! arrays, so tracing state belongs to one call: two threads may transform the same function
//! at the same time.
//!
//! **Captured values are constants.** Arrays a closure captures (rather than receives as
//! inputs) get no gradient:
//!
//! ```
//! use cotangent::{self as ct, Array};
//! let w = Array::scalar(3.0f64);
//! let f = move |x: &[Array]| (&x[0] * &w).sum_all(); // w is a constant of f
//! let g = ct::grad(f)(&[Array::scalar(2.0f64)]).unwrap();
//! assert_eq!(g[0].item::<f64>().unwrap(), 3.0);
//! ```
//!
//! **Non-differentiable outputs.** Integer, boolean, comparison, `argmax`/`argmin` and random
//! outputs are not differentiable: their rules give zero cotangents to float inputs, and
//! integer or boolean inputs receive no cotangent (their gradient is reported as zeros).
mod compile;
pub(crate) mod custom;
mod grad;
mod jvp;
mod tree;
mod vjp;
mod vmap;

pub use compile::compile;
pub(crate) use compile::{compile_tracing, stand_in_error};
pub use custom::{checkpoint, custom_function, CustomFunction, VmapRuleResult};
pub use grad::*;
pub use jvp::jvp;
pub use tree::{grad_tree, value_and_grad_tree, vmap_tree};
pub use vjp::vjp;
pub use vmap::vmap;
pub(crate) use vmap::vmap_call;

use crate::array::TraceToken;
use crate::primitives::graph::{Depends, Identity, StopGradient};
use crate::{Array, Error, Result};
use std::sync::Arc;

/// What a transformable function may return.
pub trait IntoOutputs {
    /// The outputs as a vector.
    fn into_outputs(self) -> Result<Vec<Array>>;
}
impl IntoOutputs for Array {
    fn into_outputs(self) -> Result<Vec<Array>> {
        Ok(vec![self])
    }
}
impl IntoOutputs for Vec<Array> {
    fn into_outputs(self) -> Result<Vec<Array>> {
        Ok(self)
    }
}
impl IntoOutputs for (Array, Array) {
    fn into_outputs(self) -> Result<Vec<Array>> {
        Ok(vec![self.0, self.1])
    }
}
/// `value_and_grad`'s `(values, gradients)`: the values, then the gradients.
impl IntoOutputs for (Vec<Array>, Vec<Array>) {
    fn into_outputs(self) -> Result<Vec<Array>> {
        let (mut values, grads) = self;
        values.extend(grads);
        Ok(values)
    }
}
impl<T: IntoOutputs> IntoOutputs for Result<T> {
    fn into_outputs(self) -> Result<Vec<Array>> {
        self?.into_outputs()
    }
}

/// `x` as a value that transforms treat as a constant: no gradient flows through it and its
/// tangent is zero.
pub fn stop_gradient(x: &Array) -> Array {
    Array::from_primitive(StopGradient, vec![x.clone()], x.shape(), x.dtype())
}

/// Identity on `inputs` that also depends on `dependencies`, so they are computed first.
///
/// Under `vjp` the cotangents pass through to `inputs` and the dependencies get zeros; under
/// `jvp` the tangents of `inputs` pass through; under `vmap` the batch axes pass through.
/// Its use: order a recomputation after the forward outputs it should follow (see
/// [`checkpoint`]).
pub fn depends(inputs: &[Array], dependencies: &[Array]) -> Vec<Array> {
    if dependencies.is_empty() {
        return inputs.to_vec();
    }
    let specs = inputs.iter().map(|x| x.spec().clone()).collect();
    let all: Vec<Array> = inputs.iter().chain(dependencies).cloned().collect();
    Array::from_primitive_multi(Depends { n: inputs.len() }, all, specs)
}

/// Tracer copies of `primals` for one transform call: identity nodes carrying `token`.
pub(crate) fn make_tracers(primals: &[Array], token: &Arc<TraceToken>) -> Vec<Array> {
    primals
        .iter()
        .map(|p| {
            let t = Array::from_primitive(Identity, vec![p.clone()], p.shape(), p.dtype());
            t.add_trace(token)
        })
        .collect()
}

/// Whether the node of `a` was built on this trace's tracers.
pub(crate) fn traced_by(a: &crate::array::Node, token: &Arc<TraceToken>) -> bool {
    a.traces.iter().any(|t| Arc::ptr_eq(t, token))
}

/// Call `f` and check it returned something.
pub(crate) fn call<F, O>(f: &F, args: &[Array]) -> Result<Vec<Array>>
where
    F: Fn(&[Array]) -> O + ?Sized,
    O: IntoOutputs,
{
    f(args).into_outputs()
}

pub(crate) fn check_like(what: &str, i: usize, given: &Array, expected: &Array) -> Result<()> {
    if given.shape() != expected.shape() {
        return Err(Error::Transform(format!(
            "{what} {i} has shape {:?} but the matching array has shape {:?}",
            given.shape(),
            expected.shape()
        )));
    }
    if given.dtype() != expected.dtype() {
        return Err(Error::Transform(format!(
            "{what} {i} has dtype {} but the matching array has dtype {}",
            given.dtype(),
            expected.dtype()
        )));
    }
    Ok(())
}
