//! Gather and scatter along one axis, over strided views, with any integer index dtype.
//!
//! Indices may be negative (counted from the end, as numpy); an index outside `[-n, n)` makes the
//! kernel return an error naming it (evaluation is lazy, so this is where it can be reported).
use super::buffer::{BufferElement, Data};
use super::strided::for_each_row;
use crate::shape::{contiguous_strides, Strides};
use half::{bf16, f16};

/// Element types that can be accumulated by `scatter_add` (integers wrap, bools or).
pub trait ScatterElement: BufferElement {
    /// `self + other`.
    fn accumulate(self, other: Self) -> Self;
}

macro_rules! scatter_int {
    ($($t:ty),*) => {$(impl ScatterElement for $t {
        #[inline(always)] fn accumulate(self, o: Self) -> Self { self.wrapping_add(o) }
    })*};
}
scatter_int!(u8, u32, i32, i64);
impl ScatterElement for f32 {
    #[inline(always)]
    fn accumulate(self, o: Self) -> Self {
        self + o
    }
}
impl ScatterElement for f64 {
    #[inline(always)]
    fn accumulate(self, o: Self) -> Self {
        self + o
    }
}
impl ScatterElement for f16 {
    #[inline(always)]
    fn accumulate(self, o: Self) -> Self {
        f16::from_f32(self.to_f32() + o.to_f32())
    }
}
impl ScatterElement for bf16 {
    #[inline(always)]
    fn accumulate(self, o: Self) -> Self {
        bf16::from_f32(self.to_f32() + o.to_f32())
    }
}
impl ScatterElement for bool {
    #[inline(always)]
    fn accumulate(self, o: Self) -> Self {
        self | o
    }
}

/// Normalise index `k` for an axis of extent `n`, or `None` when out of range.
#[inline(always)]
fn wrap(k: i64, n: usize) -> Option<usize> {
    let k = if k < 0 { k + n as i64 } else { k };
    if k < 0 || k >= n as i64 {
        None
    } else {
        Some(k as usize)
    }
}

/// The error of index `k` out of range; the node that ran the kernel adds its op and where it
/// was built (`take (src/main.rs:14:9): index 10 is out of range ...`).
fn range_error(k: i64, axis: usize, n: usize) -> crate::Error {
    crate::Error::Eval(format!("index {k} is out of range for axis {axis} of extent {n} (valid: -{n}..{n})"))
}

/// `out[.., j, ..] = x[.., idx[.., j, ..], ..]` along `axis`; `idx` has `x`'s rank and the same
/// extents on every other axis. The result is contiguous in `idx_shape`. An index out of range, or an output that
/// cannot be allocated, is an `Err`.
pub fn gather_along_axis<T: BufferElement, I: BufferElement>(
    x: &Data,
    x_shape: &[usize],
    idx: &Data,
    idx_shape: &[usize],
    axis: usize,
) -> crate::Result<Vec<T>> {
    let n = x_shape[axis];
    let xs = x.buf.as_slice::<T>();
    let is = idx.buf.as_slice::<I>();
    let ax_stride = x.strides[axis];
    let mut xstr: Strides = x.strides.clone();
    xstr[axis] = 0;
    let mut out = super::buffer::try_with_capacity(crate::shape::numel(idx_shape))?;
    let mut bad: Option<i64> = None;
    for_each_row(
        idx_shape,
        [&xstr, &idx.strides],
        [x.offset as isize, idx.offset as isize],
        |[xo, io], len, [xd, id]| {
            for i in 0..len as isize {
                let k = is[(io + i * id) as usize].to_i64();
                match wrap(k, n) {
                    Some(k) => out.push(xs[(xo + i * xd + k as isize * ax_stride) as usize]),
                    None => {
                        bad.get_or_insert(k);
                        out.push(T::default());
                    }
                }
            }
        },
    );
    match bad {
        Some(k) => Err(range_error(k, axis, n)),
        None => Ok(out),
    }
}

/// A contiguous copy of `x` into which `updates[.., j, ..]` is combined at
/// `[.., idx[.., j, ..], ..]` along `axis` with `combine(old, update)`, in row-major order of
/// `idx` (so with `put`, the last duplicate wins). `updates` has `idx_shape`.
#[allow(clippy::too_many_arguments)]
pub fn scatter_along_axis<T: BufferElement, I: BufferElement>(
    x: &Data,
    x_shape: &[usize],
    idx: &Data,
    idx_shape: &[usize],
    updates: &Data,
    axis: usize,
    combine: impl Fn(T, T) -> T,
) -> crate::Result<Vec<T>> {
    let n = x_shape[axis];
    let mut out = x.try_to_vec::<T>(x_shape)?;
    let is = idx.buf.as_slice::<I>();
    let us = updates.buf.as_slice::<T>();
    let mut ostr = contiguous_strides(x_shape);
    let ax_stride = ostr[axis];
    ostr[axis] = 0;
    let mut bad: Option<i64> = None;
    for_each_row(
        idx_shape,
        [&ostr, &idx.strides, &updates.strides],
        [0, idx.offset as isize, updates.offset as isize],
        |[oo, io, uo], len, [od, id, ud]| {
            for i in 0..len as isize {
                let k = is[(io + i * id) as usize].to_i64();
                match wrap(k, n) {
                    Some(k) => {
                        let o = (oo + i * od + k as isize * ax_stride) as usize;
                        out[o] = combine(out[o], us[(uo + i * ud) as usize]);
                    }
                    None => {
                        bad.get_or_insert(k);
                    }
                }
            }
        },
    );
    match bad {
        Some(k) => Err(range_error(k, axis, n)),
        None => Ok(out),
    }
}
