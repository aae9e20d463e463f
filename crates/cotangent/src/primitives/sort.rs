//! Sorting: [`ArgSort`], the permutation that sorts each lane along an axis. `sort` and `topk`
//! are built from it with `take_along_axis`, so their VJP, JVP and vmap rules are the gather's.
use crate::primitive::{Op, Primitive};
use crate::{Array, DType, Result};

/// The indices (`u32`) that sort `x` along `axis`: `take_along_axis(x, argsort(x), axis)` is
/// sorted. The sort is stable (equal elements keep their order) and NaN counts as greater than
/// every number, so it comes last ascending (numpy's rule) and first descending (as
/// `torch.sort(descending=True)`). Not differentiable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgSort {
    /// The sorted axis.
    pub axis: usize,
    /// Largest first instead of smallest first.
    pub descending: bool,
}

impl Primitive for ArgSort {
    fn op(&self) -> Op<'_> {
        Op::ArgSort(self)
    }
    fn name(&self) -> &str {
        "argsort"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "argsort[{}{}]", self.axis, if self.descending { ", descending" } else { "" })
    }
    fn vjp(&self, primals: &[Array], _c: &[Array], _argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::zeros_like(&primals[0])])
    }
    fn jvp(&self, _p: &[Array], _t: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::zeros_like(&outputs[0])])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        // the batch axis stays where it is; the sorted axis moves past it when it comes later
        let b = axes[0].expect("a batched input");
        let axis = if b <= self.axis { self.axis + 1 } else { self.axis };
        Ok((vec![argsort_raw(&inputs[0], axis, self.descending)], vec![Some(b)]))
    }
    fn is_equivalent(&self, other: &dyn Primitive) -> bool {
        crate::primitive::same_as(self, other)
    }
}

/// `argsort` along a normalised `axis` (no checks).
pub(crate) fn argsort_raw(x: &Array, axis: usize, descending: bool) -> Array {
    Array::from_primitive(ArgSort { axis, descending }, vec![x.clone()], x.shape(), DType::U32)
}
