//! Vectorising map: trace with the batch axis removed, then rewrite every traced node with its
//! batching rule.
use super::{traced_by, IntoOutputs};
use crate::array::{OpScope, TraceGuard, TraceToken};
use crate::graph::topo_order;
use crate::graph::IdMap;
use crate::shape::normalize_axis;
use crate::{Array, Error, Result};
use std::sync::Arc;

/// Vectorise `f` over a batch axis.
///
/// `in_axes[i]` is the batch axis of input `i` (`None`: not batched, passed whole to every
/// batch element); `out_axes[j]` is where output `j` gets the batch axis (`None`: the output
/// must not depend on batched inputs). A single entry applies to all inputs / outputs.
/// Negative axes count from the end. Outputs that do not depend on batched inputs are
/// broadcast to the batch size. vmaps nest, and compose with every other transform.
///
/// ```
/// use cotangent::{self as ct, Array};
/// let dot = |x: &[Array]| (&x[0] * &x[1]).sum_all();
/// let batched = ct::vmap(dot, &[Some(0), None], &[Some(0)]);
/// let xs = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
/// let y = Array::from_slice(&[1.0f32, 10.0], &[2]);
/// assert_eq!(batched(&[xs, y]).unwrap()[0].to_vec::<f32>().unwrap(), vec![21.0, 43.0]);
/// ```
pub fn vmap<F, O>(
    f: F,
    in_axes: &[Option<isize>],
    out_axes: &[Option<isize>],
) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let f = Arc::new(f);
    let in_axes: Arc<[Option<isize>]> = in_axes.into();
    let out_axes: Arc<[Option<isize>]> = out_axes.into();
    move |args: &[Array]| vmap_call(&*f, &in_axes, &out_axes, args)
}

pub(crate) fn vmap_call<F, O>(
    f: &F,
    in_axes: &[Option<isize>],
    out_axes: &[Option<isize>],
    args: &[Array],
) -> Result<Vec<Array>>
where
    F: Fn(&[Array]) -> O + ?Sized,
    O: IntoOutputs,
{
    let axis_of = |i: usize| -> Option<isize> {
        if in_axes.len() == 1 {
            in_axes[0]
        } else {
            in_axes[i]
        }
    };
    if in_axes.len() != 1 && in_axes.len() != args.len() {
        return Err(Error::Transform(format!("vmap: {} in_axes given for {} inputs", in_axes.len(), args.len())));
    }
    let token = TraceToken::new();
    let _guard = TraceGuard(token.clone());
    let mut batch: Option<usize> = None;
    let mut map: IdMap<(usize, usize), (Array, Option<usize>)> = IdMap::default();
    let mut placeholders = Vec::with_capacity(args.len());
    for (i, x) in args.iter().enumerate() {
        match axis_of(i) {
            None => placeholders.push(x.clone()),
            Some(a) => {
                let ax = normalize_axis(a, x.ndim()).ok_or_else(|| {
                    Error::Transform(format!(
                        "vmap: in_axes {a} is out of range for input {i} of shape {:?}",
                        x.shape()
                    ))
                })?;
                let b = x.shape()[ax];
                if let Some(prev) = batch {
                    if prev != b {
                        return Err(Error::Transform(format!(
                            "vmap: inputs have different batch sizes ({prev} and {b} for input {i} of shape {:?})",
                            x.shape()
                        )));
                    }
                }
                batch = Some(b);
                let mut shape = x.shape().to_vec();
                shape.remove(ax);
                let p = Array::placeholder(&shape, x.dtype(), &token);
                map.insert(p.id(), (x.clone(), Some(ax)));
                placeholders.push(p);
            }
        }
    }
    let Some(batch) = batch else {
        return Err(Error::Transform("vmap: no input is batched (every in_axes entry is None)".into()));
    };
    let outputs = f(&placeholders).into_outputs()?;
    let tape = topo_order(&outputs, |n| !traced_by(n, &token) || n.primitive().is_none());
    for node in &tape {
        if !traced_by(node, &token) {
            continue;
        }
        let Some(prim) = node.primitive() else { continue };
        let inputs = node.inputs();
        let (xs, axes): (Vec<Array>, Vec<Option<usize>>) =
            inputs.iter().map(|x| map.get(&x.id()).cloned().unwrap_or((x.clone(), None))).unzip();
        let n_out = node.specs.len();
        let _origin = OpScope::set(node.origin);
        let (outs, oaxes) = if axes.iter().all(|a| a.is_none()) {
            if xs.iter().zip(&inputs).all(|(x, i)| x.id() == i.id()) {
                // built on the trace but not on batched values (e.g. after stop_gradient of a
                // constant): the node itself is the result
                ((0..n_out).map(|index| Array { node: node.clone(), index }).collect(), vec![None; n_out])
            } else {
                // unbatched, but some inputs were rewritten (a `depends` on batched values
                // passes an unbatched input through a new node): apply the primitive to them
                apply_unbatched(prim, &xs)?
            }
        } else {
            prim.vmap(&xs, &axes)?
        };
        if outs.len() != n_out || oaxes.len() != n_out {
            return Err(Error::Transform(format!(
                "the vmap rule of {} returned {} outputs for {} expected",
                prim.name(),
                outs.len(),
                n_out
            )));
        }
        let id = Arc::as_ptr(node) as *const u8 as usize;
        for (i, (o, a)) in outs.into_iter().zip(oaxes).enumerate() {
            map.insert((id, i), (o, a));
        }
    }
    if out_axes.len() != 1 && out_axes.len() != outputs.len() {
        return Err(Error::Transform(format!("vmap: {} out_axes given for {} outputs", out_axes.len(), outputs.len())));
    }
    outputs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            let want = if out_axes.len() == 1 { out_axes[0] } else { out_axes[j] };
            let (y, ax) = map.get(&o.id()).cloned().unwrap_or((o.clone(), None));
            match (want, ax) {
                (None, None) => Ok(y),
                (None, Some(_)) => Err(Error::Transform(format!(
                    "vmap: output {j} depends on batched inputs but its out_axes entry is None"
                ))),
                (Some(d), ax) => {
                    let nd = y.ndim() + ax.is_none() as usize;
                    let d = normalize_axis(d, nd).ok_or_else(|| {
                        Error::Transform(format!("vmap: out_axes {d} is out of range for output {j} with {nd} axes"))
                    })?;
                    Ok(match ax {
                        Some(a) => y.moveaxis(a as isize, d as isize),
                        None => {
                            let e = y.expand_dims(&[d as isize]);
                            let mut s = e.shape().to_vec();
                            s[d] = batch;
                            e.broadcast_to(&s)
                        }
                    })
                }
            }
        })
        .collect()
}

/// `prim` applied to unbatched inputs `xs`, through its batching rule on a batch of one (so no
/// primitive needs a way to rebuild itself).
fn apply_unbatched(prim: &dyn crate::primitive::Primitive, xs: &[Array]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
    let mut xs = xs.to_vec();
    let mut axes = vec![None; xs.len()];
    xs[0] = xs[0].expand_dims(&[0]);
    axes[0] = Some(0);
    let (outs, oaxes) = prim.vmap(&xs, &axes)?;
    let outs: Vec<Array> =
        outs.into_iter().zip(&oaxes).map(|(o, a)| a.map_or_else(|| o.clone(), |a| o.squeeze(&[a as isize]))).collect();
    let n = outs.len();
    Ok((outs, vec![None; n]))
}
