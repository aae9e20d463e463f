//! Element types and type promotion.
//!
//! # Promotion rules
//!
//! cotangent follows JAX's promotion lattice (which agrees with numpy for every pair that numpy
//! and JAX both define the same way):
//!
//! * `bool` < any number; unsigned `u8 < u32`, signed `i32 < i64`;
//! * `u8` with a signed integer gives that signed integer; `u32` with `i32` or `i64` gives `i64`;
//! * any integer with a float gives the float; `f16` with `bf16` gives `f32`; floats widen
//!   `f16/bf16 < f32 < f64`.
//!
//! Rust scalars are *weakly typed*, as Python scalars are in JAX: `x * 2.0` keeps `x`'s dtype
//! when `x` is a float array (a Rust `f64` literal never turns an `f32` array into `f64`); a float
//! scalar with an integer or bool array gives `f32`; an integer scalar with a bool array gives
//! `i32`, with an integer or float array the array's dtype.
pub use crate::backend::cpu::buffer::BufferElement;
use half::{bf16, f16};
use std::fmt;

/// The element type of an [`Array`](crate::Array).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Booleans.
    Bool,
    /// Unsigned 8-bit integers.
    U8,
    /// Unsigned 32-bit integers.
    U32,
    /// Signed 32-bit integers.
    I32,
    /// Signed 64-bit integers.
    I64,
    /// IEEE half precision floats.
    F16,
    /// bfloat16 floats.
    BF16,
    /// Single precision floats.
    F32,
    /// Double precision floats.
    F64,
}

/// Every dtype, in promotion order.
pub const ALL_DTYPES: [DType; 9] =
    [DType::Bool, DType::U8, DType::U32, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64];

impl DType {
    /// Size of one element in bytes.
    pub fn size_of(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }
    /// Whether this is a floating point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }
    /// Whether this is an integer type (not bool).
    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::U32 | DType::I32 | DType::I64)
    }
    /// Whether this is a signed integer type.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }
    /// Lower-case name, as numpy spells it.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::U32 => "uint32",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// The dtype two arrays of dtypes `self` and `other` promote to (see the module docs).
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        let (a, b) = if self < other { (self, other) } else { (other, self) };
        match (a, b) {
            (Bool, x) => x,
            (U8, x) => x,
            (U32, I32) | (U32, I64) => I64,
            (F16, BF16) => F32,
            (x, y) if x.is_int() && y.is_float() => y,
            (_, y) => y,
        }
    }

    /// The dtype an array of dtype `self` and a weakly typed Rust scalar of kind `kind` give.
    pub fn promote_weak(self, kind: ScalarKind) -> DType {
        match kind {
            ScalarKind::Bool => self,
            ScalarKind::Int => {
                if self == DType::Bool {
                    DType::I32
                } else {
                    self
                }
            }
            ScalarKind::Float => {
                if self.is_float() {
                    self
                } else {
                    DType::F32
                }
            }
        }
    }

    /// The float dtype used to compute transcendental functions of this dtype
    /// (integers and bool compute in `f32`, as in JAX).
    pub fn to_float(self) -> DType {
        if self.is_float() {
            self
        } else {
            DType::F32
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kind of a weakly typed Rust scalar used as an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarKind {
    /// `bool`.
    Bool,
    /// Any Rust integer.
    Int,
    /// `f32` or `f64`.
    Float,
}

/// A Rust type that can be an element of an array.
pub trait Element: Copy + Send + Sync + PartialOrd + fmt::Debug + Default + 'static {
    /// The matching dtype.
    const DTYPE: DType;
    /// Lossy conversion to `f64`.
    fn to_f64(self) -> f64;
    /// Lossy conversion from `f64` (saturating for integers, as `as` casts do).
    fn from_f64(v: f64) -> Self;
    /// Lossy conversion to `i64` (exact for every integer dtype).
    fn to_i64(self) -> i64;
    /// Lossy conversion from `i64`.
    fn from_i64(v: i64) -> Self;
}

macro_rules! impl_element_num {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)] fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn from_f64(v: f64) -> Self { v as $t }
            #[inline(always)] fn to_i64(self) -> i64 { self as i64 }
            #[inline(always)] fn from_i64(v: i64) -> Self { v as $t }
        }
    )*};
}
impl_element_num!(u8 => U8, u32 => U32, i32 => I32, i64 => I64, f32 => F32, f64 => F64);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v != 0
    }
}

macro_rules! impl_element_half {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)] fn to_f64(self) -> f64 { self.to_f64() }
            #[inline(always)] fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
            #[inline(always)] fn to_i64(self) -> i64 { self.to_f64() as i64 }
            #[inline(always)] fn from_i64(v: i64) -> Self { <$t>::from_f64(v as f64) }
        }
    )*};
}
impl_element_half!(f16 => F16, bf16 => BF16);

/// Calls `$body` with the type alias `$t` bound to the Rust type of `$dtype`.
///
/// ```ignore
/// dispatch_dtype!(dtype, T => { Vec::<T>::new() })
/// ```
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::DType::Bool => {
                type $t = bool;
                $body
            }
            $crate::DType::U8 => {
                type $t = u8;
                $body
            }
            $crate::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn promotion_table() {
        use DType::*;
        assert_eq!(F32.promote(F64), F64);
        assert_eq!(I32.promote(F16), F16);
        assert_eq!(U32.promote(I32), I64);
        assert_eq!(U8.promote(I32), I32);
        assert_eq!(F16.promote(BF16), F32);
        assert_eq!(Bool.promote(U8), U8);
        assert_eq!(F32.promote_weak(ScalarKind::Float), F32);
        assert_eq!(I32.promote_weak(ScalarKind::Float), F32);
        assert_eq!(Bool.promote_weak(ScalarKind::Int), I32);
        for a in ALL_DTYPES {
            for b in ALL_DTYPES {
                assert_eq!(a.promote(b), b.promote(a));
            }
        }
    }
}
