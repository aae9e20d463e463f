//! Topological ordering and evaluation of the graph.
//!
//! Evaluation is iterative (no recursion, so a chain of a million ops is fine), computes each
//! node once even when several threads evaluate overlapping graphs (one thread claims a node and
//! stores its result, also a failure, in the node's `OnceLock`; see [`compute`]), and releases a node's inputs as soon as it is computed so intermediate buffers
//! are freed once their last consumer ran — except for nodes a transform is tracing through.
//! A node that does not keep its inputs hands them to its primitive by ownership
//! (`backend::eval_owned`), so an element-wise kernel can write its output into the buffer
//! of an input that nothing else references (buffer donation).
use crate::array::{Node, NodeKind};
use crate::backend::cpu::pool::{self, Place, SPLIT_MIN_ELEMENTS};
use crate::backend::Outputs;
use crate::primitive::{Op, Spec};
use crate::{Array, Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Hasher for maps keyed by node identities (addresses of nodes, and output indices): the
/// multiply-rotate mix of rustc's FxHash. Addresses are distinct and spread out, so they need no
/// protection against collision attacks; SipHash (the standard maps' default) was about a tenth
/// of the time of an eager gradient of a chain of scalar ops (hashing in `topo_order` and in the
/// reverse pass's cotangent map).
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A hash map keyed by node identities (see [`IdHasher`]).
pub(crate) type IdMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;
/// A hash set of node identities (see [`IdHasher`]).
pub(crate) type IdSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<IdHasher>>;

/// The largest visited set [`topo_order`] keeps for the next walk on its thread (clearing a set
/// costs time in proportion to its capacity, so a huge one is dropped instead).
const KEPT_VISITED_CAPACITY: usize = 4096;

/// [`topo_order`]'s visited set and its stack of (node, inputs pushed already).
type TopoScratch = (IdSet<usize>, Vec<(Arc<Node>, bool)>);

thread_local! {
    /// [`topo_order`]'s visited set and stack, kept between walks on this thread: an eager
    /// program walks a small graph at every evaluation, and growing fresh ones each time was a
    /// tenth of the time of a chain of small ops.
    static TOPO_SCRATCH: std::cell::Cell<TopoScratch> = Default::default();
}

/// Nodes reachable from `outputs` in post-order (inputs before consumers), not descending into
/// nodes for which `stop` is true (they are included themselves).
pub(crate) fn topo_order(outputs: &[Array], mut stop: impl FnMut(&Node) -> bool) -> Vec<Arc<Node>> {
    let mut order = Vec::new();
    // Taken out of the thread's cell (a nested walk on this thread finds an empty one).
    let (mut visited, mut stack) = TOPO_SCRATCH.take();
    stack.extend(outputs.iter().rev().map(|a| (a.node.clone(), false)));
    while let Some((node, expanded)) = stack.pop() {
        if expanded {
            order.push(node);
            continue;
        }
        let id = Arc::as_ptr(&node) as *const u8 as usize;
        if !visited.insert(id) {
            continue;
        }
        let descend = !stop(&node);
        stack.push((node.clone(), true));
        if descend {
            let inputs = node.inputs.lock().unwrap_or_else(|e| e.into_inner());
            for inp in inputs.iter().rev() {
                if !visited.contains(&inp.node_id()) {
                    stack.push((inp.node.clone(), false));
                }
            }
        }
    }
    if visited.capacity() <= KEPT_VISITED_CAPACITY {
        visited.clear();
        TOPO_SCRATCH.set((visited, stack));
    }
    order
}

/// Compute `outputs` and every uncomputed node they depend on.
///
/// Where the work runs (see `backend::cpu::pool` for why): an evaluation that starts on a thread
/// of no rayon pool while no other thread is evaluating, and has a node whose kernel may split,
/// walks its nodes on the kernel pool's first worker. That walk never waits
/// for a node another thread is computing and never runs user code: it stops before such a node
/// and before a lazily applied function (`Call`), and hands the rest back to the calling thread,
/// which waits for (or computes) that node itself and then starts a new walk. Every other
/// evaluation computes its nodes on the calling thread: small kernels right there, large ones on
/// the kernel pool while the calling thread blocks without running anything else. (Whether a
/// kernel may split: `kernel_may_split`.)
pub(crate) fn eval(outputs: &[Array]) -> Result<()> {
    if outputs.iter().all(|a| a.node.is_computed()) {
        return outputs.iter().try_for_each(|a| a.computed_storage().map(|_| ()));
    }
    let mut tape = topo_order(outputs, |n| n.is_computed());
    // Run nodes in the order the program created them (a topological order: inputs are always
    // created first), not depth-first from the outputs. Creation order is the order eager
    // execution would use, and reverse mode creates each node's backward computation when it
    // reaches that node: a checkpointed segment's recomputation, its backward and every gradient
    // term that needs its recomputed values (a weight's gradient, dq of a recurrence) are created
    // together, after the later segments' backward. So a segment's recomputation is finished and
    // freed before the previous one starts. Any depth-first order (also deepest-input-first)
    // computes one output's whole subtree before the next output's, so gradient terms off the
    // backward chain ran at the very end and kept every recomputed segment alive.
    // Consuming the tape releases each node as it goes.
    tape.sort_by_key(|n| n.seq);
    let place = pool::place();
    // No user code runs on the kernel pool (the walk stops before `Call` nodes), so no
    // evaluation starts there.
    debug_assert_ne!(place, Place::Pool, "an evaluation started on a thread of cotangent's kernel pool");
    let active = ActiveEval::enter();
    if place == Place::Plain && active.alone && worth_a_worker_thread(&tape) {
        let mut tape: std::collections::VecDeque<Arc<Node>> = tape.into();
        while !tape.is_empty() {
            pool::run_on_first_worker(|progress| {
                while let Some(node) = tape.front() {
                    if !compute(node, Place::Pool, Wait::Never) {
                        break;
                    }
                    tape.pop_front();
                    progress.fetch_add(1, Ordering::Relaxed);
                }
            });
            // The walk stopped at a node another thread is computing, or at a `Call`: wait for
            // it, or compute it, here.
            if let Some(node) = tape.pop_front() {
                compute(&node, place, Wait::Block);
            }
        }
    } else {
        tape.into_iter().for_each(|node| {
            compute(&node, place, Wait::Block);
        });
    }
    drop(active);
    for a in outputs {
        a.computed_storage()?;
    }
    Ok(())
}

/// What [`compute`] does with a node it cannot compute right away.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Wait for a node another thread is computing, and compute a `Call` here: for threads
    /// that run nothing else while they wait (not a kernel pool thread).
    Block,
    /// Return `false` instead (the walk on the kernel pool's first worker).
    Never,
}

/// Compute one node whose inputs are computed; returns whether it is computed (`false` only
/// with [`Wait::Never`]).
///
/// The one thread that claims the node computes it and stores the result — the outputs, an
/// error, or a panic of its kernel or of a lazily applied function's body, turned into an `Err`
/// that names the op — so every reader, on every thread, now and later, gets that same result.
/// (A node that does not keep its inputs gives them to its kernel, so it could never be computed
/// again anyway.) A thread that finds the node claimed by another waits for that result, or,
/// with [`Wait::Never`], returns `false` at once; with [`Wait::Never`] a `Call` is left
/// unclaimed too, for the calling thread (its body is user code and may wait for nodes).
///
/// `place` is where the caller runs (see `pool::run_kernel`).
fn compute(node: &Arc<Node>, place: Place, wait: Wait) -> bool {
    if node.is_computed() {
        return true;
    }
    if wait == Wait::Never && matches!(&node.kind, NodeKind::Op(prim) if matches!(prim.op(), Op::Call(_))) {
        return false;
    }
    if !node.claim() {
        if wait == Wait::Never {
            return false;
        }
        // The claiming thread stores a result whatever happens (its panics are caught below),
        // and it never waits for this thread (nodes form no cycles), so this wait ends.
        node.data.wait();
        return true;
    }
    let keeps_inputs = node.keeps_inputs();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compute_claimed(node, place, keeps_inputs)))
        .unwrap_or_else(|payload| Err(panic_error(node, &*payload)));
    // This thread claimed the node, so nobody else stores a result.
    let _ = node.data.set(result);
    if !keeps_inputs {
        let taken = std::mem::take(&mut *node.inputs.lock().unwrap_or_else(|e| e.into_inner()));
        drop(taken);
    }
    true
}

/// The outputs of a node this thread has claimed (see [`compute`]); `keeps_inputs` is
/// `node.keeps_inputs()`.
fn compute_claimed(node: &Arc<Node>, place: Place, keeps_inputs: bool) -> Result<Outputs> {
    let prim = match &node.kind {
        NodeKind::Leaf => return Err(Error::Eval("leaf without data".into())),
        NodeKind::Placeholder => return Err(crate::transforms::stand_in_error()),
        NodeKind::Op(prim) => prim,
    };
    let mut inputs = node.inputs.lock().unwrap_or_else(|e| e.into_inner());
    for inp in inputs.iter() {
        inp.computed_storage()?;
    }
    let op = prim.op();
    let out = match op {
        Op::PassThrough { first } => inputs[first..first + node.specs.len()]
            .iter()
            .map(|x| x.computed_storage().cloned())
            .collect::<Result<Outputs>>()?,
        Op::Call(call) => {
            // The body is user code that evaluates: run it without holding the lock (another
            // thread's `topo_order` may want it meanwhile).
            let inputs_now = inputs.clone();
            drop(inputs);
            eval_call(call, &inputs_now, &node.specs)?
        }
        Op::ToDevice(device) => {
            smallvec::smallvec![crate::backend::transfer(inputs[0].computed_storage()?, &node.specs[0], device)
                .map_err(|e| e.in_node(node))?]
        }
        _ => {
            let may_split = place != Place::Pool && kernel_may_split(node, op, &inputs);
            // The node lets go of its inputs now rather than after the kernel when it need not
            // keep them, and hands them over, so an input referenced by nothing else can donate
            // its buffer to the output (and is freed as soon as the kernel is done with it).
            let handed = if keeps_inputs { inputs.clone() } else { std::mem::take(&mut *inputs) };
            drop(inputs);
            if may_split {
                // A kernel that may split its work runs on the kernel pool (see
                // `pool::run_kernel`), which needs owned values.
                let owner = node.clone();
                pool::run_kernel(place, true, move || {
                    let NodeKind::Op(prim) = &owner.kind else { unreachable!() };
                    run_kernel_of(&owner, prim.op(), handed, !keeps_inputs)
                })?
            } else {
                run_kernel_of(node, op, handed, !keeps_inputs)?
            }
        }
    };
    if out.len() != node.specs.len() {
        return Err(Error::Eval(format!(
            "{} produced {} outputs, expected {}",
            prim.name(),
            out.len(),
            node.specs.len()
        )));
    }
    Ok(out)
}

/// Runs the backend kernel of `node` on its inputs, which it may consume (donate buffers) when
/// the node gave them up (`owned`); a kernel's errors do not know their node: this adds its op,
/// result and origin (`Error::in_node`).
fn run_kernel_of(node: &Node, op: Op<'_>, inputs: Vec<Array>, owned: bool) -> Result<Outputs> {
    if owned {
        crate::backend::eval_owned(node.device, op, inputs, &node.specs)
    } else {
        crate::backend::eval(node.device, op, &inputs, &node.specs)
    }
    .map_err(|e| e.in_node(node))
}

/// The error stored in a node whose computation panicked: names the op and quotes the message.
fn panic_error(node: &Node, payload: &(dyn std::any::Any + Send)) -> Error {
    let message = if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    };
    let name = match &node.kind {
        NodeKind::Op(prim) => prim.name(),
        _ => "a leaf",
    };
    match &node.origin {
        Some(origin) => Error::Eval(format!("{origin}: computing `{name}` panicked: {message}")),
        None => Error::Eval(format!("computing `{name}` panicked: {message}")),
    }
}

/// Evaluate a [`Call`](crate::primitives::graph::Call) node: rebuild its function on leaves
/// holding the computed inputs and evaluate the result (on whatever devices its ops use).
fn eval_call(call: &crate::primitives::graph::Call, inputs: &[Array], outputs: &[Spec]) -> Result<Outputs> {
    let leaves = inputs
        .iter()
        .map(|x| Ok(Array::from_storage(x.computed_storage()?.clone(), x.shape(), x.dtype())))
        .collect::<Result<Vec<Array>>>()?;
    let outs = (call.body)(&leaves)?;
    let specs: Vec<&Spec> = outs.iter().map(|o| o.spec()).collect();
    if specs.len() != outputs.len() || specs.iter().zip(outputs).any(|(a, b)| *a != b) {
        return Err(Error::Eval(format!(
            "{}: rebuilt at evaluation, it returned {specs:?} where it first returned {outputs:?} \
             (forwards and rules must be pure functions of their inputs)",
            call.name
        )));
    }
    drop(leaves);
    eval(&outs)?;
    outs.iter().map(|o| o.computed_storage().cloned()).collect()
}

/// Whether to walk on the kernel pool's first worker: some node's kernel may split its work,
/// so it must run on the pool anyway, and one hand-over per walk beats one per node (also with a
/// pool of one thread). Graphs whose kernels all run on one thread stay on the calling thread:
/// handing them over costs more than it saves, and every lazily applied function (`Call`) would
/// end a walk and cost two hand-overs (a 64-step chunked gated delta spent 15 % of its time so).
/// Where their buffers come from no longer depends on the thread: the host buffer cache
/// (`backend::cpu::host_cache`) serves every thread alike.
fn worth_a_worker_thread(tape: &[Arc<Node>]) -> bool {
    tape.iter().any(|n| match &n.kind {
        NodeKind::Op(prim) => {
            let large = n.specs.iter().any(|s| crate::shape::numel(&s.shape) >= SPLIT_MIN_ELEMENTS);
            if large || n.device != crate::Device::Cpu {
                return large && n.device == crate::Device::Cpu;
            }
            // below that size only a product splits (over its large operands or its rows)
            let op = prim.op();
            matches!(op, Op::Matmul) && kernel_may_split(n, op, &n.inputs.lock().unwrap_or_else(|e| e.into_inner()))
        }
        _ => false,
    })
}

/// Whether the CPU kernel of `node` (op `op`, over `inputs`) may split its work over the kernel
/// pool, so that it must run there: a node with an input or output of at least
/// [`SPLIT_MIN_ELEMENTS`] elements (every kernel's parallel threshold is at least that, checked
/// in `backend::cpu::pool`), or a product that `backend::cpu::matmul` parallelises by its
/// multiply-adds ([`matmul::may_split`](crate::backend::cpu::matmul::may_split)). Inputs may be
/// left out (`&[]`) where they are not at hand (deciding whether a graph is worth a walk).
fn kernel_may_split(node: &Node, op: Op<'_>, inputs: &[Array]) -> bool {
    if node.device != crate::Device::Cpu {
        return false;
    }
    let large = |n: usize| n >= SPLIT_MIN_ELEMENTS;
    if node.specs.iter().any(|s| large(crate::shape::numel(&s.shape))) || inputs.iter().any(|x| large(x.size())) {
        return true;
    }
    match (op, inputs) {
        (Op::Matmul, [a, b]) => crate::backend::cpu::matmul::may_split(a.shape(), b.shape(), &node.specs[0].shape),
        _ => false,
    }
}

/// Evaluations in progress, on all threads.
static ACTIVE_EVALS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Evaluations in progress on this thread (an evaluation inside a `Call`'s body nests).
    static EVALS_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts one evaluation in progress while it lives.
///
/// Only an evaluation that starts while no other thread's evaluation is in progress walks on
/// the kernel pool's first worker (the outer evaluations of this thread, if any, are waiting for
/// this one and hold no walk). Two walks at once would keep two sets of spinning workers and
/// share one worker thread; one walk at a time also keeps allocation on one thread (see
/// `pool::run_on_first_worker`). Correctness does not depend on it: a walk never blocks on a node.
struct ActiveEval {
    alone: bool,
}

impl ActiveEval {
    fn enter() -> ActiveEval {
        let here = EVALS_HERE.with(|e| e.replace(e.get() + 1));
        ActiveEval { alone: ACTIVE_EVALS.fetch_add(1, Ordering::AcqRel) == here }
    }
}

impl Drop for ActiveEval {
    fn drop(&mut self) {
        EVALS_HERE.with(|e| e.set(e.get() - 1));
        ACTIVE_EVALS.fetch_sub(1, Ordering::AcqRel);
    }
}
