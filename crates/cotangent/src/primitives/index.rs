//! Indexing primitives: gather ([`TakeAlongAxis`]) and scatter ([`ScatterAlongAxis`]) along one
//! axis. Every indexing op (`take`, `take_along_axis`, `put_along_axis`, `scatter_add`,
//! `scatter_add_along_axis`) is built from these two, with broadcast (stride-0) index views where
//! numpy broadcasts, so no index array is copied.
//!
//! Shapes seen by the primitives: `x` and `indices` have the same rank and the same extents on
//! every axis but `axis`; `updates` has the shape of `indices`. Indices are any integer dtype,
//! may be negative (counted from the end); an out-of-range index makes evaluation return `Err`.
use crate::primitive::{Op, Primitive};
use crate::{Array, DType, Result};

/// Bring every input's batch axis to the front; unbatched inputs are broadcast (a view) to the
/// batch size. Returns the inputs and the batch size.
fn batch_all(inputs: &[Array], axes: &[Option<usize>]) -> Vec<Array> {
    let b = inputs.iter().zip(axes).find_map(|(x, a)| a.map(|a| x.shape()[a])).expect("a batched input");
    inputs
        .iter()
        .zip(axes)
        .map(|(x, a)| match a {
            Some(a) => x.moveaxis(*a as isize, 0),
            None => {
                let mut shape = vec![b];
                shape.extend_from_slice(x.shape());
                x.expand_dims(&[0]).broadcast_to(&shape)
            }
        })
        .collect()
}

/// `out[.., j, ..] = x[.., indices[.., j, ..], ..]` along `axis` (numpy's `take_along_axis`
/// without broadcasting: the ops layer broadcasts). The output has the indices' shape.
#[derive(Debug, Clone, PartialEq)]
pub struct TakeAlongAxis {
    /// The gathered axis.
    pub axis: usize,
}

impl Primitive for TakeAlongAxis {
    fn op(&self) -> Op<'_> {
        Op::Gather(self)
    }
    fn name(&self) -> &str {
        "take_along_axis"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "take_along_axis[{}]", self.axis)
    }
    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        let (x, idx) = (&primals[0], &primals[1]);
        Ok(argnums
            .iter()
            .map(|&i| match i {
                0 => one_hot_add(x, idx, &cotangents[0], self.axis).unwrap_or_else(|| {
                    scatter(ScatterMode::Add, &crate::ops::zeros_like(x), idx, &cotangents[0], self.axis)
                }),
                _ => crate::ops::zeros_like(idx),
            })
            .collect())
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![match argnums.iter().position(|&i| i == 0) {
            Some(k) => gather(&tangents[k], &primals[1], self.axis),
            None => crate::ops::zeros_like(&outputs[0]),
        }])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let xs = batch_all(inputs, axes);
        Ok((vec![gather(&xs[0], &xs[1], self.axis + 1)], vec![Some(0)]))
    }
    fn is_equivalent(&self, other: &dyn Primitive) -> bool {
        crate::primitive::same_as(self, other)
    }
}

/// `scatter_add(zeros_like(x), idx, upd)` along `axis` where `idx` holds one index per lane
/// (extent 1 along `axis`: a cross-entropy's picked logits), as `select(position == idx, upd,
/// 0)`: element-wise, so a compiled program fuses it with the ops around it, and it adds
/// nothing up, so the values are those of the scatter (a single update per element) on every
/// device, without atomics. The indices are read through a node that depends on a gather of `x`
/// at `idx`, which checks them, so an index out of range is an error of the gradient as it is for
/// the scatter (the comparison alone would silently give zeros); a compiled program merges that
/// gather with the forward one. `None` for other index shapes.
fn one_hot_add(x: &Array, idx: &Array, upd: &Array, axis: usize) -> Option<Array> {
    if idx.shape()[axis] != 1 {
        return None;
    }
    let n = x.shape()[axis];
    let mut shape = vec![1; x.ndim()];
    shape[axis] = n;
    let (signed, device) = (idx.dtype().is_signed_int(), x.device());
    // the indices as a pass-through node that waits for the checked gather (no copy, no kernel),
    // compared as i64: positions past a narrow index dtype's range must not wrap onto valid ones
    let idx = crate::transforms::depends(std::slice::from_ref(idx), &[gather(x, idx, axis)])[0].astype(DType::I64);
    let mut hit = positions(0, n, device).reshape_exact(&shape).equal(&idx);
    if signed {
        // a negative index counts from the end
        hit = hit.logical_or(positions(-(n as i64), n, device).reshape_exact(&shape).equal(&idx));
    }
    Some(crate::ops::select(&hit, upd, 0.0))
}

/// `start, start + 1, .., start + n - 1` as i64 on `device`, made once per (start, n, device)
/// and kept: a rule that needs positions on a GPU would otherwise upload them at every call. At
/// most [`MAX_KEPT_POSITIONS`] are kept (the oldest go first).
fn positions(start: i64, n: usize, device: crate::Device) -> Array {
    type Kept = Vec<((i64, usize, crate::Device), Array)>;
    static KEPT: std::sync::Mutex<Kept> = std::sync::Mutex::new(Vec::new());
    let key = (start, n, device);
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, a)) = kept.iter().find(|(k, _)| *k == key) {
        return a.clone();
    }
    let a = crate::ops::arange(start as f64, (start + n as i64) as f64, 1.0, DType::I64).to_device(device);
    if kept.len() == MAX_KEPT_POSITIONS {
        kept.remove(0);
    }
    kept.push((key, a.clone()));
    a
}

/// How many position arrays [`positions`] keeps.
const MAX_KEPT_POSITIONS: usize = 32;

/// How a [`ScatterAlongAxis`] combines an update with the existing element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterMode {
    /// Replace (the last duplicate index, in row-major order of the indices, wins).
    Put,
    /// Accumulate (duplicates add up).
    Add,
}

/// A copy of `x` with `updates[.., j, ..]` put or added at `[.., indices[.., j, ..], ..]` along
/// `axis` (numpy's `put_along_axis`, or an accumulating scatter).
#[derive(Debug, Clone)]
pub struct ScatterAlongAxis {
    /// The scattered axis.
    pub axis: usize,
    /// Put or add.
    pub mode: ScatterMode,
}

impl Primitive for ScatterAlongAxis {
    fn op(&self) -> Op<'_> {
        Op::Scatter(self)
    }
    fn name(&self) -> &str {
        if self.mode == ScatterMode::Put {
            "put_along_axis"
        } else {
            "scatter_add_along_axis"
        }
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.name(), self.axis)
    }
    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        let (idx, upd) = (&primals[1], &primals[2]);
        let c = &cotangents[0];
        Ok(argnums
            .iter()
            .map(|&i| match (i, self.mode) {
                (0, ScatterMode::Add) => c.clone(),
                // the overwritten positions do not reach the output
                (0, ScatterMode::Put) => scatter(ScatterMode::Put, c, idx, &crate::ops::zeros_like(upd), self.axis),
                (1, _) => crate::ops::zeros_like(idx),
                (_, ScatterMode::Add) => gather(c, idx, self.axis),
                (_, ScatterMode::Put) => {
                    // only the update that won a duplicated position reaches the output
                    let g = gather(c, idx, self.axis);
                    let won = put_winners(&primals[0], idx, self.axis);
                    crate::ops::select(&won, &g, crate::ops::zeros_like(&g))
                }
            })
            .collect())
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        let (x, idx, upd) = (&primals[0], &primals[1], &primals[2]);
        let tangent_of = |k: usize, p: &Array| match argnums.iter().position(|&i| i == k) {
            Some(j) => tangents[j].clone(),
            None => crate::ops::zeros_like(p),
        };
        Ok(vec![scatter(self.mode, &tangent_of(0, x), idx, &tangent_of(2, upd), self.axis)])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let xs = batch_all(inputs, axes);
        Ok((vec![scatter(self.mode, &xs[0], &xs[1], &xs[2], self.axis + 1)], vec![Some(0)]))
    }
}

/// Gather along `axis` (shapes already aligned as the primitive needs).
pub(crate) fn gather(x: &Array, idx: &Array, axis: usize) -> Array {
    Array::from_primitive(TakeAlongAxis { axis }, vec![x.clone(), idx.clone()], idx.shape(), x.dtype())
}

/// Scatter along `axis` (shapes already aligned, `upd` of `x`'s dtype and `idx`'s shape).
pub(crate) fn scatter(mode: ScatterMode, x: &Array, idx: &Array, upd: &Array, axis: usize) -> Array {
    Array::from_primitive(
        ScatterAlongAxis { axis, mode },
        vec![x.clone(), idx.clone(), upd.clone()],
        x.shape(),
        x.dtype(),
    )
}

/// For each index position, whether its update is the one a `put` keeps (the last in row-major
/// order among those writing the same element).
fn put_winners(x: &Array, idx: &Array, axis: usize) -> Array {
    let m = idx.shape()[axis];
    let mut pshape = vec![1; idx.ndim()];
    pshape[axis] = m;
    let pos = crate::ops::arange(0.0, m as f64, 1.0, DType::I64).reshape_exact(&pshape).broadcast_to(idx.shape());
    let marker = scatter(ScatterMode::Put, &crate::ops::full(x.shape(), -1.0, DType::I64), idx, &pos, axis);
    gather(&marker, idx, axis).equal(&pos)
}

#[cfg(test)]
mod tests {
    use crate::primitive::Op;
    use crate::{Array, DType};

    /// How many nodes reachable from `outs` gather.
    fn gathers(outs: &[Array]) -> usize {
        let (mut seen, mut stack, mut n) = (std::collections::HashSet::new(), outs.to_vec(), 0);
        while let Some(a) = stack.pop() {
            if !seen.insert(a.node_id()) {
                continue;
            }
            n += matches!(a.node.primitive().map(|p| p.op()), Some(Op::Gather(_))) as usize;
            stack.extend(a.node.inputs().iter().cloned());
        }
        n
    }

    /// A compiled cross-entropy step gathers its picked logits once: the gradient's index check
    /// (a gather of its own, see `one_hot_add`) merges with the forward gather.
    #[test]
    fn the_gradients_index_check_merges_with_the_forward_gather_when_compiled() {
        let loss = |a: &[Array]| {
            let picked = a[0].take_along_axis(&a[1].expand_dims(&[-1]), -1).squeeze(&[-1]);
            (a[0].logsumexp(&[-1], false) - picked).mean_all()
        };
        let step = crate::compile(move |a: &[Array]| {
            let (v, g) = crate::value_and_grad(loss)(a).expect("traced");
            vec![v[0].clone(), g[0].clone()]
        });
        let logits = crate::random::normal(&crate::random::key(5), &[6, 4], DType::F32);
        let labels = Array::from_slice(&[0i32, 3, -1, 2, 1, 0], &[6]);
        let args = [logits, labels];
        let out = step(&args).expect("compiled step");
        // the gathers are counted in a program traced on the host (on a GPU a compiled call's
        // outputs come from one graph node); the values are checked on the default device
        let host = args.clone().map(|x| x.to_device(crate::Device::Cpu));
        let traced = step(&host).expect("compiled on the host");
        assert_eq!(gathers(&traced), 1, "{traced:?}");
        let (v, g) = crate::value_and_grad(loss)(&args).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), v[0].to_vec::<f32>().unwrap());
        assert_eq!(out[1].to_vec::<f32>().unwrap(), g[0].to_vec::<f32>().unwrap());
    }
}
