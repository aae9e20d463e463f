//! Reductions over axes: one [`Reduce`] primitive with an op enum. The primitive's output keeps
//! the reduced axes (extent 1); the ops layer squeezes them unless `keepdims`.
use crate::primitive::{Op, Primitive};
use crate::{Array, Result};

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

impl Primitive for Reduce {
    fn op(&self) -> Op<'_> {
        Op::Reduce(self)
    }
    fn name(&self) -> &str {
        self.op.name()
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", self.op.name(), self.axes)
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
            // d prod / d x_i = the product of the others: exact also where x has zeros
            ReduceOp::Prod => c * prod_of_others(x, &self.axes),
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
            ReduceOp::Prod => (t * prod_of_others(x, &self.axes)).sum(&axes, true),
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

/// For every element of `x`, the product of the other elements of its group over `axes` (the
/// derivative of `prod` over `axes`), without dividing by it: the reduced axes are moved last
/// and flattened, and the product of the others is the exclusive product from the front times
/// the exclusive product from the back (as MLX). Exact where `x` has zeros; differentiable
/// again (through the scans' own rules).
fn prod_of_others(x: &Array, axes: &[usize]) -> Array {
    use crate::ops::reduce::scan;
    let nd = x.ndim();
    let kept: Vec<usize> = (0..nd).filter(|a| !axes.contains(a)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let moved = x.permute(&perm);
    let mut flat_shape: Vec<usize> = kept.iter().map(|&a| x.shape()[a]).collect();
    flat_shape.push(axes.iter().map(|&a| x.shape()[a]).product());
    let flat = moved.reshape_exact(&flat_shape);
    let last = kept.len();
    let others = scan(ScanOp::Prod, &flat, last, false, false) * scan(ScanOp::Prod, &flat, last, true, false);
    let mut inverse = vec![0; nd];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    others.reshape_exact(moved.shape()).permute(&inverse)
}

// ----- row reductions: argmax/argmin, logsumexp, softmax, cumulative scans -------------------

fn isize_axes(axes: &[usize]) -> Vec<isize> {
    axes.iter().map(|&a| a as isize).collect()
}

/// Move the batch axis of a vmapped input to the front.
fn batch_front(x: &Array, axes: &[Option<usize>]) -> Array {
    let ax = axes[0].expect("batched input");
    x.moveaxis(ax as isize, 0)
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
    fn op(&self) -> Op<'_> {
        Op::ArgReduce(self)
    }
    fn name(&self) -> &str {
        if self.op == ArgReduceOp::ArgMax {
            "argmax"
        } else {
            "argmin"
        }
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.name(), self.axis)
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
    fn op(&self) -> Op<'_> {
        Op::LogSumExp(self)
    }
    fn name(&self) -> &str {
        "logsumexp"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "logsumexp{:?}", self.axes)
    }
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>> {
        // d logsumexp / dx = softmax(x) = exp(x - logsumexp(x)): element-wise from the output
        // (kept dims), so it fuses with the cotangent's product and what follows
        Ok(vec![&cotangents[0] * (&primals[0] - &outputs[0]).exp()])
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        // the softmax as in the VJP: element-wise from the output, fused into the sum's operand
        let y = (&primals[0] - &outputs[0]).exp();
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
    fn op(&self) -> Op<'_> {
        Op::Softmax(self)
    }
    fn name(&self) -> &str {
        "softmax"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "softmax{:?}", self.axes)
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

/// Where the zeros of a cumulative product's input lie, for its exact rules.
struct ScanZeros {
    /// Positions before the first zero in scan order (where `x` is nonzero).
    before_first: Array,
    /// The position of the first zero in scan order.
    first: Array,
    /// `x` with its zeros replaced by one (a divisor that never produces inf or NaN, also in
    /// the derivatives of the branches `select` discards).
    safe_x: Array,
    /// The cumulative product with the first zero replaced by one.
    out_without_first: Array,
}

impl Scan {
    fn zeros(&self, x: &Array) -> ScanZeros {
        use crate::ops::reduce::scan;
        let is_zero = x.equal(0.0);
        // zeros up to and including each position, in scan order
        let count = scan(ScanOp::Sum, &is_zero.astype(crate::DType::I32), self.axis, self.reverse, true);
        let first = is_zero.logical_and(count.equal(1));
        let without_first = crate::ops::select(&first, 1.0, x);
        ScanZeros {
            before_first: count.equal(0),
            safe_x: crate::ops::select(&is_zero, 1.0, x),
            out_without_first: scan(ScanOp::Prod, &without_first, self.axis, self.reverse, self.inclusive),
            first,
        }
    }
}

impl Primitive for Scan {
    fn op(&self) -> Op<'_> {
        Op::Scan(self)
    }
    fn name(&self) -> &str {
        if self.op == ScanOp::Sum {
            "cumsum"
        } else {
            "cumprod"
        }
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}, reverse={}, inclusive={}]", self.name(), self.axis, self.reverse, self.inclusive)
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
            // d out_i / d x_j = the product of i's window without x_j (for j in the window)
            ScanOp::Prod => {
                let z = self.zeros(x);
                // before the first zero (in scan order) every factor is nonzero: out_i / x_j is
                // that product (and out_i = 0 for windows holding the zero); at the first zero,
                // the products of the windows with that zero replaced by one; after it, every
                // window holding x_j also holds the first zero: 0
                let before = back(&(c * out)) / &z.safe_x;
                let at_first = back(&(c * &z.out_without_first));
                crate::ops::select(&z.before_first, before, crate::ops::select(&z.first, at_first, 0.0))
            }
        }])
    }
    fn jvp(&self, primals: &[Array], tangents: &[Array], _argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let (x, t, out) = (&primals[0], &tangents[0], &outputs[0]);
        let fwd = |g: &Array| crate::ops::reduce::scan(ScanOp::Sum, g, self.axis, self.reverse, self.inclusive);
        Ok(vec![match self.op {
            ScanOp::Sum => fwd(t),
            ScanOp::Prod => {
                // a window without zeros: out_i · Σ t_j / x_j; one with zeros: only the first
                // zero's term survives, t_z times the window's product with x_z replaced by one
                let z = self.zeros(x);
                let zeros_in_window = fwd(&x.equal(0.0).astype(crate::DType::I32));
                let clean = out * fwd(&(t / &z.safe_x));
                let with_zero = fwd(&crate::ops::select(&z.first, t, 0.0)) * &z.out_without_first;
                crate::ops::select(&zeros_in_window.equal(0), clean, with_zero)
            }
        }])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let x = batch_front(&inputs[0], axes);
        Ok((vec![crate::ops::reduce::scan(self.op, &x, self.axis + 1, self.reverse, self.inclusive)], vec![Some(0)]))
    }
}
