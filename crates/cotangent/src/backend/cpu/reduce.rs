//! Reduction kernels over arbitrary axes of strided inputs.
use super::buffer::{BufferElement, Data};
use super::strided::for_each_row;
use crate::shape::{contiguous_strides, numel};

/// Reduce the axes where `out_shape` (same rank as `shape`, keepdims) has extent 1 and `shape`
/// does not... or every axis listed in `axes`. The accumulator starts at `init` and takes each
/// element with `combine`; the result is contiguous in the keepdims shape.
pub fn reduce_axes<T: BufferElement, A: Copy>(
    x: &Data,
    shape: &[usize],
    axes: &[usize],
    init: A,
    combine: impl Fn(A, T) -> A,
) -> Vec<A> {
    let out_shape: Vec<usize> = shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let n_out = numel(&out_shape);
    let mut acc = vec![init; n_out];
    if numel(shape) == 0 {
        return acc;
    }
    let src = x.buf.as_slice::<T>();
    // contiguous input reduced over trailing axes: one dense row per output element
    let trailing = axes.iter().all(|&a| a + axes.len() >= shape.len()) && x.is_contiguous(shape);
    if trailing {
        let r = numel(shape) / n_out;
        let base = &src[x.offset..x.offset + numel(shape)];
        for (o, row) in acc.iter_mut().zip(base.chunks_exact(r)) {
            let mut a = *o;
            for &v in row {
                a = combine(a, v);
            }
            *o = a;
        }
        return acc;
    }
    // general: walk the input in its own order, accumulating into the output (stride 0 on
    // reduced axes)
    let ostr = contiguous_strides(&out_shape);
    let ostr: Vec<isize> = ostr.iter().enumerate().map(|(i, &s)| if axes.contains(&i) { 0 } else { s }).collect();
    for_each_row(shape, [&x.strides, &ostr], [x.offset as isize, 0], |[xi, oi], n, [xs, os]| {
        if os == 0 {
            let mut a = acc[oi as usize];
            for i in 0..n as isize {
                a = combine(a, src[(xi + i * xs) as usize]);
            }
            acc[oi as usize] = a;
        } else {
            for i in 0..n as isize {
                let o = (oi + i * os) as usize;
                acc[o] = combine(acc[o], src[(xi + i * xs) as usize]);
            }
        }
    });
    acc
}
