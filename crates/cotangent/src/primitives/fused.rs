//! [`Fused`]: a group of element-wise primitives run as one node, built by
//! [`compile`](crate::compile) and by the rules of binary ops for their short gradient chains
//! (`fuse_chain`), never by ops.
//!
//! The group keeps the primitives it replaced, so its rules are theirs: the VJP, JVP and
//! batching rule rebuild the group as separate nodes (`Fused::expand`) and transform that, so
//! `grad(compile(f))` and `vmap(compile(f))` differentiate and batch exactly what the
//! uncompiled `f` would. The CPU evaluates the group step by step over tiles of the output,
//! calling the same element-wise kernels as the separate nodes; CUDA generates one kernel per
//! group structure from the same per-op snippets, rounding every step to its dtype. Either way
//! compiled results are bit-identical to uncompiled ones.
use crate::array::{NodeKind, Origin};
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

/// At most this many ops go into a group built by [`fuse_chain`] (a rule's result is a short
/// chain; a longer one means the walk left the rule's own nodes).
const MAX_CHAIN_STEPS: usize = 8;

/// `out`, built by element-wise ops from `leaves` (and constants), as one [`Fused`] node: the
/// ops between `leaves` and `out` that have `out`'s shape and device, and that the device's
/// backend fuses, become the group's steps; everything else they read becomes its inputs. A
/// rule whose result is a short chain — the gradient of `maximum`, `cotangent ×
/// maximum_share(x, y)` — then runs as one kernel instead of one per op, with the same bits (a
/// group evaluates the same scalar functions in the same order). `out` itself where fewer than
/// two ops would fuse, and while [`compile`](crate::compile) traces: its own fusion pass groups
/// these ops with their neighbours.
pub(crate) fn fuse_chain(out: &Array, leaves: &[&Array]) -> Array {
    if crate::transforms::compile_tracing() || out.is_evaluated() {
        return out.clone();
    }
    struct Walk<'a> {
        shape: &'a [usize],
        device: crate::Device,
        leaves: &'a [&'a Array],
        steps: Vec<FusedStep>,
        inputs: Vec<Array>,
        seen: Vec<((usize, usize), FusedArg)>,
    }
    impl Walk<'_> {
        /// Where the group reads `a`; `None` when the chain is too long.
        fn visit(&mut self, a: &Array) -> Option<FusedArg> {
            let id = a.id();
            if let Some((_, arg)) = self.seen.iter().find(|(k, _)| *k == id) {
                return Some(*arg);
            }
            let node = &a.node;
            let step = match &node.kind {
                crate::array::NodeKind::Op(prim)
                    if !self.leaves.iter().any(|l| l.id() == id)
                        && !node.is_computed()
                        && node.specs.len() == 1
                        && a.shape() == self.shape
                        && node.device == self.device =>
                {
                    let inputs = node.inputs();
                    let operand = inputs.last().map(|x| x.dtype());
                    operand
                        .filter(|&d| crate::backend::fusable(self.device, prim.op(), d))
                        .map(|_| (prim.clone(), inputs))
                }
                _ => None,
            };
            let arg = match step {
                Some((prim, inputs)) => {
                    if self.steps.len() == MAX_CHAIN_STEPS {
                        return None;
                    }
                    let mut args = SmallVec::new();
                    for x in &inputs {
                        args.push(self.visit(x)?);
                    }
                    self.steps.push(FusedStep { prim, args, spec: node.specs[0].clone(), origin: node.origin });
                    FusedArg::Step(self.steps.len() - 1)
                }
                None => {
                    self.inputs.push(a.clone());
                    FusedArg::Input(self.inputs.len() - 1)
                }
            };
            self.seen.push((id, arg));
            Some(arg)
        }
    }
    let mut walk = Walk {
        shape: out.shape(),
        device: out.device(),
        leaves,
        steps: Vec::new(),
        inputs: Vec::new(),
        seen: Vec::new(),
    };
    match walk.visit(out) {
        Some(FusedArg::Step(last)) if walk.steps.len() >= 2 => {
            Array::from_primitive(Fused::new(walk.steps, vec![last]), walk.inputs, out.shape(), out.dtype())
        }
        _ => out.clone(),
    }
}

/// At most this many steps go into a group built by [`fuse_producers`]: a longer eager chain
/// becomes several groups, so building each op copies a bounded number of steps.
const MAX_EAGER_STEPS: usize = 16;

/// `out`, an element-wise node just built from operands it owns, with the element-wise operands
/// that nothing but `out` references folded into it as one [`Fused`] node — on devices whose
/// backend fuses eagerly ([`crate::backend::fuses_eagerly`]: CUDA, where every folded op is a
/// kernel launch saved), outside transforms' traces and [`compile`](crate::compile).
///
/// An operand qualifies when its node is uncomputed, has `out`'s shape and device, is a fusable
/// element-wise op or a single-export group, and `out`'s input list holds the only handle to it:
/// no array, node or thread can reach it any more, so computing it inside `out`'s kernel instead
/// of its own is invisible except for the launch and the intermediate buffer saved. Its own
/// operands are then examined the same way. `p - g * lr` (the temporary `g * lr` is owned by the
/// subtraction) runs as one kernel; `let t = g * lr; p - &t` leaves `t` alone. The group
/// evaluates the same scalar functions in the same order, so the bits do not change.
pub(crate) fn fuse_producers(out: Array) -> Array {
    // every binary op passes here: on devices that do not fuse eagerly (the CPU), return before
    // cloning, allocating or locking anything
    if !crate::backend::fuses_eagerly(out.node.device) {
        return out;
    }
    let root = match &out.node.kind {
        NodeKind::Op(prim) => prim.clone(),
        _ => return out,
    };
    let (shape, device) = (out.shape().to_vec(), out.node.device);
    let worth_it = {
        let node = &out.node;
        let inputs = node.inputs.lock().unwrap_or_else(|e| e.into_inner());
        node.specs.len() == 1
            && !node.is_computed()
            && !node.seen_by_transforms()
            && !crate::transforms::compile_tracing()
            && inputs.last().is_some_and(|x| crate::backend::fusable(device, root.op(), x.dtype()))
            && inputs.iter().any(|x| absorbable(x, &shape, device).is_some())
    };
    if !worth_it {
        return out;
    }

    /// The steps an operand would add to the group when folded in, `None` when it cannot be.
    fn absorbable(x: &Array, shape: &[usize], device: crate::Device) -> Option<usize> {
        let node = &x.node;
        if Arc::strong_count(node) != 1
            || node.specs.len() != 1
            || node.device != device
            || x.shape() != shape
            || node.is_computed()
            || node.seen_by_transforms()
        {
            return None;
        }
        let NodeKind::Op(prim) = &node.kind else { return None };
        match prim.op() {
            Op::Fused(g) => (g.exports().len() == 1).then_some(g.steps().len()),
            op => {
                let inputs = node.inputs.lock().unwrap_or_else(|e| e.into_inner());
                let operand = inputs.last().map(|x| x.dtype())?;
                crate::backend::fusable(device, op, operand).then_some(1)
            }
        }
    }

    struct Build<'a> {
        shape: &'a [usize],
        device: crate::Device,
        steps: Vec<FusedStep>,
        inputs: Vec<Array>,
    }
    impl Build<'_> {
        /// Where the group reads `x` (an operand of a node in the group).
        fn visit(&mut self, x: &Array) -> FusedArg {
            let fits = absorbable(x, self.shape, self.device).filter(|n| self.steps.len() + n < MAX_EAGER_STEPS);
            if fits.is_none() {
                let id = x.id();
                let at = self.inputs.iter().position(|y| y.id() == id).unwrap_or_else(|| {
                    self.inputs.push(x.clone());
                    self.inputs.len() - 1
                });
                return FusedArg::Input(at);
            }
            let node = &x.node;
            let NodeKind::Op(prim) = &node.kind else { unreachable!("absorbable nodes are ops") };
            let operands = node.inputs.lock().unwrap_or_else(|e| e.into_inner());
            if let Op::Fused(g) = prim.op() {
                let args: Vec<FusedArg> = operands.iter().map(|o| self.visit(o)).collect();
                let base = self.steps.len();
                for step in g.steps() {
                    let mut copy = step.clone();
                    for a in copy.args.iter_mut() {
                        *a = match *a {
                            FusedArg::Input(i) => args[i],
                            FusedArg::Step(j) => FusedArg::Step(base + j),
                        };
                    }
                    self.steps.push(copy);
                }
                return FusedArg::Step(base + g.exports()[0]);
            }
            let args = operands.iter().map(|o| self.visit(o)).collect();
            self.steps.push(FusedStep { prim: prim.clone(), args, spec: node.specs[0].clone(), origin: node.origin });
            FusedArg::Step(self.steps.len() - 1)
        }
    }
    let mut build = Build { shape: &shape, device, steps: Vec::new(), inputs: Vec::new() };
    let args = {
        let operands = out.node.inputs.lock().unwrap_or_else(|e| e.into_inner());
        operands.iter().map(|o| build.visit(o)).collect()
    };
    if build.steps.is_empty() {
        return out;
    }
    build.steps.push(FusedStep { prim: root, args, spec: out.node.specs[0].clone(), origin: out.node.origin });
    let last = build.steps.len() - 1;
    let dtype = out.dtype();
    let fused = Array::from_primitive(Fused::new(build.steps, vec![last]), build.inputs, &shape, dtype);
    drop(out);
    fused
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

    /// The group as separate nodes, as a function of the inputs `argnums` only (the others are
    /// the constants `primals`), and those inputs: what the VJP and JVP rules transform. Only
    /// the inputs being differentiated are variables, so a partial that is not finite for a
    /// constant input (`d a^b / d b = a^b · log a` at `a < 0`) never meets a zero tangent
    /// (`0 · NaN`).
    fn expanded_in(&self, primals: &[Array], argnums: &[usize]) -> (impl Fn(&[Array]) -> Vec<Array>, Vec<Array>) {
        let (group, all, at) = (self.clone(), primals.to_vec(), argnums.to_vec());
        let wrt = argnums.iter().map(|&i| primals[i].clone()).collect();
        let f = move |xs: &[Array]| {
            let mut inputs = all.clone();
            for (x, &i) in xs.iter().zip(&at) {
                inputs[i] = x.clone();
            }
            group.expand(&inputs)
        };
        (f, wrt)
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
        let (f, wrt) = self.expanded_in(primals, argnums);
        let (_, grads) = crate::transforms::vjp(f, &wrt, cotangents)?;
        Ok(grads)
    }

    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], _outputs: &[Array]) -> Result<Vec<Array>> {
        let (f, wrt) = self.expanded_in(primals, argnums);
        let (_, out) = crate::transforms::jvp(f, &wrt, tangents)?;
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

/// Independent [`Fused`] groups, each of its own shape, evaluated as one node: built by
/// [`compile`](crate::compile) for the groups at the end of a CUDA program that only the
/// program's outputs read (an optimizer's updates of several parameters), so that they run as
/// one kernel instead of one per parameter shape.
///
/// The node's inputs are the members' inputs one member after another, and its outputs their
/// exports in the same order. Each member computes exactly what it computes alone, so results
/// do not change; the rules are the members' rules, applied member by member.
#[derive(Clone, Debug)]
pub struct FusedBatch {
    inner: Arc<BatchBody>,
}

#[derive(Debug)]
struct BatchBody {
    members: Vec<BatchMember>,
    /// The CUDA kernels made for this batch (see [`Fused::cuda_kernels`]).
    #[cfg(feature = "cuda")]
    cuda_kernels: std::sync::Mutex<Vec<crate::backend::cuda::fused::GroupKernel>>,
}

/// One group of a [`FusedBatch`]: the group, its shape, and where its inputs and outputs sit
/// among the batch's.
#[derive(Clone, Debug)]
pub(crate) struct BatchMember {
    /// The group.
    pub(crate) group: Fused,
    /// The shape of every step of the group.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) shape: crate::Shape,
    /// The batch's inputs this member reads.
    pub(crate) inputs: std::ops::Range<usize>,
    /// The batch's outputs this member computes.
    pub(crate) outputs: std::ops::Range<usize>,
}

impl FusedBatch {
    /// A batch of `groups` (each with its shape and its number of inputs), in output order.
    pub(crate) fn new(groups: Vec<(Fused, crate::Shape, usize)>) -> FusedBatch {
        let (mut i, mut o) = (0, 0);
        let members = groups
            .into_iter()
            .map(|(group, shape, n_inputs)| {
                let n_outputs = group.exports().len();
                let m = BatchMember { group, shape, inputs: i..i + n_inputs, outputs: o..o + n_outputs };
                (i, o) = (i + n_inputs, o + n_outputs);
                m
            })
            .collect();
        FusedBatch {
            inner: Arc::new(BatchBody {
                members,
                #[cfg(feature = "cuda")]
                cuda_kernels: Default::default(),
            }),
        }
    }

    /// The groups, in output order.
    pub(crate) fn members(&self) -> &[BatchMember] {
        &self.inner.members
    }

    /// The CUDA kernels made for this batch so far (see `backend::cuda::fused`).
    #[cfg(feature = "cuda")]
    pub(crate) fn cuda_kernels(&self) -> &std::sync::Mutex<Vec<crate::backend::cuda::fused::GroupKernel>> {
        &self.inner.cuda_kernels
    }
}

impl Primitive for FusedBatch {
    fn name(&self) -> &str {
        "fused_batch"
    }

    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fused_batch[")?;
        for (i, m) in self.inner.members.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            m.group.describe(f)?;
        }
        write!(f, "]")
    }

    fn op(&self) -> Op<'_> {
        Op::FusedBatch(self)
    }

    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let mut grads: Vec<Option<Array>> = vec![None; primals.len()];
        for m in self.members() {
            let local: Vec<usize> =
                argnums.iter().filter(|&&a| m.inputs.contains(&a)).map(|&a| a - m.inputs.start).collect();
            if local.is_empty() {
                continue;
            }
            let (ins, outs) = (m.inputs.clone(), m.outputs.clone());
            let g = m.group.vjp(&primals[ins], &cotangents[outs.clone()], &local, &outputs[outs])?;
            for (a, g) in local.into_iter().zip(g) {
                grads[m.inputs.start + a] = Some(g);
            }
        }
        Ok(argnums.iter().map(|&a| grads[a].take().expect("every member input asked for has a gradient")).collect())
    }

    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let mut out = Vec::with_capacity(outputs.len());
        for m in self.members() {
            let (local, ts): (Vec<usize>, Vec<Array>) = argnums
                .iter()
                .zip(tangents)
                .filter(|(a, _)| m.inputs.contains(a))
                .map(|(&a, t)| (a - m.inputs.start, t.clone()))
                .unzip();
            if local.is_empty() {
                out.extend(outputs[m.outputs.clone()].iter().map(crate::ops::zeros_like));
                continue;
            }
            out.extend(m.group.jvp(&primals[m.inputs.clone()], &ts, &local, &outputs[m.outputs.clone()])?);
        }
        Ok(out)
    }

    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let (mut outs, mut out_axes) = (Vec::new(), Vec::new());
        for m in self.members() {
            let (ins, ax) = (&inputs[m.inputs.clone()], &axes[m.inputs.clone()]);
            if ax.iter().all(Option::is_none) {
                // a member reading no batched input computes unbatched values
                let o = m.group.expand(ins);
                out_axes.extend(std::iter::repeat_n(None, o.len()));
                outs.extend(o);
                continue;
            }
            let (o, a) = m.group.vmap(ins, ax)?;
            outs.extend(o);
            out_axes.extend(a);
        }
        Ok((outs, out_axes))
    }
}

#[cfg(test)]
mod tests {
    use crate::primitive::Op;
    use crate::Array;

    fn is_fused(a: &Array) -> bool {
        matches!(a.node.primitive().map(|p| p.op()), Some(Op::Fused(_)))
    }

    /// The gradients of `maximum` and `divide` (a partial and its product with the cotangent)
    /// are one fused node each, with the values of the rule written out by hand: `c` where
    /// `x > 0`, `c / 2` at ties (`0` and `-0`), `0` below; `-c · a / b²` for the divisor.
    #[test]
    fn rule_chains_fuse_into_one_node() {
        let x = Array::from_vec(vec![-1.5f32, 0.0, 2.0, 3.0, -0.0, 7.0], &[2, 3]);
        let c = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let (_, g) = crate::vjp(|a: &[Array]| a[0].maximum(0.0), &[x.clone()], &[c.clone()]).unwrap();
        assert!(is_fused(&g[0]), "{:?}", g[0]);
        assert_eq!(g[0].to_vec::<f32>().unwrap(), vec![0.0, 1.0, 3.0, 4.0, 2.5, 6.0]);

        let (a, b) = (Array::from_vec(vec![1.0f64, -3.0, 5.0], &[3]), Array::from_vec(vec![2.0f64, 4.0, -8.0], &[3]));
        let cot = Array::from_vec(vec![1.0f64, 0.5, -2.0], &[3]);
        let (_, g) = crate::vjp(|v: &[Array]| &v[0] / &v[1], &[a, b], &[cot]).unwrap();
        assert!(is_fused(&g[1]), "{:?}", g[1]);
        let want: Vec<f64> = [(1.0, 2.0, 1.0), (-3.0, 4.0, 0.5), (5.0, -8.0, -2.0)]
            .iter()
            .map(|&(a, b, c): &(f64, f64, f64)| -c * (a / b) / b)
            .collect();
        assert_eq!(g[1].to_vec::<f64>().unwrap(), want);
    }

    /// A compiled group differentiates only in the inputs asked for: the partial in the
    /// constant exponent of `x³` is `x³ · log x`, NaN at `x < 0`, and must not meet a zero
    /// tangent (`0 · NaN`) in a forward-mode derivative, nor a zero cotangent in reverse mode.
    #[test]
    fn group_rules_treat_other_inputs_as_constants() {
        let cube = crate::compile(|a: &[Array]| -> crate::Result<Vec<Array>> { Ok(vec![a[0].power(3.0) + 1.0]) });
        let x = Array::from_vec(vec![-1.0f64, 2.0], &[2]);
        let f = move |a: &[Array]| cube(a).unwrap();
        let (_, t) = crate::jvp(&f, &[x.clone()], &[Array::from_vec(vec![1.0f64, 1.0], &[2])]).unwrap();
        assert_eq!(t[0].to_vec::<f64>().unwrap(), vec![3.0, 12.0]);
        let (_, g) = crate::vjp(&f, &[x], &[Array::from_vec(vec![1.0f64, 1.0], &[2])]).unwrap();
        assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![3.0, 12.0]);
    }

    /// Inside `compile` the rule leaves its ops to the program's own fusion pass, and the
    /// compiled gradient equals the eager (rule-fused) one bit for bit.
    #[test]
    fn compiled_gradients_match_rule_fused_ones() {
        let f = |a: &[Array]| -> crate::Result<Vec<Array>> {
            let (_, g) = crate::vjp(|v: &[Array]| (v[0].maximum(&v[1]) / &v[1]).sin(), &a[..2], &a[2..])?;
            assert!(g.iter().all(|g| !is_fused(g)) || !crate::transforms::compile_tracing());
            Ok(g)
        };
        let key = crate::random::key(3);
        let ks = crate::random::split_keys(&key, 3);
        let xs: Vec<Array> =
            ks.iter().map(|k| crate::random::uniform(k, &[4, 5], -1.0, 1.0, crate::DType::F32)).collect();
        let eager = f(&xs).unwrap();
        let compiled = crate::compile(f)(&xs).unwrap();
        for (e, c) in eager.iter().zip(&compiled) {
            let (e, c) = (e.to_vec::<f32>().unwrap(), c.to_vec::<f32>().unwrap());
            assert!(e.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()), "{e:?} vs {c:?}");
        }
    }
}
