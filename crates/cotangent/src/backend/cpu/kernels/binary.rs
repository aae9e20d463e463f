//! CPU kernels of the binary primitives (see `crate::primitives::binary` for their rules).
use super::CpuKernel;
use crate::backend::cpu::buffer::BufferElement;
use crate::backend::cpu::elementwise::{
    binary_apply, binary_map, convert_into, dense, select_apply, unary_map, Operand,
};
use crate::backend::cpu::math::Float;
use crate::backend::cpu::Data;
use crate::primitive::Spec;
#[allow(unused_imports)]
use crate::primitives::binary::*;
use crate::{Array, DType, Error, Result};
use half::{bf16, f16};
macro_rules! int_arith {
    ($($t:ty),*) => {$(impl IntArith for $t {
        const ZERO: Self = 0;
        #[inline(always)] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
        #[inline(always)] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
        #[inline(always)] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
        #[inline(always)] fn floordiv(self, o: Self) -> Self {
            if o == 0 { return 0; }
            // `MIN / -1` and `MIN % -1` overflow: wrapping gives MIN and 0, as documented
            let q = self.wrapping_div(o);
            #[allow(unused_comparisons)]
            if (self.wrapping_rem(o) != 0) && ((self < 0) != (o < 0)) { q.wrapping_sub(1) } else { q }
        }
        #[inline(always)] fn rem(self, o: Self) -> Self {
            if o == 0 { return 0; }
            let r = self.wrapping_rem(o);
            #[allow(unused_comparisons)]
            if r != 0 && ((r < 0) != (o < 0)) { r.wrapping_add(o) } else { r }
        }
        #[inline(always)] fn pow(self, o: Self) -> Self {
            // the kernel rejects negative exponents before it gets here
            #[allow(unused_comparisons)]
            if o < 0 { return 0; }
            self.wrapping_pow(o as u32)
        }
    })*};
}

int_arith!(u8, u32, i32, i64);

pub(super) type In<'a> = (Operand<'a>, &'a [usize]);
/// 1 for the winner of a maximum or minimum, ½ for a tie, 0 otherwise.
#[inline(always)]
fn extremum_share<T: Float>(wins: bool, ties: bool) -> T {
    if wins {
        T::ONE
    } else if ties {
        T::of(0.5)
    } else {
        T::ZERO
    }
}

/// Every float binary op's element function, handed to `$m!` (arithmetic, a result of `$T`) or
/// `$c!` (comparisons and logical ops, a `bool`) as a closure over `$T`: one table for the eager
/// kernel and the fused slice path (`float_binary_slice`), so both compute the same bits.
macro_rules! float_binary_table {
    ($op:expr, $T:ty, $m:ident, $c:ident) => {{
        use BinaryOp::*;
        match $op {
            Add => $m!(|x, y| x + y),
            Subtract => $m!(|x, y| x - y),
            Multiply => $m!(|x, y| x * y),
            Divide => $m!(|x, y| x / y),
            // numpy's divmod-based floor division, consistent with `remainder`
            // (`x == y * (x // y) + x % y`), e.g. `1 // -inf == -1`, not `floor(1 / -inf) == -0`.
            FloorDivide => $m!(|x: $T, y: $T| {
                if y == <$T>::ZERO {
                    return x / y;
                }
                let md = x % y;
                let mut div = (x - md) / y;
                if md != <$T>::ZERO && ((y < <$T>::ZERO) != (md < <$T>::ZERO)) {
                    div = div - <$T>::ONE;
                }
                if div == <$T>::ZERO {
                    return if x / y < <$T>::ZERO { -<$T>::ZERO } else { <$T>::ZERO };
                }
                let fl = div.floor();
                if div - fl > <$T>::of(0.5) {
                    fl + <$T>::ONE
                } else {
                    fl
                }
            }),
            Remainder => $m!(|x: $T, y: $T| {
                let r = x % y;
                if r != <$T>::ZERO && ((r < <$T>::ZERO) != (y < <$T>::ZERO)) {
                    r + y
                } else {
                    r
                }
            }),
            Power => $m!(|x: $T, y: $T| x.powf(y)),
            Maximum => $m!(|x: $T, y: $T| x.max_nan(y)),
            Minimum => $m!(|x: $T, y: $T| x.min_nan(y)),
            MaximumShare => $m!(|x: $T, y: $T| extremum_share(x > y, x == y)),
            MinimumShare => $m!(|x: $T, y: $T| extremum_share(x < y, x == y)),
            Arctan2 => $m!(|x: $T, y: $T| x.atan2(y)),
            LogAddExp => $m!(|x: $T, y: $T| {
                let m = if x > y { x } else { y };
                if m == <$T>::NEG_INFINITY || m == <$T>::INFINITY || m.is_nan() {
                    if x.is_nan() || y.is_nan() {
                        x + y
                    } else {
                        m
                    }
                } else {
                    m + ((x - m).exp() + (y - m).exp()).ln()
                }
            }),
            Equal => $c!(|x, y| x == y),
            NotEqual => $c!(|x, y| x != y),
            Less => $c!(|x, y| x < y),
            LessEqual => $c!(|x, y| x <= y),
            Greater => $c!(|x, y| x > y),
            GreaterEqual => $c!(|x, y| x >= y),
            LogicalAnd => $c!(|x, y| x != <$T>::ZERO && y != <$T>::ZERO),
            LogicalOr => $c!(|x, y| x != <$T>::ZERO || y != <$T>::ZERO),
        }
    }};
}

fn float_kernel<T: Float>(op: BinaryOp, a: In, b: In, out: &[usize]) -> Result<Data> {
    macro_rules! m {
        ($f:expr) => {
            binary_apply::<T>(a, b, out, $f)?
        };
    }
    macro_rules! c {
        ($f:expr) => {
            Data::from_vec(binary_map::<T, bool>(a.0.data(), a.1, b.0.data(), b.1, out, $f)?, out)
        };
    }
    Ok(float_binary_table!(op, T, m, c))
}

/// One operand of [`float_binary_slice`]: a slice as long as the result, or one value for all.
#[derive(Clone, Copy)]
pub(super) enum Side<'a, T> {
    /// Element `i` of the result reads element `i`.
    Slice(&'a [T]),
    /// Every element reads this value.
    Scalar(T),
}

/// `dst[i] = op(a[i], b[i])` with the eager kernel's element function, for the fused slice
/// path; `None` for the ops with a `bool` result.
pub(super) fn float_binary_slice<T: Float>(op: BinaryOp, a: Side<T>, b: Side<T>, dst: &mut [T]) -> Option<()> {
    macro_rules! m {
        ($f:expr) => {{
            let f = $f;
            match (a, b) {
                (Side::Slice(a), Side::Slice(b)) => {
                    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
                        *d = f(x, y);
                    }
                }
                (Side::Slice(a), Side::Scalar(y)) => {
                    for (d, &x) in dst.iter_mut().zip(a) {
                        *d = f(x, y);
                    }
                }
                (Side::Scalar(x), Side::Slice(b)) => {
                    for (d, &y) in dst.iter_mut().zip(b) {
                        *d = f(x, y);
                    }
                }
                (Side::Scalar(x), Side::Scalar(y)) => dst.fill(f(x, y)),
            }
            Some(())
        }};
    }
    macro_rules! c {
        ($f:expr) => {
            None
        };
    }
    float_binary_table!(op, T, m, c)
}

/// Integer arithmetic used by the integer kernels (wrapping, Python-style floor division and
/// remainder; division by zero gives 0 instead of trapping).
trait IntArith: BufferElement + Ord {
    const ZERO: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn floordiv(self, o: Self) -> Self;
    fn rem(self, o: Self) -> Self;
    fn pow(self, o: Self) -> Self;
}

fn int_kernel<T: IntArith>(op: BinaryOp, a: In, b: In, out: &[usize]) -> Result<Data> {
    use BinaryOp::*;
    macro_rules! m {
        ($f:expr) => {
            binary_apply::<T>(a, b, out, $f)?
        };
    }
    macro_rules! c {
        ($f:expr) => {
            Data::from_vec(binary_map::<T, bool>(a.0.data(), a.1, b.0.data(), b.1, out, $f)?, out)
        };
    }
    Ok(match op {
        Add => m!(|x: T, y| x.add(y)),
        Subtract => m!(|x: T, y| x.sub(y)),
        Multiply => m!(|x: T, y| x.mul(y)),
        FloorDivide => m!(|x: T, y| x.floordiv(y)),
        Remainder => m!(|x: T, y| x.rem(y)),
        Power => {
            if crate::shape::numel(out) > 0 && any_negative::<T>(b.0.data(), b.1) {
                return Err(Error::Eval(format!(
                    "power: negative exponent for the integer dtype {} (integers to negative integer powers \
                     are not allowed; cast to a float dtype first)",
                    T::DTYPE
                )));
            }
            m!(|x: T, y| x.pow(y))
        }
        Maximum => m!(|x: T, y: T| x.max(y)),
        Minimum => m!(|x: T, y: T| x.min(y)),
        Equal => c!(|x, y| x == y),
        NotEqual => c!(|x, y| x != y),
        Less => c!(|x, y| x < y),
        LessEqual => c!(|x, y| x <= y),
        Greater => c!(|x, y| x > y),
        GreaterEqual => c!(|x, y| x >= y),
        LogicalAnd => c!(|x, y| x != T::ZERO && y != T::ZERO),
        LogicalOr => c!(|x, y| x != T::ZERO || y != T::ZERO),
        Divide | Arctan2 | LogAddExp | MaximumShare | MinimumShare => {
            return Err(Error::Eval(format!("{} is not defined for {}", op.name(), T::DTYPE)))
        }
    })
}

/// Whether any element of the view `d` (of `shape`) is negative.
fn any_negative<T: IntArith>(d: &Data, shape: &[usize]) -> bool {
    let src = d.buf.as_slice::<T>();
    let mut neg = false;
    crate::backend::cpu::strided::for_each_row(shape, [&d.strides], [d.offset as isize], |[o], n, [s]| {
        neg = neg || (0..n as isize).any(|i| src[(o + i * s) as usize] < T::ZERO);
    });
    neg
}

fn bool_kernel(op: BinaryOp, a: In, b: In, out: &[usize]) -> Result<Data> {
    use BinaryOp::*;
    macro_rules! c {
        ($f:expr) => {
            binary_apply::<bool>(a, b, out, $f)?
        };
    }
    Ok(match op {
        Add | LogicalOr | Maximum => c!(|x, y| x | y),
        Multiply | LogicalAnd | Minimum => c!(|x, y| x & y),
        Equal => c!(|x, y| x == y),
        NotEqual => c!(|x, y| x != y),
        Less => c!(|x: bool, y: bool| !x & y),
        LessEqual => c!(|x: bool, y: bool| x <= y),
        Greater => c!(|x: bool, y: bool| x & !y),
        GreaterEqual => c!(|x: bool, y: bool| x >= y),
        _ => return Err(Error::Eval(format!("{} is not defined for bool", op.name()))),
    })
}

fn widen<H: BufferElement>(d: &Data, shape: &[usize], to: impl Fn(H) -> f32 + Sync + Send) -> Result<Data> {
    Ok(Data::from_vec(unary_map::<H, f32>(d, shape, to)?, shape))
}

/// An `f32` result converted back to half precision, into `dst` when it is an owned buffer that
/// fits (comparisons' bool results pass through).
fn narrow<H: BufferElement>(
    d: Data,
    shape: &[usize],
    dst: Option<Operand>,
    from: impl Fn(f32) -> H + Sync + Send,
) -> Result<Data> {
    match d.buf.dtype() {
        DType::F32 => convert_into::<f32, H>(&d, shape, dst, from),
        _ => Ok(d),
    }
}

impl Binary {
    /// The kernel; `a` or `b` may be an owned buffer (only offered when the output has the
    /// inputs' dtype and that input has the output's size) that receives the result.
    fn run(&self, a: In, b: In, dtype: DType, out: &[usize]) -> Result<Data> {
        let op = self.0;
        Ok(match dtype {
            DType::F32 => float_kernel::<f32>(op, a, b, out)?,
            DType::F64 => float_kernel::<f64>(op, a, b, out)?,
            DType::F16 => half::<f16>(op, a, b, out, f16::to_f32, f16::from_f32)?,
            DType::BF16 => half::<bf16>(op, a, b, out, bf16::to_f32, bf16::from_f32)?,
            DType::U8 => int_kernel::<u8>(op, a, b, out)?,
            DType::U32 => int_kernel::<u32>(op, a, b, out)?,
            DType::I32 => int_kernel::<i32>(op, a, b, out)?,
            DType::I64 => int_kernel::<i64>(op, a, b, out)?,
            DType::Bool => bool_kernel(op, a, b, out)?,
        })
    }
}

/// A half-precision binary op computed in `f32`: the `f32` kernel overwrites the widened
/// first input when it has the output's size, and the result is narrowed into an owned input.
fn half<H: BufferElement>(
    op: BinaryOp,
    a: In,
    b: In,
    out: &[usize],
    to: impl Fn(H) -> f32 + Sync + Send + Copy,
    from: impl Fn(f32) -> H + Sync + Send,
) -> Result<Data> {
    let (wa, wb) = (widen::<H>(a.0.data(), a.1, to)?, widen::<H>(b.0.data(), b.1, to)?);
    let r = float_kernel::<f32>(op, (Operand::Owned(wa), a.1), (Operand::View(&wb), b.1), out)?;
    let dst = match (a.0, b.0) {
        (Operand::Owned(d), _) if crate::shape::numel(a.1) == crate::shape::numel(out) => Some(dense(d, out)),
        (_, Operand::Owned(d)) if crate::shape::numel(b.1) == crate::shape::numel(out) => Some(dense(d, out)),
        _ => None,
    };
    narrow::<H>(r, out, dst.map(Operand::Owned), from)
}

pub(super) fn select_kernel(cond: (&Data, &[usize]), a: In, b: In, dtype: DType, out: &[usize]) -> Result<Data> {
    crate::dispatch_dtype!(dtype, T => select_apply::<T>(cond, a, b, out))
}

/// The buffer one of two element-wise operands gives to the output (see [`take_donation`]).
struct Donation {
    which: [usize; 2],
    donor: usize,
    data: Data,
}

/// The buffer of `inputs[which[0]]` or else `inputs[which[1]]`, if one of them can give it to
/// the output `out`.
fn take_donation(inputs: &mut [Array], which: [usize; 2], out: &Spec) -> Option<Donation> {
    let n = crate::shape::numel(&out.shape);
    which
        .iter()
        .enumerate()
        .find_map(|(donor, &i)| inputs[i].take_unique_data(out.dtype, n).map(|data| Donation { which, donor, data }))
}

impl Donation {
    /// The two operands in order: the donated buffer, and the other input read as a view.
    fn operands(self, inputs: &[Array]) -> Result<[Operand<'_>; 2]> {
        let other = Operand::View(inputs[self.which[1 - self.donor]].computed_data()?);
        let owned = Operand::Owned(self.data);
        Ok(if self.donor == 0 { [owned, other] } else { [other, owned] })
    }
}

/// The binary kernel of `op` on two operands of `dtype` (a fused group's step).
pub(super) fn binary_run(op: BinaryOp, a: In, b: In, dtype: DType, out: &[usize]) -> Result<Data> {
    Binary(op).run(a, b, dtype, out)
}

impl CpuKernel for Binary {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let (da, db) = (a.computed_data()?, b.computed_data()?);
        let ia = (Operand::View(da), a.shape());
        let ib = (Operand::View(db), b.shape());
        Ok(vec![self.run(ia, ib, a.dtype(), &outputs[0].shape)?])
    }

    fn eval_owned(&self, mut inputs: Vec<Array>, outputs: &[Spec]) -> Result<Vec<Data>> {
        let out = &outputs[0];
        let Some(donated) = take_donation(&mut inputs, [0, 1], out) else {
            return self.eval(&inputs, outputs);
        };
        let [ia, ib] = donated.operands(&inputs)?;
        let (a, b) = (&inputs[0], &inputs[1]);
        Ok(vec![self.run((ia, a.shape()), (ib, b.shape()), a.dtype(), &out.shape)?])
    }
}

impl CpuKernel for Select {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let (c, a, b) = (&inputs[0], &inputs[1], &inputs[2]);
        let (dc, da, db) = (c.computed_data()?, a.computed_data()?, b.computed_data()?);
        Ok(vec![select_kernel(
            (dc, c.shape()),
            (Operand::View(da), a.shape()),
            (Operand::View(db), b.shape()),
            a.dtype(),
            &outputs[0].shape,
        )?])
    }

    fn eval_owned(&self, mut inputs: Vec<Array>, outputs: &[Spec]) -> Result<Vec<Data>> {
        let out = &outputs[0];
        let Some(donated) = take_donation(&mut inputs, [1, 2], out) else {
            return self.eval(&inputs, outputs);
        };
        let [ia, ib] = donated.operands(&inputs)?;
        let (c, a, b) = (&inputs[0], &inputs[1], &inputs[2]);
        Ok(vec![select_kernel(
            (c.computed_data()?, c.shape()),
            (ia, a.shape()),
            (ib, b.shape()),
            a.dtype(),
            &out.shape,
        )?])
    }
}
