//! The [`Primitive`] trait: one node kind of the graph with its shape inference, CPU kernel and
//! transformation rules kept together.
use crate::backend::cpu::Data;
use crate::{Array, DType, Result, Shape};
use std::fmt;

/// Shape and dtype of one output of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The output's shape.
    pub shape: Shape,
    /// The output's dtype.
    pub dtype: DType,
}

impl Spec {
    /// A spec from a shape slice and a dtype.
    pub fn new(shape: &[usize], dtype: DType) -> Spec {
        Spec { shape: Shape::from_slice(shape), dtype }
    }
}

/// Access to a primitive's concrete type (implemented for every primitive), so a transform can
/// recognise a node kind it treats specially.
pub trait AsAny {
    /// `self` as `Any`.
    fn as_any(&self) -> &dyn std::any::Any;
}
impl<T: std::any::Any> AsAny for T {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A node kind of the computation graph.
///
/// Rules are written with ops on [`Array`]s, so every rule is itself differentiable and
/// batchable: higher-order transforms need no extra code.
pub trait Primitive: AsAny + Send + Sync + fmt::Debug + 'static {
    /// Name used in error messages and graph dumps.
    fn name(&self) -> String;

    /// Compute the outputs on the CPU. Every input is already evaluated; `outputs` gives the
    /// shape and dtype of each result.
    fn eval_cpu(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>>;

    /// [`eval_cpu`](Primitive::eval_cpu) with the inputs handed over by ownership, called when
    /// the node does not keep its inputs after evaluation (no transform is tracing through it).
    /// A kernel may then write its output into an input's buffer when nobody else can observe
    /// it (`Array::take_unique_data` decides; element-wise primitives do this). The default
    /// borrows the inputs and calls `eval_cpu`.
    fn eval_cpu_owned(&self, inputs: Vec<Array>, outputs: &[Spec]) -> Result<Vec<Data>> {
        self.eval_cpu(&inputs, outputs)
    }

    /// Reverse-mode rule: cotangents of the inputs listed in `argnums`, in that order, given the
    /// cotangents of every output (zeros where an output received none) and the outputs.
    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>>;

    /// Forward-mode rule: tangents of every output given the tangents of the inputs listed in
    /// `argnums` (`tangents[i]` belongs to `primals[argnums[i]]`; other inputs are constant).
    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>>;

    /// Batching rule: the batched outputs and the batch axis of each, given inputs whose batch
    /// axis is `axes[i]` (`None` for an unbatched input). At least one input is batched.
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)>;

    /// Whether gradients stop here (true only for `stop_gradient`).
    fn stops_gradient(&self) -> bool {
        false
    }

    /// Whether this primitive with these parameters computes the same thing as `other`
    /// (used by future graph simplification). Conservative default: no.
    fn is_equivalent(&self, _other: &dyn Primitive) -> bool {
        false
    }
}
