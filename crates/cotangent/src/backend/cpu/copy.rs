//! Copy kernels: concatenation along an axis and strided writes into a dense buffer (the
//! kernel behind slice updates and padding).
use super::buffer::{try_with_capacity, BufferElement, Data};
use super::strided::for_each_row;
use crate::shape::numel;

/// Concatenate the (possibly strided) `parts` along `axis` into a dense buffer of `out_shape`.
/// Every part has `out_shape` except along `axis`. `Err(Error::OutOfMemory)` when the output
/// (or a dense copy of a part) cannot be allocated.
pub fn concatenate<T: BufferElement>(
    parts: &[(&Data, &[usize])],
    axis: usize,
    out_shape: &[usize],
) -> crate::Result<Vec<T>> {
    let n = numel(out_shape);
    let mut out = try_with_capacity(n)?;
    if n == 0 {
        return Ok(out);
    }
    let outer: usize = numel(&out_shape[..axis]);
    let inner: usize = numel(&out_shape[axis + 1..]);
    let dense: Vec<std::borrow::Cow<'_, [T]>> =
        parts.iter().map(|(d, s)| d.try_to_contiguous::<T>(s)).collect::<crate::Result<_>>()?;
    for o in 0..outer {
        for (p, (_, s)) in dense.iter().zip(parts) {
            let chunk = s[axis] * inner;
            out.extend_from_slice(&p[o * chunk..(o + 1) * chunk]);
        }
    }
    debug_assert_eq!(out.len(), n);
    Ok(out)
}

/// Combine the elements of `src` (a strided view of shape `shape`) into `out` at the positions
/// `out_offset + Σ i_k · out_strides[k]` (strides may be negative) with `combine(out, src)`.
#[inline]
fn scatter_strided_with<T: BufferElement>(
    out: &mut [T],
    out_offset: isize,
    out_strides: &[isize],
    src: &Data,
    shape: &[usize],
    combine: impl Fn(&mut T, T),
) {
    let s = src.buf.as_slice::<T>();
    for_each_row(shape, [out_strides, &src.strides], [out_offset, src.offset as isize], |[o, i], n, [so, si]| {
        if so == 1 && si == 1 {
            let (o, i) = (o as usize, i as usize);
            out[o..o + n].iter_mut().zip(&s[i..i + n]).for_each(|(y, &x)| combine(y, x));
        } else {
            for k in 0..n as isize {
                combine(&mut out[(o + k * so) as usize], s[(i + k * si) as usize]);
            }
        }
    });
}

/// Write the elements of `src` (a strided view of shape `shape`) into `out` at the positions
/// `out_offset + Σ i_k · out_strides[k]` (strides may be negative).
pub fn scatter_strided<T: BufferElement>(
    out: &mut [T],
    out_offset: isize,
    out_strides: &[isize],
    src: &Data,
    shape: &[usize],
) {
    scatter_strided_with(out, out_offset, out_strides, src, shape, |y, x| *y = x);
}

/// Add the elements of `src` (a strided view of shape `shape`) into `out` at the positions
/// `out_offset + Σ i_k · out_strides[k]` (strides may be negative).
pub fn scatter_add_strided<T: BufferElement + std::ops::Add<Output = T>>(
    out: &mut [T],
    out_offset: isize,
    out_strides: &[isize],
    src: &Data,
    shape: &[usize],
) {
    scatter_strided_with(out, out_offset, out_strides, src, shape, |y, x| *y = *y + x);
}
