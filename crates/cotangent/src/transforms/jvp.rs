//! Forward mode: trace, then push tangents through the JVP rules in graph order.
use super::vjp::trace;
use super::{check_like, traced_by, IntoOutputs};
use crate::array::{OpScope, Role};
use crate::graph::topo_order;
use crate::graph::IdMap;
use crate::{Array, Error, Result};
use std::sync::Arc;

/// Jacobian-vector product: the outputs of `f(primals)` and their tangents given one tangent
/// per primal (same shape and dtype, else an `Err`).
///
/// ```
/// use cotangent::{self as ct, Array};
/// let x = Array::scalar(3.0f64);
/// let (_, t) = ct::jvp(|x: &[Array]| x[0].square(), &[x], &[Array::scalar(1.0f64)]).unwrap();
/// assert_eq!(t[0].item::<f64>().unwrap(), 6.0);
/// ```
pub fn jvp<F, O>(f: F, primals: &[Array], tangents: &[Array]) -> Result<(Vec<Array>, Vec<Array>)>
where
    F: Fn(&[Array]) -> O,
    O: IntoOutputs,
{
    if tangents.len() != primals.len() {
        return Err(Error::Transform(format!("jvp: {} tangents given for {} primals", tangents.len(), primals.len())));
    }
    for (i, (t, p)) in tangents.iter().zip(primals).enumerate() {
        check_like("jvp: tangent", i, t, p)?;
    }
    let t = trace(&f, primals)?;
    let token = &t.guard.0;
    let mut tan: IdMap<(usize, usize), Array> = IdMap::default();
    for (x, v) in t.tracers.iter().zip(tangents) {
        if x.dtype().is_float() {
            tan.insert(x.id(), v.clone());
        }
    }
    let tracer_ids: crate::graph::IdSet<usize> = t.tracers.iter().map(|a| a.node_id()).collect();
    let tape = topo_order(&t.outputs, |n| !traced_by(n, token) || tracer_ids.contains(&(n as *const _ as usize)));
    for node in &tape {
        let id = Arc::as_ptr(node) as *const u8 as usize;
        if !traced_by(node, token) || tracer_ids.contains(&id) {
            continue;
        }
        let Some(prim) = node.primitive() else { continue };
        if prim.stops_gradient() {
            continue;
        }
        let inputs = node.inputs();
        let (argnums, tangents): (Vec<usize>, Vec<Array>) =
            (0..inputs.len()).filter_map(|i| tan.get(&inputs[i].id()).map(|v| (i, v.clone()))).unzip();
        if argnums.is_empty() {
            continue;
        }
        let n_out = node.specs.len();
        let siblings: Vec<Array> = (0..n_out).map(|index| Array { node: node.clone(), index }).collect();
        let outs = {
            let _origin = OpScope::set(node.origin.map(|o| o.with_role(Role::Tangent)));
            prim.jvp(&inputs, &tangents, &argnums, &siblings)?
        };
        if outs.len() != n_out {
            return Err(Error::Transform(format!(
                "the jvp rule of {} returned {} tangents for {} outputs",
                prim.name(),
                outs.len(),
                n_out
            )));
        }
        for (o, s) in outs.into_iter().zip(&siblings) {
            if o.shape() != s.shape() {
                return Err(Error::Transform(format!(
                    "the jvp rule of {} returned a tangent of shape {:?} for an output of shape {:?}",
                    prim.name(),
                    o.shape(),
                    s.shape()
                )));
            }
            if s.dtype().is_float() {
                tan.insert(s.id(), o.astype(s.dtype()));
            }
        }
    }
    let tangents_out =
        t.outputs.iter().map(|o| tan.get(&o.id()).cloned().unwrap_or_else(|| crate::ops::zeros_like(o))).collect();
    Ok((t.outputs, tangents_out))
}
