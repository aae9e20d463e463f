//! Element-wise unary primitives: one [`Unary`] primitive with an op enum.
use crate::primitive::{Op, Primitive};
use crate::{Array, DType, Result};

/// The element-wise unary functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Exp,
    Expm1,
    Log,
    Log1p,
    Log2,
    Sqrt,
    Rsqrt,
    Square,
    Reciprocal,
    Sin,
    Cos,
    Tan,
    Tanh,
    Sinh,
    Cosh,
    Arcsin,
    Arccos,
    Arctan,
    Sigmoid,
    Erf,
    Erfinv,
    Floor,
    Ceil,
    Round,
    LogicalNot,
    IsNan,
    IsInf,
}

impl UnaryOp {
    /// Whether the op only makes sense on floats (integer inputs are cast to `f32` first).
    pub fn is_transcendental(self) -> bool {
        use UnaryOp::*;
        !matches!(self, Neg | Abs | Sign | Square | Floor | Ceil | Round | LogicalNot | IsNan | IsInf)
    }
    /// Whether the op returns booleans.
    pub fn returns_bool(self) -> bool {
        matches!(self, UnaryOp::LogicalNot | UnaryOp::IsNan | UnaryOp::IsInf)
    }
    /// Public name of the op.
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "negative",
            Abs => "abs",
            Sign => "sign",
            Exp => "exp",
            Expm1 => "expm1",
            Log => "log",
            Log1p => "log1p",
            Log2 => "log2",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Square => "square",
            Reciprocal => "reciprocal",
            Sin => "sin",
            Cos => "cos",
            Tan => "tan",
            Tanh => "tanh",
            Sinh => "sinh",
            Cosh => "cosh",
            Arcsin => "arcsin",
            Arccos => "arccos",
            Arctan => "arctan",
            Sigmoid => "sigmoid",
            Erf => "erf",
            Erfinv => "erfinv",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            LogicalNot => "logical_not",
            IsNan => "isnan",
            IsInf => "isinf",
        }
    }
}

/// An element-wise unary function applied to one array.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unary(pub UnaryOp);

impl Primitive for Unary {
    fn op(&self) -> Op<'_> {
        Op::Unary(self.0)
    }
    fn name(&self) -> &str {
        self.0.name()
    }

    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>> {
        Ok(vec![match derivative(self.0, &primals[0], &outputs[0]) {
            Some(d) => &cotangents[0] * d,
            None => crate::ops::zeros_like(&primals[0]),
        }])
    }

    fn jvp(&self, primals: &[Array], tangents: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![match derivative(self.0, &primals[0], &outputs[0]) {
            Some(d) => &tangents[0] * d,
            None => crate::ops::zeros_like(&outputs[0]),
        }])
    }

    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok((vec![crate::ops::unary(self.0, &inputs[0])], vec![axes[0]]))
    }

    fn is_equivalent(&self, other: &dyn Primitive) -> bool {
        crate::primitive::same_as(self, other)
    }
}

/// `d out / d x` written with ops, or `None` when the op is piecewise constant / not
/// differentiable (its cotangent and tangent are zero).
fn derivative(op: UnaryOp, x: &Array, out: &Array) -> Option<Array> {
    use UnaryOp::*;
    if !x.dtype().is_float() {
        return None;
    }
    Some(match op {
        Neg => crate::ops::full_like(x, -1.0),
        Abs => x.sign(),
        Exp => out.clone(),
        Expm1 => out + 1.0,
        Log => x.reciprocal(),
        Log1p => (x + 1.0).reciprocal(),
        Log2 => (x * std::f64::consts::LN_2).reciprocal(),
        Sqrt => (out * 2.0).reciprocal(),
        Rsqrt => out * x.reciprocal() * -0.5,
        Square => x * 2.0,
        Reciprocal => -(out.square()),
        Sin => x.cos(),
        Cos => -(x.sin()),
        Tan => out.square() + 1.0,
        Tanh => 1.0 - out.square(),
        Sinh => x.cosh(),
        Cosh => x.sinh(),
        Arcsin => (1.0f64 - x.square()).rsqrt(),
        Arccos => -((1.0f64 - x.square()).rsqrt()),
        Arctan => (x.square() + 1.0).reciprocal(),
        Sigmoid => out * (1.0 - out),
        Erf => (-(x.square())).exp() * std::f64::consts::FRAC_2_SQRT_PI,
        Erfinv => out.square().exp() * (std::f64::consts::PI.sqrt() / 2.0),
        Sign | Floor | Ceil | Round | LogicalNot | IsNan | IsInf => return None,
    })
}

/// Conversion to another dtype.
#[derive(Debug, Clone, Copy)]
pub struct Cast(pub DType);

impl Primitive for Cast {
    fn op(&self) -> Op<'_> {
        Op::Cast(self.0)
    }
    fn name(&self) -> &str {
        "astype"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "astype({})", self.0)
    }
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let x = &primals[0];
        Ok(vec![if x.dtype().is_float() && self.0.is_float() {
            cotangents[0].astype(x.dtype())
        } else {
            crate::ops::zeros_like(x)
        }])
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![if primals[0].dtype().is_float() && self.0.is_float() {
            tangents[0].astype(self.0)
        } else {
            crate::ops::zeros_like(&outputs[0])
        }])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok((vec![inputs[0].astype(self.0)], vec![axes[0]]))
    }
}
