//! The matrix product primitive.
//!
//! [`Matmul`] multiplies `a: [..., m, k]` by `b: [..., k, n]`, both with at least two axes and
//! the same dtype, broadcasting the batch axes (numpy rules) to `[batch..., m, n]`. The ops
//! layer ([`crate::ops::matmul`]) promotes dtypes and turns 1-D operands into matrices with
//! reshapes, so the rules here only see the ≥2-D case.
use crate::primitive::{Op, Primitive};
use crate::{Array, Result};

/// Batched, broadcasting matrix product of two arrays with at least two axes each.
#[derive(Debug, Clone, Copy, Default)]
pub struct Matmul;

impl Primitive for Matmul {
    fn op(&self) -> Op<'_> {
        Op::Matmul
    }
    fn name(&self) -> &str {
        "matmul"
    }

    /// `dA = C·Bᵀ`, `dB = Aᵀ·C`, each summed over the batch axes its operand was broadcast along.
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let (a, b) = (&primals[0], &primals[1]);
        let c = &cotangents[0];
        Ok(argnums
            .iter()
            .map(|&i| {
                let g = if i == 0 { crate::ops::matmul(c, &b.t()) } else { crate::ops::matmul(&a.t(), c) };
                crate::ops::sum_to_shape(&g, primals[i].shape())
            })
            .collect())
    }

    /// `tA·B + A·tB` (only the terms of inputs that have tangents).
    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let (a, b) = (&primals[0], &primals[1]);
        let mut acc: Option<Array> = None;
        for (t, &i) in tangents.iter().zip(argnums) {
            let term = if i == 0 { crate::ops::matmul(t, b) } else { crate::ops::matmul(a, t) };
            let term = term.broadcast_to(outputs[0].shape());
            acc = Some(match acc {
                Some(s) => s + term,
                None => term,
            });
        }
        Ok(vec![acc.unwrap_or_else(|| crate::ops::zeros_like(&outputs[0]))])
    }

    /// Batch axes move to the front (a batched operand of lower rank gets unit axes after it);
    /// the product's own batch broadcasting then pairs them, an unbatched operand broadcasts.
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let (xs, ax) = crate::ops::batch_align(inputs, axes);
        Ok((vec![crate::ops::matmul(&xs[0], &xs[1])], vec![ax]))
    }
}
