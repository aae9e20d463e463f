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
#[derive(Debug, Clone)]
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
                0 => scatter(ScatterMode::Add, &crate::ops::zeros_like(x), idx, &cotangents[0], self.axis),
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
}

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
