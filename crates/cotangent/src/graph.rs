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
use crate::{Array, Error, Result};
use smallvec::SmallVec;
use std::collections::HashSet;
use std::sync::Arc;

/// Nodes reachable from `outputs` in post-order (inputs before consumers), not descending into
/// nodes for which `stop` is true (they are included themselves).
pub(crate) fn topo_order(outputs: &[Array], mut stop: impl FnMut(&Node) -> bool) -> Vec<Arc<Node>> {
    let mut order = Vec::new();
    let mut visited: HashSet<usize> = HashSet::new();
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
        return outputs.iter().try_for_each(|a| a.computed_data().map(|_| ()));
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
    // Runs on the calling thread. (Handing large evaluations to a rayon worker, so parallel
    // kernels would not wake the pool and sleep, sped up a loop of small products by a third
    // but put buffers and graph nodes in two malloc arenas: the training example's peak memory
    // rose from 98 to 161 MiB. A buffer pool shared by all threads would allow it.)
    for node in tape {
        compute(&node);
    }
    for a in outputs {
        a.computed_data()?;
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
                    inp.computed_data()?;
                }
                let out = if node.keeps_inputs() {
                    prim.eval_cpu(&inputs, &node.specs)?
                } else {
                    // The node lets go of its inputs now rather than after the kernel, and hands
                    // them over, so an input referenced by nothing else can donate its buffer
                    // to the output (and is freed as soon as the kernel is done with it).
                    let owned = std::mem::take(&mut *inputs);
                    drop(inputs);
                    prim.eval_cpu_owned(owned, &node.specs)?
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
