//! The public op library: constructors users call, by family (mirrors `primitives/`).
//!
//! Every op exists as a method on [`Array`] and as a `ct::` function; arithmetic also has
//! operators on `Array` and `&Array` with arrays and Rust scalars on either side. Misuse
//! (shapes that do not broadcast, a bad axis) panics with a message naming the op, the shapes
//! and dtypes, reported at the caller's location.
//!
//! # Rust numbers as operands
//!
//! `f32`, `f64`, `i32`, `i64`, `u32`, `u8`, `usize` and `isize` work on either side of
//! `+ - * / %` (`2.0f32 * &x`, `&x / 2u8`) and as the operand of the binary ops. A number is
//! weakly typed: the array's dtype wins (`x_f32 * 2.0f64` is `float32`, an integer array times
//! a float is `float32`); see [`dtype`](crate::dtype).
//!
//! **An integer must fit the dtype it takes.** The number is converted to the array's dtype,
//! and an integer that the dtype cannot hold panics at the caller's line, naming the op, the
//! number and the dtype, instead of wrapping: `i32_array + 3_000_000_000i64`, `u8_array - 1`
//! (`-1` is not a `uint8`) and `f16_array + 100_000` (beyond `float16`'s largest finite value)
//! all panic. Cast the array first (`x.astype(DType::I64) + 3_000_000_000i64`). Integers that a
//! float dtype holds only approximately round to the nearest value (`f32_array + 16_777_217`
//! adds `16777216`), and a float number takes the array's float dtype as `as` would.
//!
//! ```should_panic
//! use cotangent::Array;
//! let x = Array::from_slice(&[1i32, 2], &[2]);
//! let _ = &x + 3_000_000_000i64; // panics: 3000000000 does not fit int32
//! ```
//!
//! An unsuffixed literal on the left (`1.0 - &x`) could be any of those types to Rust, which
//! settles it (as `f64` or `i32`) only after the whole function is read, so a method cannot be
//! called on the result directly: `(1.0 - &x).exp()` and `let y = 1.0 - &x; y.eval()` stop at
//! "type annotations needed". Suffix the literal (`1.0f32 - &x`: the suffix does not change the
//! result's dtype), name the result's type (`let y: Array = 1.0 - &x;`), or put the array first
//! (`-&x + 1.0`). Passing the result to a function or an operator needs nothing.
pub mod attention;
pub mod binary;
pub mod control;
pub mod conv;
pub mod creation;
pub mod index;
pub mod linalg;
pub mod random;
pub mod reduce;
pub mod shape;
pub mod slicing;
pub mod sort;
pub mod unary;

pub use attention::*;
pub use binary::*;
pub use control::scan;
pub use conv::*;
pub use creation::*;
pub use index::*;
pub use linalg::*;
pub use reduce::*;
pub use shape::*;
pub use slicing::*;
pub use sort::*;
pub use unary::*;

use crate::dtype::ScalarKind;
use crate::{Array, DType};

/// One operand of a binary op: an array, or a weakly typed Rust scalar (see
/// [`dtype`](crate::dtype) for how scalars promote).
#[derive(Clone, Debug)]
pub enum Operand {
    /// An array.
    Array(Array),
    /// A Rust float.
    Float(f64),
    /// A Rust integer.
    Int(i64),
    /// A Rust bool.
    Bool(bool),
}

/// Anything usable as an operand of a binary op: `Array`, `&Array`, and Rust numbers and bools.
pub trait IntoOperand {
    /// Convert to an [`Operand`].
    fn into_operand(self) -> Operand;
}

impl IntoOperand for Array {
    fn into_operand(self) -> Operand {
        Operand::Array(self)
    }
}
impl IntoOperand for &Array {
    fn into_operand(self) -> Operand {
        Operand::Array(self.clone())
    }
}
impl IntoOperand for &&Array {
    fn into_operand(self) -> Operand {
        Operand::Array((*self).clone())
    }
}
impl IntoOperand for bool {
    fn into_operand(self) -> Operand {
        Operand::Bool(self)
    }
}
macro_rules! operand_float {
    ($($t:ty),*) => {$(impl IntoOperand for $t {
        fn into_operand(self) -> Operand { Operand::Float(self as f64) }
    })*};
}
operand_float!(f32, f64);
macro_rules! operand_int {
    ($($t:ty),*) => {$(impl IntoOperand for $t {
        // lossless: every value of these types is an i64 (isize on 64-bit targets)
        fn into_operand(self) -> Operand { Operand::Int(self as i64) }
    })*};
}
operand_int!(i32, i64, u32, u8, isize);
impl IntoOperand for usize {
    #[track_caller]
    fn into_operand(self) -> Operand {
        match i64::try_from(self) {
            Ok(v) => Operand::Int(v),
            Err(_) => panic!(
                "cotangent: the Rust integer {self} is larger than any array dtype holds (the largest int64 is {})",
                i64::MAX
            ),
        }
    }
}

impl Operand {
    fn kind(&self) -> Option<ScalarKind> {
        match self {
            Operand::Array(_) => None,
            Operand::Float(_) => Some(ScalarKind::Float),
            Operand::Int(_) => Some(ScalarKind::Int),
            Operand::Bool(_) => Some(ScalarKind::Bool),
        }
    }
    /// The operand as an array of `dtype` (scalars become 0-d arrays; arrays are cast).
    pub fn to_array(&self, dtype: DType) -> Array {
        match self {
            Operand::Array(a) => a.astype(dtype),
            Operand::Float(v) => creation::scalar_f64(*v, dtype),
            Operand::Int(v) => creation::scalar_i64(*v, dtype),
            Operand::Bool(v) => creation::scalar_i64(*v as i64, dtype),
        }
    }
}

/// Promote two operands of the op `op` to a common dtype and return them as arrays of it.
/// Panics if an integer scalar does not fit that dtype (see the module docs).
#[track_caller]
pub(crate) fn promote_operands(op: &str, a: Operand, b: Operand) -> (Array, Array) {
    let dtype = match (&a, &b) {
        (Operand::Array(x), Operand::Array(y)) => x.dtype().promote(y.dtype()),
        (Operand::Array(x), s) | (s, Operand::Array(x)) => x.dtype().promote_weak(s.kind().unwrap()),
        (x, y) => match (x.kind().unwrap(), y.kind().unwrap()) {
            (ScalarKind::Float, _) | (_, ScalarKind::Float) => DType::F32,
            (ScalarKind::Int, _) | (_, ScalarKind::Int) => DType::I32,
            _ => DType::Bool,
        },
    };
    for s in [&a, &b] {
        if let Operand::Int(v) = *s {
            check_int_fits(op, v, dtype);
        }
    }
    (a.to_array(dtype), b.to_array(dtype))
}

/// Panic (at the caller's line) unless the integer `v` converts to `dtype` without wrapping or
/// overflowing to infinity.
#[track_caller]
fn check_int_fits(op: &str, v: i64, dtype: DType) {
    use crate::dtype::Element;
    let back = crate::dispatch_dtype!(dtype, T => <T as Element>::from_i64(v).to_f64());
    let fits = match dtype {
        DType::Bool => v == 0 || v == 1,
        d if d.is_float() => back.is_finite(),
        // exact in f64 for every value of these dtypes; int64 holds every i64
        DType::I64 => true,
        _ => back == v as f64,
    };
    if !fits {
        let range = match dtype {
            DType::U8 => format!("{}..={}", u8::MIN, u8::MAX),
            DType::U32 => format!("{}..={}", u32::MIN, u32::MAX),
            DType::I32 => format!("{}..={}", i32::MIN, i32::MAX),
            DType::F16 => "finite values up to ±65504".to_string(),
            DType::BF16 => "finite values up to about ±3.39e38".to_string(),
            _ => "0..=1".to_string(),
        };
        panic!(
            "cotangent::{op}: the integer {v} does not fit {dtype}, the dtype of the array it is combined with \
             ({dtype} holds {range}); cast the array to a wider dtype first, e.g. `x.astype(DType::I64)`"
        );
    }
}
