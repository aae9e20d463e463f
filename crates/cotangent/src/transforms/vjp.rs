//! Reverse mode: trace, then apply VJP rules from the outputs back to the inputs.
use super::{call, check_like, make_tracers, traced_by, IntoOutputs};
use crate::array::{OpScope, Role, TraceGuard, TraceToken};
use crate::graph::topo_order;
use crate::graph::IdMap;
use crate::primitive::AsAny;
use crate::primitives::shape::ScatterSlices;
use crate::{Array, Error, Result};
use std::sync::Arc;

/// A traced call: the tracers, the outputs, and the token marking what was built on them.
pub(crate) struct Traced {
    pub(crate) guard: TraceGuard,
    pub(crate) tracers: Vec<Array>,
    pub(crate) outputs: Vec<Array>,
}

/// Trace `f` on tracer copies of `primals`.
pub(crate) fn trace<F, O>(f: &F, primals: &[Array]) -> Result<Traced>
where
    F: Fn(&[Array]) -> O + ?Sized,
    O: IntoOutputs,
{
    let token = TraceToken::new();
    let guard = TraceGuard(token.clone());
    let tracers = make_tracers(primals, &token);
    let outputs = call(f, &tracers)?;
    Ok(Traced { guard, tracers, outputs })
}

/// Cotangents of the tracers given cotangents of some outputs (`None`: no cotangent).
pub(crate) fn backward(t: &Traced, cotangents: &[Option<Array>]) -> Result<Vec<Array>> {
    let token = &t.guard.0;
    let tracer_ids: crate::graph::IdSet<usize> = t.tracers.iter().map(|a| a.node_id()).collect();
    let mut cots: IdMap<(usize, usize), Contributions> = IdMap::default();
    let mut seeded = Vec::new();
    for (o, c) in t.outputs.iter().zip(cotangents) {
        if let Some(c) = c {
            if traced_by(&o.node, token) {
                accumulate(&mut cots, o.id(), c.clone());
                seeded.push(o.clone());
            }
        }
    }
    let tape = topo_order(&seeded, |n| !traced_by(n, token) || tracer_ids.contains(&(n as *const _ as usize)));
    // every node this pass walks is on the tape: what it builds from here on is never walked
    // by this trace (eager fusion may fold those temporaries; outer traces still see them)
    token.tape_taken();
    for node in tape.iter().rev() {
        let id = Arc::as_ptr(node) as *const u8 as usize;
        if !traced_by(node, token) || tracer_ids.contains(&id) {
            continue;
        }
        let Some(prim) = node.primitive() else { continue };
        let n_out = node.specs.len();
        let keys: Vec<(usize, usize)> = (0..n_out).map(|i| (id, i)).collect();
        if !keys.iter().any(|k| cots.contains_key(k)) {
            continue;
        }
        let siblings: Vec<Array> = (0..n_out).map(|index| Array { node: node.clone(), index }).collect();
        let out_cots: Vec<Array> = keys
            .iter()
            .zip(&siblings)
            .map(|(k, s)| take_total(&mut cots, k).unwrap_or_else(|| crate::ops::zeros_like(s)))
            .collect();
        if prim.stops_gradient() {
            continue;
        }
        let inputs = node.inputs();
        let argnums: Vec<usize> =
            (0..inputs.len()).filter(|&i| traced_by(&inputs[i].node, token) && inputs[i].dtype().is_float()).collect();
        if argnums.is_empty() {
            continue;
        }
        let grads = {
            let _origin = OpScope::set(node.origin.map(|o| o.with_role(Role::Gradient)));
            prim.vjp(&inputs, &out_cots, &argnums, &siblings)?
        };
        if grads.len() != argnums.len() {
            return Err(Error::Transform(format!(
                "the vjp rule of {} returned {} cotangents for {} inputs",
                prim.name(),
                grads.len(),
                argnums.len()
            )));
        }
        for (g, &i) in grads.into_iter().zip(&argnums) {
            let x = &inputs[i];
            if g.shape() != x.shape() {
                return Err(Error::Transform(format!(
                    "the vjp rule of {} returned a cotangent of shape {:?} for input {i} of shape {:?}",
                    prim.name(),
                    g.shape(),
                    x.shape()
                )));
            }
            // move `g` on when its dtype already fits: a second handle would keep the sum of
            // two contributions from folding a temporary cotangent into its kernel (eager fusion)
            let g = if g.dtype() == x.dtype() { g } else { g.astype(x.dtype()) };
            accumulate(&mut cots, x.id(), g);
        }
    }
    Ok(t.tracers.iter().map(|x| take_total(&mut cots, &x.id()).unwrap_or_else(|| crate::ops::zeros_like(x))).collect())
}

/// The cotangent contributions that reached one array so far: a running sum, and slice
/// cotangents ([`ScatterSlices`] nodes, one per `x[.., t, ..]` the function took) kept apart so
/// they become one node that writes every slice's cotangent into one buffer. Summing them
/// one by one would zero-fill and add a full-size array per slice: quadratic in a loop over
/// the rows of an array. Pieces are merged early once they hold more elements than the array,
/// so overlapping slices cannot make them hold more memory than a running sum would.
#[derive(Default)]
struct Contributions {
    sum: Option<Array>,
    pieces: Vec<Array>,
    piece_elements: usize,
}

/// The regions and updates of an unevaluated single-slice-family node, if `g` is one.
fn scatter_parts(g: &Array) -> Option<(&ScatterSlices, Vec<Array>)> {
    let prim = g.node.primitive()?;
    let scatter = AsAny::as_any(prim).downcast_ref::<ScatterSlices>()?;
    let inputs = g.node.inputs();
    (!g.is_evaluated() && inputs.len() == scatter.regions.len()).then_some((scatter, inputs))
}

impl Contributions {
    fn add(&mut self, g: Array) {
        if let Some((_, updates)) = scatter_parts(&g) {
            self.piece_elements += updates.iter().map(Array::size).sum::<usize>();
            self.pieces.push(g);
            if self.piece_elements > self.pieces[0].size() {
                self.merge_pieces();
            }
        } else {
            self.add_dense(g);
        }
    }

    fn add_dense(&mut self, g: Array) {
        self.sum = Some(match self.sum.take() {
            Some(prev) => prev + g,
            None => g,
        });
    }

    fn merge_pieces(&mut self) {
        let pieces = std::mem::take(&mut self.pieces);
        self.piece_elements = 0;
        let merged = match pieces.len() {
            0 => return,
            1 => pieces.into_iter().next().expect("one piece"),
            _ => {
                let (mut regions, mut updates) = (Vec::new(), Vec::new());
                for p in &pieces {
                    match scatter_parts(p) {
                        Some((scatter, inputs)) => {
                            regions.extend(scatter.regions.iter().cloned());
                            updates.extend(inputs);
                        }
                        // evaluated meanwhile (its inputs may be released): add it as it is
                        None => self.add_dense(p.clone()),
                    }
                }
                if updates.is_empty() {
                    return;
                }
                ScatterSlices::apply(pieces[0].shape(), regions, updates)
            }
        };
        self.add_dense(merged);
    }

    fn total(mut self) -> Option<Array> {
        self.merge_pieces();
        self.sum
    }
}

fn accumulate(map: &mut IdMap<(usize, usize), Contributions>, key: (usize, usize), g: Array) {
    map.entry(key).or_default().add(g);
}

fn take_total(map: &mut IdMap<(usize, usize), Contributions>, key: &(usize, usize)) -> Option<Array> {
    map.remove(key).and_then(Contributions::total)
}

/// Vector-Jacobian product: the outputs of `f(primals)` and the cotangents of `primals` given
/// `cotangents` for every output.
///
/// The number, shapes and dtypes of `cotangents` must match the outputs, otherwise an `Err`
/// says which one differs.
///
/// ```
/// use cotangent::{self as ct, Array};
/// let x = Array::from_slice(&[1.0f64, 2.0], &[2]);
/// let (outs, vjps) = ct::vjp(|x: &[Array]| x[0].square(), &[x], &[Array::from_slice(&[1.0f64, 1.0], &[2])]).unwrap();
/// assert_eq!(vjps[0].to_vec::<f64>().unwrap(), vec![2.0, 4.0]);
/// assert_eq!(outs[0].to_vec::<f64>().unwrap(), vec![1.0, 4.0]);
/// ```
pub fn vjp<F, O>(f: F, primals: &[Array], cotangents: &[Array]) -> Result<(Vec<Array>, Vec<Array>)>
where
    F: Fn(&[Array]) -> O,
    O: IntoOutputs,
{
    let t = trace(&f, primals)?;
    if cotangents.len() != t.outputs.len() {
        return Err(Error::Transform(format!(
            "vjp: {} cotangents given for {} outputs",
            cotangents.len(),
            t.outputs.len()
        )));
    }
    for (i, (c, o)) in cotangents.iter().zip(&t.outputs).enumerate() {
        check_like("vjp: cotangent", i, c, o)?;
    }
    let cots: Vec<Option<Array>> = cotangents.iter().cloned().map(Some).collect();
    let grads = backward(&t, &cots)?;
    Ok((t.outputs, grads))
}
