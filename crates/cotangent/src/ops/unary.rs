//! Element-wise unary ops and dtype conversion.
use crate::primitives::unary::{Cast, Unary, UnaryOp};
use crate::{Array, DType};

/// Apply a unary op; integer and bool inputs of transcendental ops are computed in `f32`, and
/// `floor`/`ceil`/`round` of integers are the identity.
#[doc(hidden)]
#[track_caller]
pub fn unary(op: UnaryOp, x: &Array) -> Array {
    let _op = crate::array::OpScope::enter(op.name());
    let dt = x.dtype();
    match op {
        UnaryOp::LogicalNot => {
            let b = x.astype(DType::Bool);
            return Array::from_primitive(Unary(op), vec![b.clone()], b.shape(), DType::Bool);
        }
        UnaryOp::IsNan | UnaryOp::IsInf => {
            return Array::from_primitive(Unary(op), vec![x.clone()], x.shape(), DType::Bool);
        }
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round if !dt.is_float() => return x.clone(),
        _ => {}
    }
    let x = if op.is_transcendental() || dt == DType::Bool { x.astype(dt.to_float()) } else { x.clone() };
    let (shape, dtype) = (x.shape().to_vec(), x.dtype());
    Array::from_primitive(Unary(op), vec![x], &shape, dtype)
}

macro_rules! unary_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {
        impl Array {
            $($(#[$doc])* #[track_caller] pub fn $name(&self) -> Array { unary(UnaryOp::$op, self) })*
        }
        $($(#[$doc])* #[track_caller] pub fn $name(x: &Array) -> Array { unary(UnaryOp::$op, x) })*
    };
}

unary_ops! {
    /// Element-wise `-x`.
    negative => Neg,
    /// Element-wise absolute value.
    abs => Abs,
    /// Element-wise sign (-1, 0 or 1; NaN stays NaN).
    sign => Sign,
    /// Element-wise `e^x`.
    exp => Exp,
    /// Element-wise `e^x - 1`, accurate near zero.
    expm1 => Expm1,
    /// Element-wise natural logarithm.
    log => Log,
    /// Element-wise `ln(1 + x)`, accurate near zero.
    log1p => Log1p,
    /// Element-wise base-2 logarithm.
    log2 => Log2,
    /// Element-wise square root.
    sqrt => Sqrt,
    /// Element-wise `1 / sqrt(x)`.
    rsqrt => Rsqrt,
    /// Element-wise `x * x`.
    square => Square,
    /// Element-wise `1 / x`.
    reciprocal => Reciprocal,
    /// Element-wise sine.
    sin => Sin,
    /// Element-wise cosine.
    cos => Cos,
    /// Element-wise tangent.
    tan => Tan,
    /// Element-wise hyperbolic tangent.
    tanh => Tanh,
    /// Element-wise hyperbolic sine.
    sinh => Sinh,
    /// Element-wise hyperbolic cosine.
    cosh => Cosh,
    /// Element-wise arcsine.
    arcsin => Arcsin,
    /// Element-wise arccosine.
    arccos => Arccos,
    /// Element-wise arctangent.
    arctan => Arctan,
    /// Element-wise logistic function `1 / (1 + e^-x)`.
    sigmoid => Sigmoid,
    /// Element-wise error function.
    erf => Erf,
    /// Element-wise inverse error function.
    erfinv => Erfinv,
    /// Element-wise floor.
    floor => Floor,
    /// Element-wise ceiling.
    ceil => Ceil,
    /// Element-wise rounding, halves to even (as numpy).
    round => Round,
    /// Element-wise logical not (the input is cast to bool).
    logical_not => LogicalNot,
    /// Element-wise NaN test.
    isnan => IsNan,
    /// Element-wise infinity test.
    isinf => IsInf,
}

impl Array {
    /// This array converted to `dtype` (no node when it already has it). Float to integer
    /// conversion truncates toward zero and saturates, as Rust's `as`.
    #[track_caller]
    pub fn astype(&self, dtype: DType) -> Array {
        let _op = crate::array::OpScope::enter("astype");
        astype(self, dtype)
    }
}

/// `x` converted to `dtype`.
#[track_caller]
pub fn astype(x: &Array, dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("astype");
    if x.dtype() == dtype {
        return x.clone();
    }
    Array::from_primitive(Cast(dtype), vec![x.clone()], x.shape(), dtype)
}
