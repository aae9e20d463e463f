//! Reductions over axes: one [`Reduce`] primitive with an op enum. The primitive's output keeps
//! the reduced axes (extent 1); the ops layer squeezes them unless `keepdims`.
use crate::backend::cpu::buffer::BufferElement;
use crate::backend::cpu::reduce::reduce_axes;
use crate::backend::cpu::Data;
use crate::primitive::{Primitive, Spec};
use crate::{Array, DType, Error, Result};
use half::{bf16, f16};

/// The reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    /// Logical and of booleans (the ops layer casts to bool first); `true` over no elements.
    All,
    /// Logical or of booleans; `false` over no elements.
    Any,
}

impl ReduceOp {
    /// Public name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::All => "all",
            ReduceOp::Any => "any",
        }
    }
}

/// A reduction over `axes` (sorted, distinct, normalised), keeping them as unit axes.
#[derive(Debug, Clone)]
pub struct Reduce {
    /// Which reduction.
    pub op: ReduceOp,
    /// The reduced axes.
    pub axes: Vec<usize>,
}

#[allow(clippy::too_many_arguments, clippy::eq_op)]
fn float_reduce<T: BufferElement, A>(
    op: ReduceOp,
    x: &Data,
    shape: &[usize],
    axes: &[usize],
    to: impl Fn(T) -> A,
    from: impl Fn(A) -> T,
    zero: A,
    one: A,
    ninf: A,
    pinf: A,
) -> Vec<T>
where
    A: Copy + 'static + std::ops::Add<Output = A> + std::ops::Mul<Output = A> + PartialOrd,
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
        ReduceOp::Sum => reduce_axes::<T, A>(x, shape, axes, zero, |a, v| a + to(v)),
        ReduceOp::Prod => reduce_axes::<T, A>(x, shape, axes, one, |a, v| a * to(v)),
        ReduceOp::Max => reduce_axes::<T, A>(x, shape, axes, ninf, |a, v| nan_max(a, to(v))),
        ReduceOp::Min => reduce_axes::<T, A>(x, shape, axes, pinf, |a, v| nan_min(a, to(v))),
        ReduceOp::All | ReduceOp::Any => unreachable!("all/any take bool inputs"),
    };
    acc.into_iter().map(from).collect()
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

impl Primitive for Reduce {
    fn name(&self) -> String {
        format!("{}{:?}", self.op.name(), self.axes)
    }

    fn eval_cpu(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let (s, ax, op) = (x.shape(), &self.axes[..], self.op);
        let out = &outputs[0].shape;
        if matches!(op, ReduceOp::All | ReduceOp::Any) && x.dtype() != DType::Bool {
            return Err(Error::Eval(format!("{}: needs a bool input, got {}", self.name(), x.dtype())));
        }
        let r = match x.dtype() {
            DType::F32 => Data::from_vec(
                float_reduce::<f32, f32>(op, d, s, ax, |v| v, |v| v, 0.0, 1.0, f32::NEG_INFINITY, f32::INFINITY),
                out,
            ),
            DType::F64 => Data::from_vec(
                float_reduce::<f64, f64>(op, d, s, ax, |v| v, |v| v, 0.0, 1.0, f64::NEG_INFINITY, f64::INFINITY),
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
                    0.0,
                    1.0,
                    f32::NEG_INFINITY,
                    f32::INFINITY,
                ),
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
                    0.0,
                    1.0,
                    f32::NEG_INFINITY,
                    f32::INFINITY,
                ),
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

    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let x = &primals[0];
        let c = &cotangents[0];
        let out = &outputs[0];
        Ok(vec![match self.op {
            ReduceOp::Sum => c.broadcast_to(x.shape()),
            ReduceOp::Prod => {
                // d prod / d x_i = prod / x_i (exact only where x_i != 0, as MLX and JAX's fast path)
                (c * out).broadcast_to(x.shape()) / x
            }
            ReduceOp::Max | ReduceOp::Min => {
                // split the cotangent evenly between tied extrema
                let mask = x.equal(out).astype(x.dtype());
                let count = mask.sum(&self.axes.iter().map(|&a| a as isize).collect::<Vec<_>>(), true);
                c * mask / count
            }
            ReduceOp::All | ReduceOp::Any => crate::ops::zeros_like(x),
        }])
    }

    fn jvp(&self, primals: &[Array], tangents: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let x = &primals[0];
        let t = &tangents[0];
        let out = &outputs[0];
        let axes: Vec<isize> = self.axes.iter().map(|&a| a as isize).collect();
        Ok(vec![match self.op {
            ReduceOp::Sum => t.sum(&axes, true),
            ReduceOp::Prod => (t / x * out).sum(&axes, true),
            ReduceOp::Max | ReduceOp::Min => {
                let mask = x.equal(out).astype(x.dtype());
                (t * &mask).sum(&axes, true) / mask.sum(&axes, true)
            }
            ReduceOp::All | ReduceOp::Any => crate::ops::zeros_like(out),
        }])
    }

    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let ax = axes[0].expect("batched input");
        let x = inputs[0].moveaxis(ax as isize, 0);
        let red: Vec<usize> = self.axes.iter().map(|&a| a + 1).collect();
        Ok((vec![crate::ops::reduce_keepdims(self.op, &x, red)], vec![Some(0)]))
    }
}

// ----- row reductions: argmax/argmin, logsumexp, softmax, cumulative scans -------------------

use crate::backend::cpu::reduce::{
    arg_extremum, data_from_rows, logsumexp_row, map_rows, per_row, rows_of, scan_row, softmax_row,
};

fn isize_axes(axes: &[usize]) -> Vec<isize> {
    axes.iter().map(|&a| a as isize).collect()
}

/// Move the batch axis of a vmapped input to the front.
fn batch_front(x: &Array, axes: &[Option<usize>]) -> Array {
    let ax = axes[0].expect("batched input");
    x.moveaxis(ax as isize, 0)
}

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

/// Which extremum an [`ArgReduce`] looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgReduceOp {
    /// Index of the maximum.
    ArgMax,
    /// Index of the minimum.
    ArgMin,
}

/// Index (`u32`) of the maximum or minimum along `axis`, which is kept with extent 1. Ties give
/// the first index; a NaN wins over every number (the first NaN), as numpy. Not differentiable.
#[derive(Debug, Clone)]
pub struct ArgReduce {
    /// Which extremum.
    pub op: ArgReduceOp,
    /// The reduced axis.
    pub axis: usize,
}

impl Primitive for ArgReduce {
    fn name(&self) -> String {
        let n = if self.op == ArgReduceOp::ArgMax { "argmax" } else { "argmin" };
        format!("{n}[{}]", self.axis)
    }
    fn eval_cpu(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
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
    fn vjp(&self, primals: &[Array], _c: &[Array], _argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::zeros_like(&primals[0])])
    }
    fn jvp(&self, _p: &[Array], _t: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::zeros_like(&outputs[0])])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let x = batch_front(&inputs[0], axes);
        Ok((vec![crate::ops::reduce::arg_reduce_keepdims(self.op, &x, self.axis + 1)], vec![Some(0)]))
    }
}

/// `log(sum(exp(x)))` over `axes` (kept with extent 1), computed stably in one fused pass per
/// row (max-shifted). Float inputs only.
#[derive(Debug, Clone)]
pub struct LogSumExp {
    /// The reduced axes (sorted, distinct).
    pub axes: Vec<usize>,
}

impl Primitive for LogSumExp {
    fn name(&self) -> String {
        format!("logsumexp{:?}", self.axes)
    }
    fn eval_cpu(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
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
    fn vjp(&self, primals: &[Array], cotangents: &[Array], _argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        // d logsumexp / dx = softmax(x)
        let y = crate::ops::reduce::softmax_axes(&primals[0], self.axes.clone());
        Ok(vec![&cotangents[0] * y])
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], _argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        let y = crate::ops::reduce::softmax_axes(&primals[0], self.axes.clone());
        Ok(vec![(&tangents[0] * y).sum(&isize_axes(&self.axes), true)])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let x = batch_front(&inputs[0], axes);
        let red = self.axes.iter().map(|&a| a + 1).collect();
        Ok((vec![crate::ops::reduce::logsumexp_keepdims(&x, red)], vec![Some(0)]))
    }
}

/// `exp(x - max) / sum(exp(x - max))` over `axes`, fused: one pass per row computes the max,
/// then exponentials and their sum, then scales. The result has the input's shape (a view with
/// the input's axis order over a buffer laid out with the softmax axes last). Float inputs only.
#[derive(Debug, Clone)]
pub struct Softmax {
    /// The normalised axes (sorted, distinct).
    pub axes: Vec<usize>,
}

impl Primitive for Softmax {
    fn name(&self) -> String {
        format!("softmax{:?}", self.axes)
    }
    fn eval_cpu(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let d = x.computed_data()?;
        let (shape, axes) = (x.shape(), &self.axes[..]);
        float_rows!(x, d, axes, |rows, r, A| map_rows(rows, r, softmax_row::<A>), |v| data_from_rows(v, shape, axes))
            .map_err(|e: Error| Error::Eval(format!("{}: {e}", self.name())))
            .map(|d| vec![d])
    }
    fn vjp(&self, _p: &[Array], cotangents: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let (y, c) = (&outputs[0], &cotangents[0]);
        Ok(vec![y * (c - (c * y).sum(&isize_axes(&self.axes), true))])
    }
    fn jvp(&self, _p: &[Array], tangents: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let (y, t) = (&outputs[0], &tangents[0]);
        Ok(vec![y * (t - (t * y).sum(&isize_axes(&self.axes), true))])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let x = batch_front(&inputs[0], axes);
        let red = self.axes.iter().map(|&a| a + 1).collect();
        Ok((vec![crate::ops::reduce::softmax_axes(&x, red)], vec![Some(0)]))
    }
}

/// Which cumulative combination a [`Scan`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanOp {
    /// Running sum.
    Sum,
    /// Running product.
    Prod,
}

/// Cumulative sum or product along `axis`; `reverse` runs from the end, an exclusive scan
/// (`inclusive == false`) leaves out the element itself (starting from 0 or 1). Integers
/// accumulate in `i64` (wrapping), `f16`/`bf16` in `f32`.
#[derive(Debug, Clone)]
pub struct Scan {
    /// Sum or product.
    pub op: ScanOp,
    /// The scanned axis.
    pub axis: usize,
    /// Scan from the last element to the first.
    pub reverse: bool,
    /// Include each element in its own output.
    pub inclusive: bool,
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
            ScanOp::Sum => map_rows(&rows, r, |row, out| scan_row(row, out, zero, rev, inc, &to, &from, &add)),
            ScanOp::Prod => map_rows(&rows, r, |row, out| scan_row(row, out, one, rev, inc, &to, &from, &mul)),
        };
        Ok(data_from_rows(v, x.shape(), &axes))
    }
}

fn id<T>(v: T) -> T {
    v
}

impl Primitive for Scan {
    fn name(&self) -> String {
        let n = if self.op == ScanOp::Sum { "cumsum" } else { "cumprod" };
        format!("{n}[{}, reverse={}, inclusive={}]", self.axis, self.reverse, self.inclusive)
    }
    fn eval_cpu(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
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
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let (x, c, out) = (&primals[0], &cotangents[0], &outputs[0]);
        let back = |g: &Array| crate::ops::reduce::scan(ScanOp::Sum, g, self.axis, !self.reverse, self.inclusive);
        Ok(vec![match self.op {
            // the transpose of a running sum is the running sum the other way
            ScanOp::Sum => back(c),
            // d out_i / d x_j = out_i / x_j for every j in i's window: exact where x_j != 0
            // (a zero x_j gives inf/NaN there, as the division formula in JAX's fast path)
            ScanOp::Prod => back(&(c * out)) / x,
        }])
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let (x, t, out) = (&primals[0], &tangents[0], &outputs[0]);
        let fwd = |g: &Array| crate::ops::reduce::scan(ScanOp::Sum, g, self.axis, self.reverse, self.inclusive);
        Ok(vec![match self.op {
            ScanOp::Sum => fwd(t),
            ScanOp::Prod => out * fwd(&(t / x)),
        }])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let x = batch_front(&inputs[0], axes);
        Ok((vec![crate::ops::reduce::scan(self.op, &x, self.axis + 1, self.reverse, self.inclusive)], vec![Some(0)]))
    }
}
