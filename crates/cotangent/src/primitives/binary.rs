//! Element-wise binary primitives with numpy broadcasting: one [`Binary`] primitive with an op
//! enum. Both inputs have the same dtype (the ops layer promotes); shapes broadcast inside the
//! kernel, so no broadcast node is needed, and the VJP sums cotangents back to each input's shape.
use crate::primitive::{Op, Primitive};
use crate::{Array, Result};

/// The element-wise binary functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum BinaryOp {
    Add,
    Subtract,
    Multiply,
    Divide,
    FloorDivide,
    Remainder,
    Power,
    Maximum,
    Minimum,
    Arctan2,
    LogAddExp,
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    LogicalAnd,
    LogicalOr,
    /// The share of the gradient of `maximum(x, y)` that flows to `x`: 1 where `x > y`, ½ where
    /// `x == y` (ties split evenly, as in JAX), 0 elsewhere (also where either is NaN). One
    /// kernel where the comparisons, casts and sums it replaces took six; used by the VJP and
    /// JVP of [`BinaryOp::Maximum`].
    MaximumShare,
    /// The share of the gradient of `minimum(x, y)` that flows to `x` (as
    /// [`BinaryOp::MaximumShare`] with `x < y`).
    MinimumShare,
}

impl BinaryOp {
    /// Whether the op returns booleans.
    pub fn returns_bool(self) -> bool {
        use BinaryOp::*;
        matches!(self, Equal | NotEqual | Less | LessEqual | Greater | GreaterEqual | LogicalAnd | LogicalOr)
    }
    /// Whether the op needs float inputs (integers are cast to `f32` first).
    pub fn needs_float(self) -> bool {
        use BinaryOp::*;
        matches!(self, Divide | Arctan2 | LogAddExp | MaximumShare | MinimumShare)
    }
    /// Public name of the op.
    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add",
            Subtract => "subtract",
            Multiply => "multiply",
            Divide => "divide",
            FloorDivide => "floor_divide",
            Remainder => "remainder",
            Power => "power",
            Maximum => "maximum",
            Minimum => "minimum",
            Arctan2 => "arctan2",
            LogAddExp => "logaddexp",
            Equal => "equal",
            NotEqual => "not_equal",
            Less => "less",
            LessEqual => "less_equal",
            Greater => "greater",
            GreaterEqual => "greater_equal",
            LogicalAnd => "logical_and",
            LogicalOr => "logical_or",
            MaximumShare => "maximum_share",
            MinimumShare => "minimum_share",
        }
    }
}

/// An element-wise binary function of two arrays of the same dtype, broadcasting their shapes.
#[derive(Debug, Clone, Copy)]
pub struct Binary(pub BinaryOp);

impl Primitive for Binary {
    fn op(&self) -> Op<'_> {
        Op::Binary(self.0)
    }
    fn name(&self) -> &str {
        self.0.name()
    }

    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let (a, b) = (&primals[0], &primals[1]);
        let c = &cotangents[0];
        let out = &outputs[0];
        let mut res = Vec::with_capacity(argnums.len());
        for &i in argnums {
            let x = &primals[i];
            let g = match partial(self.0, i, a, b, out) {
                Some(Partial::One) => c.clone(),
                Some(Partial::MinusOne) => -c,
                // the partial and its product with the cotangent as one kernel where they fuse
                Some(Partial::Of(d)) => super::fused::fuse_chain(&(c * d), &[a, b, out, c]),
                None => crate::ops::zeros_like(x),
            };
            res.push(crate::ops::sum_to_shape(&g, x.shape()));
        }
        Ok(res)
    }

    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let (a, b) = (&primals[0], &primals[1]);
        let out = &outputs[0];
        let mut acc: Option<Array> = None;
        for (t, &i) in tangents.iter().zip(argnums) {
            let term = match partial(self.0, i, a, b, out) {
                Some(Partial::One) => crate::ops::broadcast_to(t, out.shape()),
                Some(Partial::MinusOne) => crate::ops::broadcast_to(&-t, out.shape()),
                Some(Partial::Of(d)) => super::fused::fuse_chain(&(t * d), &[a, b, out, t]),
                None => continue,
            };
            acc = Some(match acc {
                Some(s) => s + term,
                None => term,
            });
        }
        Ok(vec![acc.unwrap_or_else(|| crate::ops::zeros_like(out))])
    }

    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let (xs, ax) = crate::ops::batch_align(inputs, axes);
        Ok((vec![crate::ops::binary(self.0, &xs[0], &xs[1])], vec![ax]))
    }
}

enum Partial {
    One,
    MinusOne,
    Of(Array),
}

/// `d out / d input_i` written with ops (full, broadcast shape or broadcastable to it).
fn partial(op: BinaryOp, i: usize, a: &Array, b: &Array, out: &Array) -> Option<Partial> {
    use BinaryOp::*;
    if !out.dtype().is_float() {
        return None;
    }
    let first = i == 0;
    Some(match op {
        Add => Partial::One,
        Subtract => {
            if first {
                Partial::One
            } else {
                Partial::MinusOne
            }
        }
        Multiply => Partial::Of(if first { b.clone() } else { a.clone() }),
        Divide => Partial::Of(if first { b.reciprocal() } else { -(out / b) }),
        Power => Partial::Of(if first {
            // b * a^(b-1), with 0 where b == 0 (so 0^0 has derivative 0 as in JAX)
            let d = b * crate::ops::power(a, b - 1.0);
            crate::ops::select(&b.equal(0.0), crate::ops::zeros_like(&d), &d)
        } else {
            // out * log(a), taking log(1) = 0 where a == 0
            let safe = crate::ops::select(&a.equal(0.0), crate::ops::ones_like(a), a);
            out * safe.log()
        }),
        Maximum | Minimum => {
            let (x, y) = if first { (a, b) } else { (b, a) };
            let share = if op == Maximum { MaximumShare } else { MinimumShare };
            Partial::Of(crate::ops::binary(share, x, y))
        }
        Arctan2 => {
            let den = a.square() + b.square();
            Partial::Of(if first { b / &den } else { -(a / &den) })
        }
        LogAddExp => Partial::Of((if first { a - out } else { b - out }).exp()),
        Remainder => {
            if first {
                Partial::One
            } else {
                Partial::Of(-(crate::ops::floor_divide(a, b)))
            }
        }
        FloorDivide | Equal | NotEqual | Less | LessEqual | Greater | GreaterEqual | LogicalAnd | LogicalOr
        | MaximumShare | MinimumShare => return None,
    })
}

/// `where(cond, a, b)` with broadcasting; `cond` is bool, `a` and `b` share a dtype.
#[derive(Debug, Clone, Copy)]
pub struct Select;

impl Primitive for Select {
    fn op(&self) -> Op<'_> {
        Op::Select
    }
    fn name(&self) -> &str {
        "select"
    }
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let cond = &primals[0];
        let c = &cotangents[0];
        let zero = crate::ops::zeros_like(c);
        Ok(argnums
            .iter()
            .map(|&i| match i {
                0 => crate::ops::zeros_like(cond),
                1 => crate::ops::sum_to_shape(&crate::ops::select(cond, c, &zero), primals[1].shape()),
                _ => crate::ops::sum_to_shape(&crate::ops::select(cond, &zero, c), primals[2].shape()),
            })
            .collect())
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let out = &outputs[0];
        let zero = crate::ops::zeros_like(out);
        let mut ta = zero.clone();
        let mut tb = zero;
        for (t, &i) in tangents.iter().zip(argnums) {
            match i {
                1 => ta = t.clone(),
                2 => tb = t.clone(),
                _ => {}
            }
        }
        Ok(vec![crate::ops::select(&primals[0], &ta, &tb)])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let (xs, ax) = crate::ops::batch_align(inputs, axes);
        Ok((vec![crate::ops::select(&xs[0], &xs[1], &xs[2])], vec![ax]))
    }
}
