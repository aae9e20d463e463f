//! CPU kernels of the reduce primitives (see `crate::primitives::reduce` for their rules).
use super::CpuKernel;
use crate::backend::cpu::buffer::BufferElement;
use crate::backend::cpu::reduce::reduce_axes;
use crate::backend::cpu::reduce::{
    arg_extremum, data_from_rows, logsumexp_row, map_rows, per_row, rows_of, scan_row, scan_sum_row, softmax_row,
};
use crate::backend::cpu::sum::{sum_axes, SumAcc};
use crate::backend::cpu::Data;
use crate::primitive::{Primitive, Spec};
#[allow(unused_imports)]
use crate::primitives::reduce::*;
use crate::{Array, DType, Error, Result};
use half::{bf16, f16};

/// Run `f32`/`f64` row kernels on a float input, computing `f16`/`bf16` through `f32`.
/// `rows` gets the row-major rows (reduced axes last) and the row length.
macro_rules! float_rows {
    ($x:expr, $d:expr, $axes:expr, |$rows:ident, $r:ident, $ty:ident| $body:expr, |$v:ident| $back:expr) => {{
        let (x, d, axes): (&Array, &Data, &[usize]) = ($x, $d, $axes);
        match x.dtype() {
            DType::F32 => {
                type $ty = f32;
                let (rows, $r) = rows_of::<f32>(d, x.shape(), axes);
                let $rows: &[f32] = &rows;
                let $v = $body;
                Ok($back)
            }
            DType::F64 => {
                type $ty = f64;
                let (rows, $r) = rows_of::<f64>(d, x.shape(), axes);
                let $rows: &[f64] = &rows;
                let $v = $body;
                Ok($back)
            }
            DType::F16 => {
                type $ty = f32;
                let (rows, $r) = rows_of::<f16>(d, x.shape(), axes);
                let wide: Vec<f32> = rows.iter().map(|v| v.to_f32()).collect();
                let $rows: &[f32] = &wide;
                let $v: Vec<f16> = $body.into_iter().map(f16::from_f32).collect();
                Ok($back)
            }
            DType::BF16 => {
                type $ty = f32;
                let (rows, $r) = rows_of::<bf16>(d, x.shape(), axes);
                let wide: Vec<f32> = rows.iter().map(|v| v.to_f32()).collect();
                let $rows: &[f32] = &wide;
                let $v: Vec<bf16> = $body.into_iter().map(bf16::from_f32).collect();
                Ok($back)
            }
            other => Err(Error::Eval(format!("needs a float input, got {other}"))),
        }
    }};
}

#[allow(clippy::too_many_arguments, clippy::eq_op)]
fn float_reduce<T: BufferElement, A>(
    op: ReduceOp,
    x: &Data,
    shape: &[usize],
    axes: &[usize],
    to: impl Fn(T) -> A + Sync + Send,
    from: impl Fn(A) -> T + Sync + Send,
    one: A,
    ninf: A,
    pinf: A,
) -> Result<Vec<T>>
where
    A: SumAcc + std::ops::Mul<Output = A> + PartialOrd,
{
    let nan_max = |a: A, v: A| {
        if a != a || v != v {
            if a != a {
                a
            } else {
                v
            }
        } else if v > a {
            v
        } else {
            a
        }
    };
    let nan_min = |a: A, v: A| {
        if a != a || v != v {
            if a != a {
                a
            } else {
                v
            }
        } else if v < a {
            v
        } else {
            a
        }
    };
    let acc: Vec<A> = match op {
        // blocked pairwise, in an order fixed by the shape (`backend::cpu::sum`)
        ReduceOp::Sum => return sum_axes::<T, A>(x, shape, axes, to, from),
        ReduceOp::Prod => reduce_axes::<T, A>(x, shape, axes, one, |a, v| a * to(v)),
        ReduceOp::Max => reduce_axes::<T, A>(x, shape, axes, ninf, |a, v| nan_max(a, to(v))),
        ReduceOp::Min => reduce_axes::<T, A>(x, shape, axes, pinf, |a, v| nan_min(a, to(v))),
        ReduceOp::All | ReduceOp::Any => unreachable!("all/any take bool inputs"),
    };
    Ok(acc.into_iter().map(from).collect())
}

fn int_reduce<T>(op: ReduceOp, x: &Data, shape: &[usize], axes: &[usize], min: T, max: T) -> Vec<T>
where
    T: BufferElement + Ord,
{
    match op {
        ReduceOp::Sum => reduce_axes::<T, i64>(x, shape, axes, 0, |a, v| a.wrapping_add(v.to_i64()))
            .into_iter()
            .map(T::from_i64)
            .collect(),
        ReduceOp::Prod => reduce_axes::<T, i64>(x, shape, axes, 1, |a, v| a.wrapping_mul(v.to_i64()))
            .into_iter()
            .map(T::from_i64)
            .collect(),
        ReduceOp::Max => reduce_axes::<T, T>(x, shape, axes, min, |a, v| a.max(v)),
        ReduceOp::Min => reduce_axes::<T, T>(x, shape, axes, max, |a, v| a.min(v)),
        ReduceOp::All | ReduceOp::Any => unreachable!("all/any take bool inputs"),
    }
}

impl Scan {
    #[allow(clippy::too_many_arguments)]
    fn kernel<T: BufferElement, A: Copy + Send + Sync>(
        &self,
        x: &Array,
        to: impl Fn(T) -> A + Sync + Send,
        from: impl Fn(A) -> T + Sync + Send,
        zero: A,
        one: A,
        add: impl Fn(A, A) -> A + Sync + Send,
        mul: impl Fn(A, A) -> A + Sync + Send,
    ) -> Result<Data> {
        let d = x.computed_data()?;
        let axes = [self.axis];
        let (rows, r) = rows_of::<T>(d, x.shape(), &axes);
        let (rev, inc) = (self.reverse, self.inclusive);
        let v = match self.op {
            ScanOp::Sum => map_rows(&rows, r, |row, out| scan_sum_row(row, out, zero, rev, inc, &to, &from, &add)),
            ScanOp::Prod => map_rows(&rows, r, |row, out| scan_row(row, out, one, rev, inc, &to, &from, &mul)),
        };
        Ok(data_from_rows(v, x.shape(), &axes))
    }
}

fn id<T>(v: T) -> T {
    v
}

impl CpuKernel for Reduce {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let (s, ax, op) = (x.shape(), &self.axes[..], self.op);
        let out = &outputs[0].shape;
        if matches!(op, ReduceOp::All | ReduceOp::Any) && x.dtype() != DType::Bool {
            return Err(Error::Eval(format!("{}: needs a bool input, got {}", self.name(), x.dtype())));
        }
        let r = match x.dtype() {
            DType::F32 => Data::from_vec(
                float_reduce::<f32, f32>(op, d, s, ax, |v| v, |v| v, 1.0, f32::NEG_INFINITY, f32::INFINITY)?,
                out,
            ),
            DType::F64 => Data::from_vec(
                float_reduce::<f64, f64>(op, d, s, ax, |v| v, |v| v, 1.0, f64::NEG_INFINITY, f64::INFINITY)?,
                out,
            ),
            DType::F16 => Data::from_vec(
                float_reduce::<f16, f32>(
                    op,
                    d,
                    s,
                    ax,
                    f16::to_f32,
                    f16::from_f32,
                    1.0,
                    f32::NEG_INFINITY,
                    f32::INFINITY,
                )?,
                out,
            ),
            DType::BF16 => Data::from_vec(
                float_reduce::<bf16, f32>(
                    op,
                    d,
                    s,
                    ax,
                    bf16::to_f32,
                    bf16::from_f32,
                    1.0,
                    f32::NEG_INFINITY,
                    f32::INFINITY,
                )?,
                out,
            ),
            DType::U8 => Data::from_vec(int_reduce::<u8>(op, d, s, ax, u8::MIN, u8::MAX), out),
            DType::U32 => Data::from_vec(int_reduce::<u32>(op, d, s, ax, u32::MIN, u32::MAX), out),
            DType::I32 => Data::from_vec(int_reduce::<i32>(op, d, s, ax, i32::MIN, i32::MAX), out),
            DType::I64 => Data::from_vec(int_reduce::<i64>(op, d, s, ax, i64::MIN, i64::MAX), out),
            DType::Bool => match op {
                ReduceOp::Max | ReduceOp::Sum | ReduceOp::Any => {
                    Data::from_vec(reduce_axes::<bool, bool>(d, s, ax, false, |a, v| a | v), out)
                }
                ReduceOp::Min | ReduceOp::Prod | ReduceOp::All => {
                    Data::from_vec(reduce_axes::<bool, bool>(d, s, ax, true, |a, v| a & v), out)
                }
            },
        };
        if outputs[0].dtype != x.dtype() {
            return Err(Error::Eval(format!("{}: output dtype mismatch", self.name())));
        }
        Ok(vec![r])
    }
}

impl CpuKernel for ArgReduce {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let n_out = crate::shape::numel(&outputs[0].shape);
        let is_max = self.op == ArgReduceOp::ArgMax;
        let v: Vec<u32> = crate::dispatch_dtype!(x.dtype(), T => {
            let (rows, r) = rows_of::<T>(d, x.shape(), &[self.axis]);
            per_row(&rows, n_out, r, |row| arg_extremum(row, is_max))
        });
        Ok(vec![Data::from_vec(v, &outputs[0].shape)])
    }
}

impl CpuKernel for LogSumExp {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let out = &outputs[0].shape;
        let n_out = crate::shape::numel(out);
        float_rows!(x, d, &self.axes, |rows, r, A| per_row(rows, n_out, r, logsumexp_row::<A>), |v| Data::from_vec(
            v, out
        ))
        .map_err(|e: Error| Error::Eval(format!("{}: {e}", self.name())))
        .map(|d| vec![d])
    }
}

impl CpuKernel for Softmax {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let (shape, axes) = (x.shape(), &self.axes[..]);
        float_rows!(x, d, axes, |rows, r, A| map_rows(rows, r, softmax_row::<A>), |v| data_from_rows(v, shape, axes))
            .map_err(|e: Error| Error::Eval(format!("{}: {e}", self.name())))
            .map(|d| vec![d])
    }
}

impl CpuKernel for Scan {
    fn eval(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        macro_rules! ints {
            ($t:ty) => {
                self.kernel::<$t, i64>(
                    x,
                    |v| v as i64,
                    |v| v as $t,
                    0,
                    1,
                    |a, b| a.wrapping_add(b),
                    |a, b| a.wrapping_mul(b),
                )
            };
        }
        let d = match x.dtype() {
            DType::F32 => self.kernel::<f32, f32>(x, id, id, 0.0, 1.0, |a, b| a + b, |a, b| a * b),
            DType::F64 => self.kernel::<f64, f64>(x, id, id, 0.0, 1.0, |a, b| a + b, |a, b| a * b),
            DType::F16 => self.kernel::<f16, f32>(x, f16::to_f32, f16::from_f32, 0.0, 1.0, |a, b| a + b, |a, b| a * b),
            DType::BF16 => {
                self.kernel::<bf16, f32>(x, bf16::to_f32, bf16::from_f32, 0.0, 1.0, |a, b| a + b, |a, b| a * b)
            }
            DType::U8 => ints!(u8),
            DType::U32 => ints!(u32),
            DType::I32 => ints!(i32),
            DType::I64 => ints!(i64),
            DType::Bool => Err(Error::Eval(format!("{}: bool input (the op casts to int32 first)", self.name()))),
        }?;
        Ok(vec![d])
    }
}
