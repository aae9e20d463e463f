//! Element-wise kernels: unary maps and broadcasting binary/ternary maps over strided views,
//! with contiguous and scalar fast paths, split over rayon above a size threshold.
use super::buffer::{BufferElement, Data};
use super::strided::for_each_row;
use crate::shape::Strides;
use rayon::prelude::*;

/// Element count above which element-wise kernels split work over rayon's threads.
/// Below it, the cost of waking a second thread exceeds the work (measured on 2 cores).
pub const PARALLEL_THRESHOLD: usize = 1 << 16;
/// Fixed chunk size for parallel element-wise work (fixed so results never depend on scheduling).
const CHUNK: usize = 1 << 14;

/// Strides of an input of shape `in_shape` broadcast to `out_shape` (0 on broadcast axes).
pub fn broadcast_strides(in_shape: &[usize], in_strides: &[isize], out_shape: &[usize]) -> Strides {
    let n = out_shape.len();
    let off = n - in_shape.len();
    (0..n)
        .map(|i| if i < off || in_shape[i - off] == 1 && out_shape[i] != 1 { 0 } else { in_strides[i - off] })
        .collect()
}

/// Map a contiguous slice into a new vector, in parallel for large inputs.
#[inline]
pub fn map_slice<T: Copy + Send + Sync, U: Copy + Send + Sync + Default>(
    src: &[T],
    f: impl Fn(T) -> U + Sync + Send,
) -> Vec<U> {
    if src.len() >= PARALLEL_THRESHOLD {
        let mut out = vec![U::default(); src.len()];
        out.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(o, s)| {
            for (o, &s) in o.iter_mut().zip(s) {
                *o = f(s);
            }
        });
        out
    } else {
        src.iter().map(|&v| f(v)).collect()
    }
}

/// Apply `f` to every element of a (possibly strided) input; the result is contiguous.
pub fn unary_map<T: BufferElement, U: BufferElement>(
    x: &Data,
    shape: &[usize],
    f: impl Fn(T) -> U + Sync + Send,
) -> Vec<U> {
    if let Some(s) = x.contiguous_slice::<T>(shape) {
        return map_slice(s, f);
    }
    let src = x.buf.as_slice::<T>();
    let mut out = Vec::with_capacity(crate::shape::numel(shape));
    for_each_row(shape, [&x.strides], [x.offset as isize], |[o], n, [s]| {
        for i in 0..n as isize {
            out.push(f(src[(o + i * s) as usize]));
        }
    });
    out
}

/// Apply `f` element-wise to two inputs broadcast to `out_shape`; the result is contiguous.
pub fn binary_map<T: BufferElement, U: BufferElement>(
    a: &Data,
    a_shape: &[usize],
    b: &Data,
    b_shape: &[usize],
    out_shape: &[usize],
    f: impl Fn(T, T) -> U + Sync + Send,
) -> Vec<U> {
    let n = crate::shape::numel(out_shape);
    let an = crate::shape::numel(a_shape);
    let bn = crate::shape::numel(b_shape);
    let sa = a.contiguous_slice::<T>(a_shape);
    let sb = b.contiguous_slice::<T>(b_shape);
    match (sa, sb) {
        (Some(x), Some(y)) if an == n && bn == n => {
            if n >= PARALLEL_THRESHOLD {
                let mut out = vec![U::default(); n];
                out.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK))).for_each(|(o, (x, y))| {
                    for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                        *o = f(x, y);
                    }
                });
                return out;
            }
            return x.iter().zip(y).map(|(&x, &y)| f(x, y)).collect();
        }
        (Some(x), _) if an == n && bn == 1 => {
            let y = b.buf.as_slice::<T>()[b.offset];
            return map_slice(x, |x| f(x, y));
        }
        (_, Some(y)) if bn == n && an == 1 => {
            let x = a.buf.as_slice::<T>()[a.offset];
            return map_slice(y, |y| f(x, y));
        }
        _ => {}
    }
    let ast = broadcast_strides(a_shape, &a.strides, out_shape);
    let bst = broadcast_strides(b_shape, &b.strides, out_shape);
    let xa = a.buf.as_slice::<T>();
    let xb = b.buf.as_slice::<T>();
    let mut out = Vec::with_capacity(n);
    for_each_row(out_shape, [&ast, &bst], [a.offset as isize, b.offset as isize], |[oa, ob], len, [da, db]| {
        if da == 1 && db == 1 {
            let (oa, ob) = (oa as usize, ob as usize);
            out.extend(xa[oa..oa + len].iter().zip(&xb[ob..ob + len]).map(|(&x, &y)| f(x, y)));
        } else if da == 1 && db == 0 {
            let y = xb[ob as usize];
            out.extend(xa[oa as usize..oa as usize + len].iter().map(|&x| f(x, y)));
        } else if da == 0 && db == 1 {
            let x = xa[oa as usize];
            out.extend(xb[ob as usize..ob as usize + len].iter().map(|&y| f(x, y)));
        } else {
            for i in 0..len as isize {
                out.push(f(xa[(oa + i * da) as usize], xb[(ob + i * db) as usize]));
            }
        }
    });
    out
}

/// Apply `f` element-wise to three inputs broadcast to `out_shape` (used by `select`).
#[allow(clippy::too_many_arguments)]
pub fn ternary_map<A: BufferElement, T: BufferElement, U: BufferElement>(
    a: (&Data, &[usize]),
    b: (&Data, &[usize]),
    c: (&Data, &[usize]),
    out_shape: &[usize],
    f: impl Fn(A, T, T) -> U,
) -> Vec<U> {
    let ast = broadcast_strides(a.1, &a.0.strides, out_shape);
    let bst = broadcast_strides(b.1, &b.0.strides, out_shape);
    let cst = broadcast_strides(c.1, &c.0.strides, out_shape);
    let xa = a.0.buf.as_slice::<A>();
    let xb = b.0.buf.as_slice::<T>();
    let xc = c.0.buf.as_slice::<T>();
    let mut out = Vec::with_capacity(crate::shape::numel(out_shape));
    for_each_row(
        out_shape,
        [&ast, &bst, &cst],
        [a.0.offset as isize, b.0.offset as isize, c.0.offset as isize],
        |[oa, ob, oc], len, [da, db, dc]| {
            for i in 0..len as isize {
                out.push(f(xa[(oa + i * da) as usize], xb[(ob + i * db) as usize], xc[(oc + i * dc) as usize]));
            }
        },
    );
    out
}
