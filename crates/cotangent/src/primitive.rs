//! The [`Primitive`] trait: one node kind of the graph with its shape inference and
//! transformation rules kept together, and [`Op`], what a node computes, as plain data that a
//! backend evaluates on its device.
//!
//! # Why descriptors borrow the primitive
//!
//! A primitive's parameters (an op enum, axes, a slice's starts) are exactly what a backend needs
//! to know, so [`Op`] borrows the primitive's own struct instead of copying its fields into a
//! second, parallel family of types (candle's `BackendStorage` takes one method per op with its
//! parameters spelled out; MLX has one `eval_cpu`/`eval_gpu` pair per primitive class). The rules
//! stay beside the primitive under `primitives/`; each device matches on [`Op`] in one place
//! (`backend/<device>/`), so adding a device touches no primitive, op or transform.
use crate::backend::Device;
use crate::primitives::{binary, fused, graph, index, random, reduce, shape, sort, unary};
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
    /// The op's name as users call it (`"sum"`, `"matmul"`, a custom function's name), for
    /// error messages; never allocates.
    fn name(&self) -> &str;

    /// The name with the op's parameters (`sum[0, 1]`), for messages and graph dumps; the
    /// default is [`Primitive::name`]. `format!("{}", prim)` on a `&dyn Primitive` calls it.
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }

    /// What this node computes, for the backends (see [`Op`]).
    fn op(&self) -> Op<'_>;

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

/// What a node computes, as data: the descriptor a backend evaluates on its device's storage.
/// Borrowed from the primitive (see the module docs).
#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    /// The outputs are the inputs `first..first + n_outputs`, unchanged (identity,
    /// `stop_gradient`, `depends`, a custom function's rule node): no backend work.
    PassThrough {
        /// Index of the input that becomes the first output.
        first: usize,
    },
    /// A function rebuilt and evaluated when the node is computed (checkpointed segments,
    /// rules that recompute lazily); evaluated by the graph, on the devices of its ops.
    Call(&'a graph::Call),
    /// Move the input to another device.
    ToDevice(Device),
    /// An element-wise function of one array.
    Unary(unary::UnaryOp),
    /// Conversion to another dtype.
    Cast(DType),
    /// An element-wise function of two broadcast arrays.
    Binary(binary::BinaryOp),
    /// `select(condition, a, b)`, broadcast.
    Select,
    /// A reduction over axes.
    Reduce(&'a reduce::Reduce),
    /// Index of the maximum or minimum along an axis.
    ArgReduce(&'a reduce::ArgReduce),
    /// The stable sorting permutation along an axis.
    ArgSort(&'a sort::ArgSort),
    /// `log(sum(exp(x)))` over axes.
    LogSumExp(&'a reduce::LogSumExp),
    /// Softmax along an axis.
    Softmax(&'a reduce::Softmax),
    /// A cumulative reduction along an axis.
    Scan(&'a reduce::Scan),
    /// Batched, broadcasting matrix product.
    Matmul,
    /// `take_along_axis`.
    Gather(&'a index::TakeAlongAxis),
    /// Scatter along an axis (add, or put the winners).
    Scatter(&'a index::ScatterAlongAxis),
    /// A new shape over the same elements.
    Reshape(&'a shape::Reshape),
    /// A permutation of the axes.
    Transpose(&'a shape::Transpose),
    /// Broadcast to a larger shape.
    Broadcast(&'a shape::Broadcast),
    /// A strided region.
    Slice(&'a shape::Slice),
    /// A copy of the first input with a region replaced by the second.
    SliceUpdate(&'a shape::SliceUpdate),
    /// Joining along an axis.
    Concatenate(&'a shape::Concatenate),
    /// Sum of updates placed into regions of zeros.
    ScatterSlices(&'a shape::ScatterSlices),
    /// Random samples from a key.
    Random(&'a random::RandomSample),
    /// Element-wise primitives run as one kernel (built by `compile`).
    Fused(&'a fused::Fused),
    /// Independent fused groups of several shapes run as one kernel (built by `compile`).
    FusedBatch(&'a fused::FusedBatch),
}

impl fmt::Display for dyn Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.describe(f)
    }
}

/// Whether `other` is a `T` equal to `this`: [`Primitive::is_equivalent`] for primitives whose
/// parameters are all compared by `PartialEq`.
pub(crate) fn same_as<T: PartialEq + 'static>(this: &T, other: &dyn Primitive) -> bool {
    other.as_any().downcast_ref::<T>() == Some(this)
}
