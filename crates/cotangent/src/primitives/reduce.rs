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
}

impl ReduceOp {
    /// Public name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
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

fn float_reduce<T: BufferElement, A: Copy + 'static>(
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
    A: std::ops::Add<Output = A> + std::ops::Mul<Output = A> + PartialOrd,
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
    };
    acc.into_iter().map(from).collect()
}

fn int_reduce<T: BufferElement + Ord>(op: ReduceOp, x: &Data, shape: &[usize], axes: &[usize], min: T, max: T) -> Vec<T>
where
    T: crate::dtype::Element,
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
                ReduceOp::Max | ReduceOp::Sum => {
                    Data::from_vec(reduce_axes::<bool, bool>(d, s, ax, false, |a, v| a | v), out)
                }
                ReduceOp::Min | ReduceOp::Prod => {
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
        }])
    }

    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let ax = axes[0].expect("batched input");
        let x = inputs[0].moveaxis(ax as isize, 0);
        let red: Vec<usize> = self.axes.iter().map(|&a| a + 1).collect();
        Ok((vec![crate::ops::reduce_keepdims(self.op, &x, red)], vec![Some(0)]))
    }
}
