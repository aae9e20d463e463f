//! Reduction kernels over arbitrary axes of strided inputs.
use super::buffer::{BufferElement, Data};
use super::strided::for_each_row;
use super::sum::{sum_slice, SumAcc};
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
        } else if os == 1 && xs == 1 {
            // a dense row of the input into a dense row of accumulators (a sum over a leading
            // axis, as a bias gradient): slices, so the loop vectorises
            let (oi, xi) = (oi as usize, xi as usize);
            for (a, &v) in acc[oi..oi + n].iter_mut().zip(&src[xi..xi + n]) {
                *a = combine(*a, v);
            }
        } else {
            for i in 0..n as isize {
                let o = (oi + i * os) as usize;
                acc[o] = combine(acc[o], src[(xi + i * xs) as usize]);
            }
        }
    });
    acc
}

// ----- row kernels: the reduced (or scanned) axes moved last, one dense row per output ------

/// Element count above which row kernels split their rows over rayon's threads. Rows are
/// independent, so the result never depends on scheduling.
pub(crate) const ROW_PARALLEL_THRESHOLD: usize = 1 << 15;

/// The axes of `shape` reordered so that the `axes` come last (kept axes first, in order).
pub fn rows_permutation(ndim: usize, axes: &[usize]) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..ndim).filter(|a| !axes.contains(a)).collect();
    perm.extend_from_slice(axes);
    perm
}

/// The elements of `x` (of `shape`) with `axes` moved last, row-major: `numel / r` dense rows of
/// length `r` (the product of the extents of `axes`). Borrowed when no copy is needed.
pub fn rows_of<'a, T: BufferElement>(
    x: &'a Data,
    shape: &[usize],
    axes: &[usize],
) -> (std::borrow::Cow<'a, [T]>, usize) {
    let perm = rows_permutation(shape.len(), axes);
    let r: usize = axes.iter().map(|&a| shape[a]).product();
    let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let view = Data { buf: x.buf.clone(), strides: perm.iter().map(|&p| x.strides[p]).collect(), offset: x.offset };
    let rows = match view.to_contiguous::<T>(&pshape) {
        std::borrow::Cow::Owned(v) => std::borrow::Cow::Owned(v),
        // the permuted view is dense: borrow straight from the caller's buffer
        std::borrow::Cow::Borrowed(_) => {
            let n = numel(shape);
            std::borrow::Cow::Borrowed(&x.buf.as_slice::<T>()[x.offset..x.offset + n])
        }
    };
    (rows, r)
}

/// Wrap a result computed in the rows layout of [`rows_of`] (same `shape`, `axes`) as a view
/// with the original axis order (no copy: the strides are permuted back).
pub fn data_from_rows<T: BufferElement>(v: Vec<T>, shape: &[usize], axes: &[usize]) -> Data {
    let perm = rows_permutation(shape.len(), axes);
    let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let pstr = contiguous_strides(&pshape);
    let mut strides = pstr.clone();
    for (k, &p) in perm.iter().enumerate() {
        strides[p] = pstr[k];
    }
    Data { buf: std::sync::Arc::new(T::into_buffer(v)), strides, offset: 0 }
}

/// One value per row of length `r` (`n_rows` rows, possibly empty), in parallel for large inputs.
pub fn per_row<T: Sync, U: Send>(src: &[T], n_rows: usize, r: usize, f: impl Fn(&[T]) -> U + Sync + Send) -> Vec<U> {
    use rayon::prelude::*;
    if n_rows * r >= ROW_PARALLEL_THRESHOLD && n_rows > 1 {
        (0..n_rows).into_par_iter().map(|o| f(&src[o * r..o * r + r])).collect()
    } else {
        (0..n_rows).map(|o| f(&src[o * r..o * r + r])).collect()
    }
}

/// Map every row of length `r` to a row of the same length, in parallel for large inputs.
pub fn map_rows<T: Sync, U: Send + Default + Clone>(
    src: &[T],
    r: usize,
    f: impl Fn(&[T], &mut [U]) + Sync + Send,
) -> Vec<U> {
    use rayon::prelude::*;
    let mut out = vec![U::default(); src.len()];
    if r == 0 {
        return out;
    }
    if src.len() >= ROW_PARALLEL_THRESHOLD && src.len() > r {
        out.par_chunks_mut(r).zip(src.par_chunks(r)).for_each(|(o, s)| f(s, o));
    } else {
        out.chunks_mut(r).zip(src.chunks(r)).for_each(|(o, s)| f(s, o));
    }
    out
}

/// Index of the maximum (`is_max`) or minimum of a row: the first one on ties; a NaN wins
/// (the first NaN), as numpy. `0` for an empty row (callers forbid those).
pub fn arg_extremum<T: PartialOrd + Copy>(row: &[T], is_max: bool) -> u32 {
    let mut best = 0usize;
    let Some(&first) = row.first() else { return 0 };
    #[allow(clippy::eq_op)]
    let is_nan = |v: T| v != v;
    if is_nan(first) {
        return 0;
    }
    let mut bv = first;
    for (i, &v) in row.iter().enumerate().skip(1) {
        if is_nan(v) {
            return i as u32;
        }
        if if is_max { v > bv } else { v < bv } {
            best = i;
            bv = v;
        }
    }
    best as u32
}

/// Numerically stable `log(sum(exp(row)))`: `-inf` for an empty row or one of `-inf`s, `+inf`
/// if any element is `+inf`, NaN if any is NaN. The exponentials are summed pairwise
/// ([`sum_slice`](super::sum::sum_slice)).
pub fn logsumexp_row<A: super::math::Float + SumAcc>(row: &[A]) -> A {
    let mut m = A::NEG_INFINITY;
    for &v in row {
        m = m.max_nan(v);
    }
    let shift = if m.is_nan() || m.is_infinite() { A::ZERO } else { m };
    let s = sum_slice(row, &|v: A| (v - shift).exp());
    shift + s.ln()
}

/// Stable softmax of one row into `out`: max-subtract, exponentiate, sum (pairwise,
/// [`sum_slice`](super::sum::sum_slice)), then scale.
pub fn softmax_row<A: super::math::Float + SumAcc>(row: &[A], out: &mut [A]) {
    let mut m = A::NEG_INFINITY;
    for &v in row {
        m = m.max_nan(v);
    }
    for (o, &v) in out.iter_mut().zip(row) {
        *o = (v - m).exp();
    }
    let s = sum_slice(out, &|v: A| v);
    let inv = A::ONE / s;
    for o in out.iter_mut() {
        *o = *o * inv;
    }
}

/// Elements per block of [`scan_sum_row`]; a superblock is `SCAN_BLOCK` blocks.
pub const SCAN_BLOCK: usize = 256;

/// Cumulative sum of one row into `out`, from the end when `reverse`; an exclusive scan writes
/// the sum of the elements strictly before (after) each position.
///
/// Blocked, so that floats stay accurate over long rows: each output is `base + local`, where
/// `local` is the running sum inside the current block of [`SCAN_BLOCK`] elements (from zero)
/// and `base`, the sum of everything before the block, is the sum of the whole superblocks
/// before (`SCAN_BLOCK²` elements each, accumulated one superblock total at a time) plus the
/// previous blocks of the current superblock. An output thus goes through at most
/// `2·SCAN_BLOCK + n / SCAN_BLOCK² + 1` roundings instead of up to `n`: its error is
/// `O((512 + n/65536)·u)` relative to the sum of the magnitudes before it (`u` the unit
/// roundoff), against `O(n·u)` for a plain running sum. The order depends only on `n`. Integer
/// sums wrap, which is associative, so they equal a plain loop's.
#[allow(clippy::too_many_arguments)]
pub fn scan_sum_row<T: Copy, A: Copy>(
    row: &[T],
    out: &mut [T],
    zero: A,
    reverse: bool,
    inclusive: bool,
    to: impl Fn(T) -> A,
    from: impl Fn(A) -> T,
    add: impl Fn(A, A) -> A,
) {
    let n = row.len();
    let (mut sup, mut mid) = (zero, zero);
    let mut blocks = 0;
    let mut k0 = 0;
    while k0 < n {
        if blocks == SCAN_BLOCK {
            sup = add(sup, mid);
            mid = zero;
            blocks = 0;
        }
        let base = add(sup, mid);
        let k1 = (k0 + SCAN_BLOCK).min(n);
        let mut local = zero;
        for k in k0..k1 {
            let i = if reverse { n - 1 - k } else { k };
            let v = to(row[i]);
            if inclusive {
                local = add(local, v);
                out[i] = from(add(base, local));
            } else {
                out[i] = from(add(base, local));
                local = add(local, v);
            }
        }
        mid = add(mid, local);
        blocks += 1;
        k0 = k1;
    }
}

/// Cumulative combination of one row into `out`, from the end when `reverse`; an exclusive scan
/// writes the combination of the elements strictly before (after) each position.
#[allow(clippy::too_many_arguments)]
pub fn scan_row<T: Copy, A: Copy>(
    row: &[T],
    out: &mut [T],
    init: A,
    reverse: bool,
    inclusive: bool,
    to: impl Fn(T) -> A,
    from: impl Fn(A) -> T,
    op: impl Fn(A, A) -> A,
) {
    let n = row.len();
    let mut acc = init;
    for k in 0..n {
        let i = if reverse { n - 1 - k } else { k };
        if inclusive {
            acc = op(acc, to(row[i]));
            out[i] = from(acc);
        } else {
            out[i] = from(acc);
            acc = op(acc, to(row[i]));
        }
    }
}
