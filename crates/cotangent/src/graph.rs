//! Topological ordering and evaluation of the graph.
//!
//! Evaluation is iterative (no recursion, so a chain of a million ops is fine), computes each
//! node once even when several threads evaluate overlapping graphs (each node's result sits in a
//! `OnceLock`), and releases a node's inputs as soon as it is computed so intermediate buffers
//! are freed once their last consumer ran — except for nodes a transform is tracing through.
use crate::array::{Node, NodeKind};
use crate::{Array, Error, Result};
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Nodes reachable from `outputs` in post-order (inputs before consumers), not descending into
/// nodes for which `stop` is true (they are included themselves).
pub(crate) fn topo_order(outputs: &[Array], stop: impl FnMut(&Node) -> bool) -> Vec<Arc<Node>> {
    topo_order_by(outputs, stop, None)
}

fn node_key(node: &Node) -> usize {
    node as *const Node as usize
}

/// [`topo_order`], visiting the inputs of each node deepest first when `depth` is given.
fn topo_order_by(
    outputs: &[Array],
    mut stop: impl FnMut(&Node) -> bool,
    depth: Option<&HashMap<usize, u32>>,
) -> Vec<Arc<Node>> {
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
            match depth {
                None => {
                    for inp in inputs.iter().rev() {
                        if !visited.contains(&inp.node_id()) {
                            stack.push((inp.node.clone(), false));
                        }
                    }
                }
                Some(depth) => {
                    // push the shallowest first so the deepest input is expanded first
                    let mut kids: SmallVec<[(u32, usize); 4]> = SmallVec::new();
                    for (i, inp) in inputs.iter().enumerate() {
                        if !visited.contains(&inp.node_id()) {
                            kids.push((depth.get(&inp.node_id()).copied().unwrap_or(0), i));
                        }
                    }
                    kids.sort_by_key(|&(d, i)| (d, std::cmp::Reverse(i)));
                    for (_, i) in kids {
                        stack.push((inputs[i].node.clone(), false));
                    }
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
    if branches(&tape) {
        tape = deepest_first(outputs, &tape);
    }
    for node in tape {
        compute(&node);
    }
    for a in outputs {
        a.computed_data()?;
    }
    Ok(())
}

/// Whether some uncomputed node has two or more uncomputed inputs (otherwise every order is
/// the same and reordering is skipped).
fn branches(tape: &[Arc<Node>]) -> bool {
    tape.iter().any(|n| {
        !n.is_computed()
            && n.inputs.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|i| !i.node.is_computed()).count() >= 2
    })
}

/// Re-order `tape` so that at every node the input with the longest chain of uncomputed nodes
/// behind it is computed first (Sethi–Ullman style). For a backward pass this finishes the
/// long cotangent chain coming from later segments before recomputing an earlier segment, so
/// a checkpointed segment's recomputation runs right before its own backward and is freed
/// right after, instead of every recomputation staying alive to the end.
fn deepest_first(outputs: &[Array], tape: &[Arc<Node>]) -> Vec<Arc<Node>> {
    let mut depth: HashMap<usize, u32> = HashMap::with_capacity(tape.len());
    for n in tape {
        let d = if n.is_computed() {
            0
        } else {
            let inputs = n.inputs.lock().unwrap_or_else(|e| e.into_inner());
            1 + inputs.iter().map(|i| depth.get(&i.node_id()).copied().unwrap_or(0)).max().unwrap_or(0)
        };
        depth.insert(node_key(n), d);
    }
    topo_order_by(outputs, |n| n.is_computed(), Some(&depth))
}

/// Compute one node whose inputs are computed (no-op if it already is).
fn compute(node: &Arc<Node>) {
    if node.is_computed() {
        return;
    }
    node.data.get_or_init(|| {
        let inputs = node.inputs.lock().unwrap_or_else(|e| e.into_inner());
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
                let out = prim.eval_cpu(&inputs, &node.specs)?;
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
