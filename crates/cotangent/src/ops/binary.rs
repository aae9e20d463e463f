//! Element-wise binary ops with numpy broadcasting, `select` and `clip`, and the operators.
use super::{promote_operands, IntoOperand};
use crate::primitives::binary::{Binary, BinaryOp, Select};
use crate::shape::broadcast_shapes;
use crate::{Array, DType};

/// Apply a binary op to two arrays of the same dtype (broadcasting their shapes). Ops that
/// need floats compute integer inputs in `f32`; comparisons and logical ops return bool.
#[doc(hidden)]
#[track_caller]
pub fn binary(op: BinaryOp, a: &Array, b: &Array) -> Array {
    let _op = crate::array::OpScope::enter(op.name());
    let Some(shape) = broadcast_shapes(a.shape(), b.shape()) else {
        panic!(
            "cotangent::{}: shapes {:?} ({}) and {:?} ({}) do not broadcast",
            op.name(),
            a.shape(),
            a.dtype(),
            b.shape(),
            b.dtype()
        )
    };
    let (a, b) = if op.needs_float() && !a.dtype().is_float() {
        (a.astype(DType::F32), b.astype(DType::F32))
    } else if matches!(op, BinaryOp::LogicalAnd | BinaryOp::LogicalOr) {
        (a.astype(DType::Bool), b.astype(DType::Bool))
    } else {
        (a.clone(), b.clone())
    };
    let dtype = if op.returns_bool() { DType::Bool } else { a.dtype() };
    Array::from_primitive(Binary(op), vec![a, b], &shape, dtype)
}

#[track_caller]
fn binary_operands(op: BinaryOp, a: impl IntoOperand, b: impl IntoOperand) -> Array {
    let _op = crate::array::OpScope::enter(op.name());
    let (a, b) = promote_operands(op.name(), a.into_operand(), b.into_operand());
    let out = binary(op, &a, &b);
    // the operands the caller gave up (temporaries) are now held by `out` alone
    drop((a, b));
    crate::primitives::fused::fuse_producers(out)
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {
        impl Array {
            $($(#[$doc])* #[track_caller]
            pub fn $name(&self, other: impl IntoOperand) -> Array { binary_operands(BinaryOp::$op, self, other) })*
        }
        $($(#[$doc])* #[track_caller]
        pub fn $name(a: impl IntoOperand, b: impl IntoOperand) -> Array { binary_operands(BinaryOp::$op, a, b) })*
    };
}

binary_ops! {
    /// Element-wise `a + b`.
    add => Add,
    /// Element-wise `a - b`.
    subtract => Subtract,
    /// Element-wise `a * b`.
    multiply => Multiply,
    /// Element-wise true division `a / b`, also the `/` operator. Integer (and bool) operands
    /// divide in `float32`, as numpy's `/` divides in floats: `7 / 2` is `3.5`, `1 / 0` is
    /// `inf` and `0 / 0` is NaN. For integer quotients use [`floor_divide`].
    divide => Divide,
    /// Element-wise floor division (rounds toward negative infinity, as Python's `//`); integer
    /// operands give integers.
    ///
    /// **Integer division by zero gives 0**: `x // 0 == 0` for every integer dtype, as numpy
    /// returns (numpy also warns; PyTorch raises). Evaluation is lazy and runs over whole
    /// arrays, so there is no point to raise at; nothing panics. Integers wrap:
    /// `i32::MIN // -1 == i32::MIN`. Floats follow IEEE: `1.0 // 0.0` is `inf`, `0.0 // 0.0`
    /// is NaN.
    floor_divide => FloorDivide,
    /// Element-wise remainder with the sign of the divisor (Python's `%`), also the `%`
    /// operator.
    ///
    /// **Integer remainder by zero gives 0**: `x % 0 == 0` for every integer dtype, as numpy
    /// returns (see [`floor_divide`]); nothing panics, and `i32::MIN % -1 == 0`. For floats
    /// `x % 0.0` is NaN.
    remainder => Remainder,
    /// Element-wise `a ^ b`. Integer powers wrap on overflow; a negative exponent of an
    /// integer dtype makes the evaluation fail (`Error::Eval`, naming `power`), as numpy refuses
    /// integers to negative integer powers: cast to a float dtype first.
    power => Power,
    /// Element-wise maximum (NaN propagates).
    maximum => Maximum,
    /// Element-wise minimum (NaN propagates).
    minimum => Minimum,
    /// Element-wise four-quadrant `arctan(a / b)`.
    arctan2 => Arctan2,
    /// Element-wise `log(e^a + e^b)`, computed stably.
    logaddexp => LogAddExp,
    /// Element-wise `a == b`.
    equal => Equal,
    /// Element-wise `a != b`.
    not_equal => NotEqual,
    /// Element-wise `a < b`.
    less => Less,
    /// Element-wise `a <= b`.
    less_equal => LessEqual,
    /// Element-wise `a > b`.
    greater => Greater,
    /// Element-wise `a >= b`.
    greater_equal => GreaterEqual,
    /// Element-wise logical and (inputs cast to bool).
    logical_and => LogicalAnd,
    /// Element-wise logical or (inputs cast to bool).
    logical_or => LogicalOr,
}

/// `where`: elements of `a` where `cond` is true, of `b` elsewhere (all three broadcast).
#[track_caller]
pub fn select(cond: &Array, a: impl IntoOperand, b: impl IntoOperand) -> Array {
    let _op = crate::array::OpScope::enter("select");
    let (a, b) = promote_operands("select", a.into_operand(), b.into_operand());
    let Some(shape) = broadcast_shapes(cond.shape(), a.shape()).and_then(|s| broadcast_shapes(&s, b.shape())) else {
        panic!(
            "cotangent::select: shapes {:?} ({}), {:?} ({}) and {:?} ({}) do not broadcast (condition, then the two \
             choices)",
            cond.shape(),
            cond.dtype(),
            a.shape(),
            a.dtype(),
            b.shape(),
            b.dtype()
        )
    };
    let dtype = a.dtype();
    Array::from_primitive(Select, vec![cond.astype(DType::Bool), a, b], &shape, dtype)
}

/// `x` limited to `[lo, hi]`; either bound may be `None`.
#[track_caller]
pub fn clip(x: &Array, lo: Option<impl IntoOperand>, hi: Option<impl IntoOperand>) -> Array {
    let _op = crate::array::OpScope::enter("clip");
    let mut y = x.clone();
    if let Some(lo) = lo {
        y = maximum(&y, lo);
    }
    if let Some(hi) = hi {
        y = minimum(&y, hi);
    }
    y
}

impl Array {
    /// `x` limited to `[lo, hi]`.
    #[track_caller]
    pub fn clip(&self, lo: impl IntoOperand, hi: impl IntoOperand) -> Array {
        let _op = crate::array::OpScope::enter("clip");
        clip(self, Some(lo), Some(hi))
    }
}

/// Sum `g` down to `shape` (undoing numpy broadcasting): used by VJP rules.
pub(crate) fn sum_to_shape(g: &Array, shape: &[usize]) -> Array {
    if g.shape() == shape {
        return g.clone();
    }
    let extra = g.ndim() - shape.len();
    let mut axes: Vec<isize> = (0..extra as isize).collect();
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 && g.shape()[extra + i] != 1 {
            axes.push((extra + i) as isize);
        }
    }
    let s = g.sum(&axes, true);
    s.reshape_exact(shape)
}

/// Align batched inputs of an element-wise op for broadcasting: batch axes move to the front
/// and batched inputs of lower rank get unit axes after it. Returns the inputs and the output's
/// batch axis (always `Some(0)` when any input is batched).
pub(crate) fn batch_align(inputs: &[Array], axes: &[Option<usize>]) -> (Vec<Array>, Option<usize>) {
    let rank = inputs.iter().zip(axes).map(|(x, a)| x.ndim() - a.is_some() as usize).max().unwrap_or(0);
    let xs = inputs
        .iter()
        .zip(axes)
        .map(|(x, a)| match a {
            None => x.clone(),
            Some(ax) => {
                let moved = x.moveaxis(*ax as isize, 0);
                let r = x.ndim() - 1;
                if r < rank {
                    let mut shape = vec![moved.shape()[0]];
                    shape.extend(std::iter::repeat_n(1, rank - r));
                    shape.extend_from_slice(&moved.shape()[1..]);
                    moved.reshape_exact(&shape)
                } else {
                    moved
                }
            }
        })
        .collect();
    (xs, if axes.iter().any(|a| a.is_some()) { Some(0) } else { None })
}

macro_rules! operators {
    ($($tr:ident $method:ident => $op:ident: $doc:literal),*) => {$(
        impl<R: IntoOperand> std::ops::$tr<R> for Array {
            type Output = Array;
            #[doc = $doc]
            #[track_caller]
            fn $method(self, rhs: R) -> Array { binary_operands(BinaryOp::$op, self, rhs) }
        }
        impl<R: IntoOperand> std::ops::$tr<R> for &Array {
            type Output = Array;
            #[doc = $doc]
            #[track_caller]
            fn $method(self, rhs: R) -> Array { binary_operands(BinaryOp::$op, self, rhs) }
        }
        operators!(@scalar $tr $method $op $doc: f32, f64, i32, i64, u32, u8, usize, isize);
    )*};
    // a Rust number on the left: the same types as on the right (see `IntoOperand`)
    (@scalar $tr:ident $method:ident $op:ident $doc:literal: $($s:ty),*) => {$(
        impl std::ops::$tr<Array> for $s {
            type Output = Array;
            #[doc = $doc]
            #[track_caller]
            fn $method(self, rhs: Array) -> Array { binary_operands(BinaryOp::$op, self, rhs) }
        }
        impl std::ops::$tr<&Array> for $s {
            type Output = Array;
            #[doc = $doc]
            #[track_caller]
            fn $method(self, rhs: &Array) -> Array { binary_operands(BinaryOp::$op, self, rhs) }
        }
    )*};
}
operators!(
    Add add => Add: "Element-wise `a + b` (see [`add`]).",
    Sub sub => Subtract: "Element-wise `a - b` (see [`subtract`]).",
    Mul mul => Multiply: "Element-wise `a * b` (see [`multiply`]).",
    Div div => Divide: "Element-wise true division (see [`divide`]): integer operands divide in `float32`, \
        so `7 / 2` is `3.5` and `1 / 0` is `inf`; [`floor_divide`] keeps integers.",
    Rem rem => Remainder: "Element-wise remainder with the sign of the divisor (see [`remainder`]); an \
        integer `x % 0` is `0`."
);

impl std::ops::Neg for Array {
    type Output = Array;
    #[track_caller]
    fn neg(self) -> Array {
        self.negative()
    }
}
impl std::ops::Neg for &Array {
    type Output = Array;
    #[track_caller]
    fn neg(self) -> Array {
        self.negative()
    }
}
