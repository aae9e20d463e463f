//! Reverse mode: trace, then apply VJP rules from the outputs back to the inputs.
use super::{call, check_like, make_tracers, traced_by, IntoOutputs};
use crate::array::{TraceGuard, TraceToken};
use crate::graph::topo_order;
use crate::{Array, Error, Result};
use std::collections::HashMap;
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
    let tracer_ids: std::collections::HashSet<usize> = t.tracers.iter().map(|a| a.node_id()).collect();
    let mut cots: HashMap<(usize, usize), Array> = HashMap::new();
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
            .map(|(k, s)| cots.remove(k).unwrap_or_else(|| crate::ops::zeros_like(s)))
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
        let grads = prim.vjp(&inputs, &out_cots, &argnums, &siblings)?;
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
            let g = g.astype(x.dtype());
            accumulate(&mut cots, x.id(), g);
        }
    }
    Ok(t.tracers.iter().map(|x| cots.remove(&x.id()).unwrap_or_else(|| crate::ops::zeros_like(x))).collect())
}

fn accumulate(map: &mut HashMap<(usize, usize), Array>, key: (usize, usize), g: Array) {
    match map.remove(&key) {
        Some(prev) => {
            map.insert(key, prev + g);
        }
        None => {
            map.insert(key, g);
        }
    }
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
