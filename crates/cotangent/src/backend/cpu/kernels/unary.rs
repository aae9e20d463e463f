//! CPU kernels of the unary primitives (see `crate::primitives::unary` for their rules).
use super::CpuKernel;
use crate::backend::cpu::buffer::{try_filled, BufferElement};
use crate::backend::cpu::elementwise::{convert_into, unary_apply, unary_apply_slices, unary_map, Operand};
use crate::backend::cpu::math::{erf, erf_single, erfinv, Float};
use crate::backend::cpu::vmath;
use crate::backend::cpu::Data;
use crate::primitive::Spec;
#[allow(unused_imports)]
use crate::primitives::unary::*;
use crate::{Array, DType, Error, Result};
use half::{bf16, f16};
/// The vectorised `f32` kernel of `op`, if there is one.
fn vector_func(op: UnaryOp) -> Option<vmath::Func> {
    Some(match op {
        UnaryOp::Exp => vmath::Func::Exp,
        UnaryOp::Expm1 => vmath::Func::Expm1,
        UnaryOp::Log => vmath::Func::Ln,
        UnaryOp::Log1p => vmath::Func::Ln1p,
        UnaryOp::Tanh => vmath::Func::Tanh,
        UnaryOp::Sigmoid => vmath::Func::Sigmoid,
        _ => return None,
    })
}

/// Every float unary op's element function, handed to `$m!` as a closure over `$T`: one table
/// for the eager kernel and the fused slice path (`float_unary_slice`), so both compute the same
/// bits. The boolean ops (`LogicalNot`, `IsNan`, `IsInf`) give `$boolean`.
macro_rules! float_unary_table {
    ($op:expr, $T:ty, $m:ident, $boolean:expr) => {{
        use UnaryOp::*;
        match $op {
            Neg => $m!(|v: $T| -v),
            Abs => $m!(|v: $T| v.abs()),
            Sign => $m!(|v: $T| if v > <$T>::ZERO {
                <$T>::ONE
            } else if v < <$T>::ZERO {
                -<$T>::ONE
            } else {
                v
            }),
            Exp => $m!(|v: $T| v.exp()),
            Expm1 => $m!(|v: $T| v.exp_m1()),
            Log => $m!(|v: $T| v.ln()),
            Log1p => $m!(|v: $T| v.ln_1p()),
            Log2 => $m!(|v: $T| v.log2()),
            Sqrt => $m!(|v: $T| v.sqrt()),
            Rsqrt => $m!(|v: $T| <$T>::ONE / v.sqrt()),
            Square => $m!(|v: $T| v * v),
            Reciprocal => $m!(|v: $T| <$T>::ONE / v),
            Sin => $m!(|v: $T| v.sin()),
            Cos => $m!(|v: $T| v.cos()),
            Tan => $m!(|v: $T| v.tan()),
            Tanh => $m!(|v: $T| v.tanh()),
            Sinh => $m!(|v: $T| v.sinh()),
            Cosh => $m!(|v: $T| v.cosh()),
            Arcsin => $m!(|v: $T| v.asin()),
            Arccos => $m!(|v: $T| v.acos()),
            Arctan => $m!(|v: $T| v.atan()),
            Sigmoid => $m!(|v: $T| if v >= <$T>::ZERO {
                <$T>::ONE / (<$T>::ONE + (-v).exp())
            } else {
                let e = v.exp();
                e / (<$T>::ONE + e)
            }),
            // f32 (and f16/bf16 through it) needs only single precision: a fixed-time formula
            Erf => {
                $m!(|v: $T| <$T>::of(if std::mem::size_of::<$T>() == 8 { erf(v.f64()) } else { erf_single(v.f64()) }))
            }
            Erfinv => $m!(|v: $T| <$T>::of(erfinv(v.f64()))),
            Floor => $m!(|v: $T| v.floor()),
            Ceil => $m!(|v: $T| v.ceil()),
            Round => $m!(|v: $T| v.round_even()),
            LogicalNot | IsNan | IsInf => $boolean,
        }
    }};
}

fn float_kernel<T: Float>(op: UnaryOp, x: Operand, shape: &[usize]) -> Result<Data> {
    if T::DTYPE == DType::F32 {
        if let Some(f) = vector_func(op) {
            return unary_apply_slices::<f32>(x, shape, |s, d| vmath::apply(f, s, d), |v| vmath::apply_in_place(f, v));
        }
    }
    macro_rules! m {
        ($f:expr) => {
            unary_apply::<T>(x, shape, $f)
        };
    }
    float_unary_table!(op, T, m, unreachable!("boolean unary ops are handled separately"))
}

/// `dst[i] = op(src[i])` with the eager kernel's element function (the vectorised one for
/// `f32` where there is one), for the fused slice path; `None` for the boolean ops.
pub(super) fn float_unary_slice<T: Float>(op: UnaryOp, src: &[T], dst: &mut [T]) -> Option<()> {
    if let Some(f) = vector_func(op) {
        if T::vector_apply(f, src, dst) {
            return Some(());
        }
    }
    macro_rules! m {
        ($f:expr) => {{
            let f = $f;
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = f(s);
            }
            Some(())
        }};
    }
    float_unary_table!(op, T, m, None)
}

fn float_predicate<T: Float>(op: UnaryOp, x: &Data, shape: &[usize]) -> Result<Vec<bool>> {
    match op {
        UnaryOp::IsNan => unary_map::<T, bool>(x, shape, |v| v.is_nan()),
        UnaryOp::IsInf => unary_map::<T, bool>(x, shape, |v| v.is_infinite()),
        _ => unreachable!(),
    }
}

/// Integer kernels for the ops that are defined on integers.
fn int_kernel<T>(op: UnaryOp, x: Operand, shape: &[usize]) -> Result<Data>
where
    T: BufferElement + num_like::Int,
{
    use UnaryOp::*;
    Ok(match op {
        Neg => unary_apply::<T>(x, shape, |v| v.wrapping_neg())?,
        Abs => unary_apply::<T>(x, shape, |v| v.abs_int())?,
        Sign => unary_apply::<T>(x, shape, |v| v.sign_int())?,
        Square => unary_apply::<T>(x, shape, |v| v.wrapping_mul(v))?,
        Floor | Ceil | Round => unary_apply::<T>(x, shape, |v| v)?,
        _ => return Err(Error::Eval(format!("{} is not defined for {}", op.name(), T::DTYPE))),
    })
}

/// Minimal integer arithmetic shared by the integer kernels.
pub(crate) mod num_like {
    /// Integer element operations.
    pub trait Int: Copy {
        fn wrapping_neg(self) -> Self;
        fn wrapping_mul(self, o: Self) -> Self;
        fn abs_int(self) -> Self;
        fn sign_int(self) -> Self;
    }
    macro_rules! signed {
        ($($t:ty),*) => {$(impl Int for $t {
            #[inline(always)] fn wrapping_neg(self) -> Self { <$t>::wrapping_neg(self) }
            #[inline(always)] fn wrapping_mul(self, o: Self) -> Self { <$t>::wrapping_mul(self, o) }
            #[inline(always)] fn abs_int(self) -> Self { <$t>::wrapping_abs(self) }
            #[inline(always)] fn sign_int(self) -> Self { <$t>::signum(self) }
        })*};
    }
    macro_rules! unsigned {
        ($($t:ty),*) => {$(impl Int for $t {
            #[inline(always)] fn wrapping_neg(self) -> Self { <$t>::wrapping_neg(self) }
            #[inline(always)] fn wrapping_mul(self, o: Self) -> Self { <$t>::wrapping_mul(self, o) }
            #[inline(always)] fn abs_int(self) -> Self { self }
            #[inline(always)] fn sign_int(self) -> Self { (self > 0) as $t }
        })*};
    }
    signed!(i32, i64);
    unsigned!(u8, u32);
}

/// Run an `f32` kernel on a half-precision input and convert back. The kernel overwrites the
/// widened copy; the result goes into the input's buffer when it is owned (donated).
fn via_f32<H: BufferElement>(
    x: Operand,
    shape: &[usize],
    to: impl Fn(H) -> f32 + Sync + Send,
    from: impl Fn(f32) -> H + Sync + Send,
    k: impl FnOnce(Operand, &[usize]) -> Result<Data>,
) -> Result<Data> {
    let wide = Data::from_vec(unary_map::<H, f32>(x.data(), shape, to)?, shape);
    let r = k(Operand::Owned(wide), shape)?;
    convert_into::<f32, H>(&r, shape, Some(x), from)
}

impl Unary {
    /// The kernel on an input of `shape` and `dtype`, written into the input's buffer when it
    /// is owned (only offered when the output has the input's dtype).
    fn run(&self, x: Operand, shape: &[usize], dtype: DType, outputs: &[Spec]) -> Result<Data> {
        let op = self.0;
        let out_shape = &outputs[0].shape;
        let d = x.data();
        Ok(if op == UnaryOp::LogicalNot {
            unary_apply::<bool>(x, out_shape, |v| !v)?
        } else if matches!(op, UnaryOp::IsNan | UnaryOp::IsInf) {
            let v = match dtype {
                DType::F32 => float_predicate::<f32>(op, d, shape),
                DType::F64 => float_predicate::<f64>(op, d, shape),
                DType::F16 => {
                    unary_map::<f16, bool>(
                        d,
                        shape,
                        |v| if op == UnaryOp::IsNan { v.is_nan() } else { v.is_infinite() },
                    )
                }
                DType::BF16 => {
                    unary_map::<bf16, bool>(
                        d,
                        shape,
                        |v| if op == UnaryOp::IsNan { v.is_nan() } else { v.is_infinite() },
                    )
                }
                _ => try_filled(false, crate::shape::numel(shape)),
            };
            Data::from_vec(v?, out_shape)
        } else {
            match dtype {
                DType::F32 => float_kernel::<f32>(op, x, shape)?,
                DType::F64 => float_kernel::<f64>(op, x, shape)?,
                DType::F16 => {
                    via_f32::<f16>(x, shape, f16::to_f32, f16::from_f32, |w, s| float_kernel::<f32>(op, w, s))?
                }
                DType::BF16 => {
                    via_f32::<bf16>(x, shape, bf16::to_f32, bf16::from_f32, |w, s| float_kernel::<f32>(op, w, s))?
                }
                DType::U8 => int_kernel::<u8>(op, x, shape)?,
                DType::U32 => int_kernel::<u32>(op, x, shape)?,
                DType::I32 => int_kernel::<i32>(op, x, shape)?,
                DType::I64 => int_kernel::<i64>(op, x, shape)?,
                DType::Bool => return Err(Error::Eval(format!("{} is not defined for bool", op.name()))),
            }
        })
    }
}

pub(super) fn cast_data(d: &Data, shape: &[usize], from: DType, to: DType) -> Result<Data> {
    use crate::dtype::Element;
    crate::dispatch_dtype!(from, S => crate::dispatch_dtype!(to, D => {
        let v: Vec<D> = if to == DType::Bool {
            unary_map::<S, D>(d, shape, |x| D::from_f64((x.to_f64() != 0.0) as u8 as f64))?
        } else if from.is_float() || to.is_float() {
            unary_map::<S, D>(d, shape, |x| D::from_f64(x.to_f64()))?
        } else {
            unary_map::<S, D>(d, shape, |x| D::from_i64(x.to_i64()))?
        };
        Ok(Data::from_vec(v, shape))
    }))
}

/// The unary kernel of `op` on an operand of `shape` and `dtype` (a fused group's step).
pub(super) fn unary_run(op: UnaryOp, x: Operand, shape: &[usize], dtype: DType, outputs: &[Spec]) -> Result<Data> {
    Unary(op).run(x, shape, dtype, outputs)
}

impl CpuKernel for Unary {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        Ok(vec![self.run(Operand::View(x.computed_data()?), x.shape(), x.dtype(), outputs)?])
    }

    fn eval_owned(&self, mut inputs: Vec<Array>, outputs: &[Spec]) -> Result<Vec<Data>> {
        let out = &outputs[0];
        let x = &mut inputs[0];
        match x.take_unique_data(out.dtype, crate::shape::numel(&out.shape)) {
            Some(d) => Ok(vec![self.run(Operand::Owned(d), x.shape(), x.dtype(), outputs)?]),
            None => self.eval(&inputs, outputs),
        }
    }
}

impl CpuKernel for Cast {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        Ok(vec![cast_data(x.computed_data()?, x.shape(), x.dtype(), self.0)?])
    }
}
