//! [`Fused`]: a group of element-wise primitives run as one node (built by
//! [`compile`](crate::compile), never by ops).
//!
//! The group keeps the primitives it replaced, so its rules are theirs: the VJP, JVP and
//! batching rule rebuild the group as separate nodes (`Fused::expand`) and transform that, so
//! `grad(compile(f))` and `vmap(compile(f))` differentiate and batch exactly what the
//! uncompiled `f` would. The CPU evaluates the group step by step over tiles of the output,
//! calling the same element-wise kernels as the separate nodes; CUDA generates one kernel per
//! group structure from the same per-op snippets, rounding every step to its dtype. Either way
//! compiled results are bit-identical to uncompiled ones.
use crate::array::Origin;
use crate::primitive::{Op, Primitive, Spec};
use crate::shape::broadcast_shapes;
use crate::{Array, Result};
use smallvec::SmallVec;
use std::sync::Arc;

/// Where a step of a [`Fused`] group reads an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FusedArg {
    /// Input `i` of the fused node.
    Input(usize),
    /// The result of an earlier step.
    Step(usize),
}

/// One element-wise primitive of a [`Fused`] group.
#[derive(Clone, Debug)]
pub(crate) struct FusedStep {
    /// The primitive (its [`Op`] is `Unary`, `Binary`, `Cast` or `Select`).
    pub(crate) prim: Arc<dyn Primitive>,
    /// Its operands.
    pub(crate) args: SmallVec<[FusedArg; 3]>,
    /// Its result: the group's shape, with this step's dtype.
    pub(crate) spec: Spec,
    /// The op and line that built it, for errors.
    pub(crate) origin: Option<Origin>,
}

/// Element-wise primitives evaluated together, one output per exported step.
///
/// Every step's result has the group's shape; inputs broadcast to it.
#[derive(Clone, Debug)]
pub struct Fused {
    inner: Arc<FusedBody>,
}

#[derive(Debug)]
struct FusedBody {
    steps: Vec<FusedStep>,
    exports: Vec<usize>,
    /// Per step: the last step that reads its result, `usize::MAX` for the exports.
    last_use: Vec<usize>,
    /// Per step: its op, copied out of the primitive once.
    ops: Vec<StepOp>,
    /// Per step: a scratch slot for its result, and how many slots there are (see
    /// [`Fused::slots`]).
    slots: Vec<usize>,
    n_slots: usize,
    /// The CUDA kernels made for this group, per device and input dtypes: a compiled replay
    /// launches the same group at every call, and finding its kernel by structural key (a string
    /// as long as the group, hashed) cost tens of µs for a group of hundreds of steps.
    #[cfg(feature = "cuda")]
    cuda_kernels: std::sync::Mutex<Vec<crate::backend::cuda::fused::GroupKernel>>,
}

/// The op of a step of a [`Fused`] group (its primitive's [`Op`], which borrows nothing for the
/// element-wise ops, copied out once so evaluation need not ask the primitive at every step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StepOp {
    /// [`Op::Unary`].
    Unary(crate::primitives::unary::UnaryOp),
    /// [`Op::Binary`].
    Binary(crate::primitives::binary::BinaryOp),
    /// Any other op ([`Op::Cast`], [`Op::Select`]): ask the primitive.
    Other,
}

impl Fused {
    /// A group of `steps` (in an order where every step reads only earlier steps) whose results
    /// `exports` are the node's outputs.
    pub(crate) fn new(steps: Vec<FusedStep>, exports: Vec<usize>) -> Fused {
        debug_assert!(steps.iter().enumerate().all(|(i, s)| s.args.iter().all(|a| match a {
            FusedArg::Step(j) => *j < i,
            FusedArg::Input(_) => true,
        })));
        let mut last_use = vec![0usize; steps.len()];
        for (i, s) in steps.iter().enumerate() {
            for a in &s.args {
                if let FusedArg::Step(j) = *a {
                    last_use[j] = i;
                }
            }
        }
        for &e in &exports {
            last_use[e] = usize::MAX;
        }
        let ops = steps
            .iter()
            .map(|s| match s.prim.op() {
                Op::Unary(u) => StepOp::Unary(u),
                Op::Binary(b) => StepOp::Binary(b),
                _ => StepOp::Other,
            })
            .collect();
        // a slot is free again after the last step reading its result (and never the slot of
        // that step's own operands)
        let (mut slots, mut free, mut n_slots) = (Vec::with_capacity(steps.len()), Vec::new(), 0);
        for (i, s) in steps.iter().enumerate() {
            slots.push(free.pop().unwrap_or_else(|| {
                n_slots += 1;
                n_slots - 1
            }));
            for (k, a) in s.args.iter().enumerate() {
                if let FusedArg::Step(j) = *a {
                    if last_use[j] == i && !s.args[..k].contains(a) {
                        free.push(slots[j]);
                    }
                }
            }
        }
        Fused {
            inner: Arc::new(FusedBody {
                steps,
                exports,
                last_use,
                ops,
                slots,
                n_slots,
                #[cfg(feature = "cuda")]
                cuda_kernels: Default::default(),
            }),
        }
    }

    /// The CUDA kernels made for this group so far (see `backend::cuda::fused`).
    #[cfg(feature = "cuda")]
    pub(crate) fn cuda_kernels(&self) -> &std::sync::Mutex<Vec<crate::backend::cuda::fused::GroupKernel>> {
        &self.inner.cuda_kernels
    }

    /// Per step, a scratch slot for its result, and the number of slots: two results alive at
    /// once (from their step to their last reader, exports to the end) never share a slot, nor
    /// does a step's result share one with its operands.
    pub(crate) fn slots(&self) -> (&[usize], usize) {
        (&self.inner.slots, self.inner.n_slots)
    }

    /// Per step, the last step that reads its result (`usize::MAX` for the exports, which are
    /// kept to the end): a result may be freed, or its buffer reused, after that step.
    pub(crate) fn last_use(&self) -> &[usize] {
        &self.inner.last_use
    }

    /// Per step, its op.
    pub(crate) fn step_ops(&self) -> &[StepOp] {
        &self.inner.ops
    }

    /// The steps, in evaluation order.
    pub(crate) fn steps(&self) -> &[FusedStep] {
        &self.inner.steps
    }

    /// The steps whose results are the node's outputs, in output order.
    pub(crate) fn exports(&self) -> &[usize] {
        &self.inner.exports
    }

    /// The group rebuilt as separate nodes on `inputs`: one array per export.
    pub(crate) fn expand(&self, inputs: &[Array]) -> Vec<Array> {
        let mut values: Vec<Array> = Vec::with_capacity(self.inner.steps.len());
        for step in &self.inner.steps {
            let args: Vec<Array> = step
                .args
                .iter()
                .map(|a| match *a {
                    FusedArg::Input(i) => inputs[i].clone(),
                    FusedArg::Step(j) => values[j].clone(),
                })
                .collect();
            let mut shape: crate::Shape = args[0].shape().into();
            for a in &args[1..] {
                shape = broadcast_shapes(&shape, a.shape()).expect("the traced operands broadcast");
            }
            let device = args.iter().find(|a| a.ndim() > 0).unwrap_or(&args[0]).device();
            let spec = Spec::new(&shape, step.spec.dtype);
            let out = Array::from_shared_primitive(&step.prim, args, std::slice::from_ref(&spec), device, step.origin);
            values.push(out.into_iter().next().expect("one output"));
        }
        self.inner.exports.iter().map(|&e| values[e].clone()).collect()
    }
}

impl Primitive for Fused {
    fn name(&self) -> &str {
        "fused"
    }

    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fused[")?;
        for (i, s) in self.inner.steps.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{}", s.prim.name())?;
        }
        write!(f, "]")
    }

    fn op(&self) -> Op<'_> {
        Op::Fused(self)
    }

    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let group = self.clone();
        let (_, all) = crate::transforms::vjp(move |xs: &[Array]| group.expand(xs), primals, cotangents)?;
        Ok(argnums.iter().map(|&i| all[i].clone()).collect())
    }

    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], _outputs: &[Array]) -> Result<Vec<Array>> {
        let mut all: Vec<Array> = primals.iter().map(crate::ops::zeros_like).collect();
        for (t, &i) in tangents.iter().zip(argnums) {
            all[i] = t.clone();
        }
        let group = self.clone();
        let (_, out) = crate::transforms::jvp(move |xs: &[Array]| group.expand(xs), primals, &all)?;
        Ok(out)
    }

    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let group = self.clone();
        let in_axes: Vec<Option<isize>> = axes.iter().map(|a| a.map(|a| a as isize)).collect();
        let out_axes = vec![Some(0isize); self.inner.exports.len()];
        let outs = crate::transforms::vmap_call(&move |xs: &[Array]| group.expand(xs), &in_axes, &out_axes, inputs)?;
        let n = outs.len();
        Ok((outs, vec![Some(0); n]))
    }
}
