//! Topological ordering and evaluation of the graph.
//!
//! Evaluation is iterative (no recursion, so a chain of a million ops is fine), computes each
//! node once even when several threads evaluate overlapping graphs (each node's result sits in a
//! `OnceLock`), and releases a node's inputs as soon as it is computed so intermediate buffers
//! are freed once their last consumer ran — except for nodes a transform is tracing through.
//! A node that does not keep its inputs hands them to its primitive by ownership
//! (`Primitive::eval_cpu_owned`), so an element-wise kernel can write its output into the buffer
//! of an input that nothing else references (buffer donation).
use crate::array::{Node, NodeKind};
use crate::backend::Storage;
use crate::primitive::{Op, Spec};
use crate::{Array, Error, Result};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Nodes reachable from `outputs` in post-order (inputs before consumers), not descending into
/// nodes for which `stop` is true (they are included themselves).
pub(crate) fn topo_order(outputs: &[Array], mut stop: impl FnMut(&Node) -> bool) -> Vec<Arc<Node>> {
    let mut order = Vec::new();
    let mut visited: IdSet<usize> = IdSet::default();
    let mut stack: Vec<(Arc<Node>, bool)> = outputs.iter().rev().map(|a| (a.node.clone(), false)).collect();
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
    order
}

/// Compute `outputs` and every uncomputed node they depend on.
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
    let active = ActiveEval::enter();
    if active.alone && worth_a_worker_thread(&tape) {
        run_on_first_worker(move |progress| {
            tape.into_iter().for_each(|node| {
                compute(&node);
                progress.fetch_add(1, Ordering::Relaxed);
            })
        });
    } else {
        tape.into_iter().for_each(|node| compute(&node));
    }
    drop(active);
    for a in outputs {
        a.computed_storage()?;
    }
    Ok(())
}

/// Compute one node whose inputs are computed (no-op if it already is).
fn compute(node: &Arc<Node>) {
    if node.is_computed() {
        return;
    }
    node.data.get_or_init(|| {
        let mut inputs = node.inputs.lock().unwrap_or_else(|e| e.into_inner());
        match &node.kind {
            NodeKind::Leaf => Err(Error::Eval("leaf without data".into())),
            NodeKind::Placeholder => Err(Error::Transform(
                "cannot evaluate an array inside a function being vmapped (its values do not exist \
                 until the batched graph runs); return it instead of reading it"
                    .into(),
            )),
            NodeKind::Op(prim) => {
                for inp in inputs.iter() {
                    inp.computed_storage()?;
                }
                let out = match prim.op() {
                    Op::PassThrough { first } => inputs[first..first + node.specs.len()]
                        .iter()
                        .map(|x| x.computed_storage().cloned())
                        .collect::<Result<Vec<_>>>()?,
                    Op::Call(call) => eval_call(call, &inputs, &node.specs)?,
                    Op::ToDevice(device) => {
                        vec![crate::backend::transfer(inputs[0].computed_storage()?, &node.specs[0], device)?]
                    }
                    // a kernel's allocation failure names only its size: the node adds its op
                    // and result (`Error::in_op`)
                    op if node.keeps_inputs() => crate::backend::eval(node.device, op, &inputs, &node.specs)
                        .map_err(|e| e.in_op(&**prim, &node.specs[0]))?,
                    op => {
                        // The node lets go of its inputs now rather than after the kernel, and hands
                        // them over, so an input referenced by nothing else can donate its buffer
                        // to the output (and is freed as soon as the kernel is done with it).
                        let owned = std::mem::take(&mut *inputs);
                        drop(inputs);
                        crate::backend::eval_owned(node.device, op, owned, &node.specs)
                            .map_err(|e| e.in_op(&**prim, &node.specs[0]))?
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
                Ok(SmallVec::from_vec(out))
            }
        }
    });
    if !node.keeps_inputs() {
        let taken = std::mem::take(&mut *node.inputs.lock().unwrap_or_else(|e| e.into_inner()));
        drop(taken);
    }
}

/// Evaluate a [`Call`](crate::primitives::graph::Call) node: rebuild its function on leaves
/// holding the computed inputs and evaluate the result (on whatever devices its ops use).
fn eval_call(call: &crate::primitives::graph::Call, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Storage>> {
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

/// Outputs of at least this many elements make a graph worth evaluating on a rayon worker.
const WORKER_MIN_ELEMENTS: usize = 4096;

/// Whether to evaluate on a rayon worker thread: this thread is not one, the pool has several
/// threads, and some node is large enough that a kernel may split its work. Small graphs stay
/// on the calling thread (handing them over costs more than they take).
fn worth_a_worker_thread(tape: &[Arc<Node>]) -> bool {
    rayon::current_thread_index().is_none()
        && rayon::current_num_threads() > 1
        && tape.iter().any(|n| n.specs.iter().any(|s| crate::shape::numel(&s.shape) >= WORKER_MIN_ELEMENTS))
}

/// Run `work` on the global pool's first worker thread and wait for it.
///
/// A kernel that splits its work over the pool then does part of it on the evaluating thread,
/// instead of waking the workers and sleeping until they are done (a loop of 32×256 products ran
/// slower on two threads than on one that way). Always the *same* worker: buffers are allocated
/// by the thread that evaluates, and glibc keeps freed memory per thread arena, so evaluations
/// wandering between workers kept one cache of freed buffers per worker (the training example's
/// peak rose from 98 to 161 MiB when any worker could take an evaluation).
///
/// The other workers do not go back to sleep while the evaluation makes progress: they spin,
/// running any kernel piece the evaluating worker offers (`rayon::yield_now`), so a kernel that
/// splits its work finds them awake. Sleeping between the single-threaded stretches of a step
/// and being woken for the next product cost a quarter of a loop of 32×256 products in
/// scheduler time (custom_vjp bench, best of 10, four interleaved pairs: 43–52 ms spinning,
/// 53–60 ms not). The price: during a large evaluation every pool thread keeps its core busy.
///
/// `work` counts the nodes it has computed in the counter it is given, and a spinning worker
/// stops spinning once that count has not moved, and no kernel piece was offered, for
/// [`SPIN_WITHOUT_PROGRESS`]. That bound keeps this free of deadlock: a worker can start its
/// spinning job while it is inside a kernel piece stolen from the evaluating worker (rayon runs a
/// thread's broadcast job whenever the thread looks for local work, also while it waits inside a
/// join). The evaluating worker then waits for that piece, which lies below the spinning job on
/// the spinner's stack, so it makes no progress and offers nothing; the spinner notices, returns,
/// and the piece completes. Without the bound this hung after a few seconds of repeated 64×256
/// products (tests/pool_evaluation.rs). Jobs of other users of the global pool can keep a
/// spinner busy and delay that return until they run out.
fn run_on_first_worker(work: impl FnOnce(&AtomicUsize) + Send) {
    /// Marks the evaluation finished when dropped, also when it panics.
    struct Finished<'a>(&'a AtomicBool);
    impl Drop for Finished<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let work = std::sync::Mutex::new(Some(work));
    let done = AtomicBool::new(false);
    let progress = AtomicUsize::new(0);
    rayon::broadcast(|ctx| {
        if ctx.index() == 0 {
            let _finished = Finished(&done);
            let w = work.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(w) = w {
                w(&progress);
            }
        } else {
            spin_while_progressing(&done, &progress);
        }
    });
}

/// How long a spinning worker waits, with no node finished and no kernel piece offered, before
/// it stops spinning (see [`run_on_first_worker`]). Nodes of the workloads that gain from
/// spinning take tens to hundreds of microseconds; a longer single-threaded stretch only loses
/// the spinning for the rest of its evaluation (later kernel pieces still reach the worker
/// through rayon's usual wake-up).
const SPIN_WITHOUT_PROGRESS: std::time::Duration = std::time::Duration::from_millis(2);

/// Run offered kernel pieces until `done`, or until for [`SPIN_WITHOUT_PROGRESS`] neither has
/// `progress` moved nor was there a piece to run.
fn spin_while_progressing(done: &AtomicBool, progress: &AtomicUsize) {
    let mut seen = progress.load(Ordering::Relaxed);
    let mut since = std::time::Instant::now();
    let mut idle = 0u32;
    while !done.load(Ordering::Acquire) {
        if let Some(rayon::Yield::Executed) = rayon::yield_now() {
            // a piece of a kernel split over the pool: the evaluation is alive (a single long
            // product offers pieces round after round without finishing a node)
            idle = 0;
            since = std::time::Instant::now();
            continue;
        }
        idle = idle.wrapping_add(1);
        if !idle.is_multiple_of(64) {
            std::hint::spin_loop();
            continue;
        }
        let now = progress.load(Ordering::Relaxed);
        if now != seen {
            seen = now;
            since = std::time::Instant::now();
        } else if since.elapsed() > SPIN_WITHOUT_PROGRESS {
            return;
        }
        // let other runnable threads of the machine have the core now and then
        std::thread::yield_now();
    }
}

/// Evaluations in progress, on all threads.
static ACTIVE_EVALS: AtomicUsize = AtomicUsize::new(0);

/// Counts one evaluation in progress while it lives.
///
/// Only an evaluation that starts while no other one is in progress may move to a rayon
/// worker. A worker waiting inside a kernel steals other pool jobs; if one of them were
/// another thread's evaluation, it could block on a node this worker is computing further up
/// its own stack and never return. With at most one evaluation on the pool, the jobs a worker
/// can steal are kernel pieces, which never wait for a node.
struct ActiveEval {
    alone: bool,
}

impl ActiveEval {
    fn enter() -> ActiveEval {
        ActiveEval { alone: ACTIVE_EVALS.fetch_add(1, Ordering::AcqRel) == 0 }
    }
}

impl Drop for ActiveEval {
    fn drop(&mut self) {
        ACTIVE_EVALS.fetch_sub(1, Ordering::AcqRel);
    }
}
