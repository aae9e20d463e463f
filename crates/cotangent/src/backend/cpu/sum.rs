//! Accurate floating-point sums: blocked pairwise summation in an order fixed by the shape.
//!
//! # The order
//!
//! A sum of `n` elements (one output of a reduction, in the input's memory order over the
//! reduced axes) is a binary tree whose leaves are blocks of at most [`BLOCK`] consecutive
//! elements: a range of `b > 1` blocks is split after its first `floor(b / 2)` blocks, and the
//! sums of the two halves are added (left plus right). Inside a block, element `i` goes to
//! accumulator `i % LANES` ([`LANES`] independent partial sums, so the loop vectorises), and the
//! trees' lane vectors are added lane by lane; the lanes are folded into one value at the root
//! (lane `j` plus lane `j + 8`, then `+ 4`, `+ 2`, `+ 1`). Rows shorter than [`LANES`] are
//! summed left to right.
//!
//! When the reduced elements of an output are not contiguous but the outputs are (a sum over a
//! leading axis, such as a bias gradient `g.sum(&[0])`), whole rows of outputs (up to 4096 at a
//! time) are accumulated together: blocks of [`COLUMN_BLOCK`] consecutive reduced positions are
//! added in order into a row of accumulators (four positions at a time, summed pairwise first,
//! when the outputs are contiguous in memory), and the blocks' rows are combined by the same
//! pairwise tree over blocks.
//!
//! Everything about that order follows from the shape and strides of the input alone: the
//! halves of a tree may be computed on different threads ([`rayon::join`] above [`JOIN_MIN`]
//! elements) and rows or column tiles on different threads, but what is added to what never
//! depends on the number of threads or on scheduling, so results are bit-identical however many
//! threads the pool has (`COTANGENT_NUM_THREADS`).
//!
//! # Error bound
//!
//! With unit roundoff `u` (`2^-24` for `f32`, `2^-53` for `f64`), a computed sum `ŝ` of
//! `x_1..x_n` satisfies `|ŝ - Σx| ≤ γ_k Σ|x|` with `γ_k = k·u / (1 - k·u)` and
//! `k = BLOCK / LANES + log2(LANES) + ceil(log2(n / BLOCK))` (contiguous case: 16 + 4 +
//! `log2(n/256)`, about 40 for 10^9 elements), respectively `k = COLUMN_BLOCK +
//! ceil(log2(n / COLUMN_BLOCK))` in the column case — instead of `k = n - 1` for a plain
//! left-to-right loop. In words: `O(u · log n)` relative to `Σ|x|`. `f16` and `bf16` are summed
//! in `f32` and rounded once at the end.
use super::buffer::{try_filled, try_with_capacity, BufferElement, Data};
use crate::shape::{contiguous_strides, numel};
use crate::Result;
use rayon::prelude::*;
use smallvec::SmallVec;

/// The accumulator of a float sum: `f32` (for `f32`, `f16`, `bf16`) or `f64`.
pub trait SumAcc: Copy + Send + Sync + 'static + std::ops::Add<Output = Self> {
    /// Zero.
    const ACC_ZERO: Self;
}
impl SumAcc for f32 {
    const ACC_ZERO: f32 = 0.0;
}
impl SumAcc for f64 {
    const ACC_ZERO: f64 = 0.0;
}

/// Independent partial sums inside a block (16 `f32` fill one AVX-512 register, four SSE ones).
pub const LANES: usize = 16;
/// Elements per leaf of the pairwise tree.
pub const BLOCK: usize = 256;
/// Reduced positions accumulated in order per leaf when whole rows of outputs are summed
/// together (see the module docs).
pub const COLUMN_BLOCK: usize = 128;
/// Width of the row of outputs accumulated together in that case.
const TILE: usize = 4096;
/// Length of a range from which the two halves of its tree are summed in parallel.
pub const JOIN_MIN: usize = 1 << 16;
/// Element count from which rows or column tiles are summed in parallel.
pub const PARALLEL_MIN: usize = super::reduce::ROW_PARALLEL_THRESHOLD;

type Lanes<A> = [A; LANES];

#[inline(always)]
fn block_lanes<T: Copy, A: SumAcc>(xs: &[T], to: &impl Fn(T) -> A) -> Lanes<A> {
    let mut acc = [A::ACC_ZERO; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            acc[j] = acc[j] + to(c[j]);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a = *a + to(v);
    }
    acc
}

#[inline(always)]
fn add_lanes<A: SumAcc>(mut a: Lanes<A>, b: &Lanes<A>) -> Lanes<A> {
    for j in 0..LANES {
        a[j] = a[j] + b[j];
    }
    a
}

#[inline]
fn fold_lanes<A: SumAcc>(mut a: Lanes<A>) -> A {
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            a[j] = a[j] + a[j + w];
        }
    }
    a[0]
}

/// The pairwise tree over positions `lo..hi`, whose leaves `leaf(lo, hi)` cover at most
/// [`BLOCK`] positions each, aligned to blocks from the start of the root range.
fn tree<A: SumAcc>(lo: usize, hi: usize, leaf: &(impl Fn(usize, usize) -> Lanes<A> + Sync)) -> Lanes<A> {
    let n = hi - lo;
    if n <= BLOCK {
        return leaf(lo, hi);
    }
    let mid = lo + n.div_ceil(BLOCK) / 2 * BLOCK;
    let (a, b) = if n >= JOIN_MIN {
        rayon::join(|| tree(lo, mid, leaf), || tree(mid, hi, leaf))
    } else {
        (tree(lo, mid, leaf), tree(mid, hi, leaf))
    };
    add_lanes(a, &b)
}

/// The sum of `to(x)` over a slice, in the fixed blocked pairwise order of the module docs.
/// Slices of at least [`JOIN_MIN`] elements are summed on several threads (call it only from
/// a kernel on the pool, or with shorter slices).
#[inline]
pub fn sum_slice<T: Copy + Sync, A: SumAcc>(xs: &[T], to: &(impl Fn(T) -> A + Sync)) -> A {
    if xs.len() < LANES {
        return xs.iter().fold(A::ACC_ZERO, |a, &v| a + to(v));
    }
    fold_lanes(tree(0, xs.len(), &|lo, hi| block_lanes(&xs[lo..hi], to)))
}

/// A multi-index over axes `(extent, stride)` (outermost first), with its element offset.
struct Odometer<'a> {
    dims: &'a [(usize, isize)],
    idx: SmallVec<[usize; 8]>,
    off: isize,
}

impl<'a> Odometer<'a> {
    /// At the row-major position `r`.
    fn at(dims: &'a [(usize, isize)], mut r: usize) -> Self {
        let mut idx = SmallVec::from_elem(0, dims.len());
        let mut off = 0;
        for (k, &(e, s)) in dims.iter().enumerate().rev() {
            idx[k] = r % e;
            off += (r % e) as isize * s;
            r /= e;
        }
        Odometer { dims, idx, off }
    }
    #[inline]
    fn advance(&mut self) {
        for (k, &(e, s)) in self.dims.iter().enumerate().rev() {
            self.idx[k] += 1;
            self.off += s;
            if self.idx[k] < e {
                return;
            }
            self.idx[k] = 0;
            self.off -= s * e as isize;
        }
    }
}

/// The sum of `to(src[base + offset(r)])` over the `n` positions `r` of the axes `dims`
/// (row-major, outermost first), in the same order as [`sum_slice`] over those elements.
fn sum_strided<T: Copy + Sync, A: SumAcc>(
    src: &[T],
    base: isize,
    dims: &[(usize, isize)],
    n: usize,
    to: &(impl Fn(T) -> A + Sync),
) -> A {
    if let [(e, 1)] = dims {
        let b = base as usize;
        return sum_slice(&src[b..b + e], to);
    }
    if n < LANES {
        let mut od = Odometer::at(dims, 0);
        let mut a = A::ACC_ZERO;
        for _ in 0..n {
            a = a + to(src[(base + od.off) as usize]);
            od.advance();
        }
        return a;
    }
    fold_lanes(tree(0, n, &|lo, hi| {
        let mut buf = [A::ACC_ZERO; BLOCK];
        let mut od = Odometer::at(dims, lo);
        for b in &mut buf[..hi - lo] {
            *b = to(src[(base + od.off) as usize]);
            od.advance();
        }
        block_lanes(&buf[..hi - lo], &|v| v)
    }))
}

/// One tile of a column sum: for `j < w`, the sum over the positions `r` in `lo..hi` of the
/// reduced axes `red` of `to(src[base + offset(r) + j * stride])`. Blocks of [`COLUMN_BLOCK`]
/// positions (aligned to the start of the whole range) are accumulated in order into a row of
/// `w` partial sums — four positions at a time, `acc + ((x0 + x1) + (x2 + x3))`, when the
/// outputs are contiguous, else one at a time — and the blocks' rows are combined by the same
/// pairwise tree as [`sum_slice`]'s blocks (halves in parallel when large).
#[allow(clippy::too_many_arguments)]
fn column_tile<T: Copy + Sync, A: SumAcc>(
    src: &[T],
    base: isize,
    stride: isize,
    w: usize,
    red: &[(usize, isize)],
    lo: usize,
    hi: usize,
    to: &(impl Fn(T) -> A + Sync),
) -> Vec<A> {
    let n = hi - lo;
    if n <= COLUMN_BLOCK {
        let mut acc = vec![A::ACC_ZERO; w];
        let mut od = Odometer::at(red, lo);
        let mut next_row = || {
            let row = base + od.off;
            od.advance();
            row
        };
        let mut r = lo;
        if stride == 1 {
            // four rows at a time: acc + ((r0 + r1) + (r2 + r3)), one pass over the accumulators
            let row = |o: isize| &src[o as usize..o as usize + w];
            while r + 4 <= hi {
                let (x0, x1, x2, x3) = (row(next_row()), row(next_row()), row(next_row()), row(next_row()));
                for ((((a, &v0), &v1), &v2), &v3) in acc.iter_mut().zip(x0).zip(x1).zip(x2).zip(x3) {
                    *a = *a + ((to(v0) + to(v1)) + (to(v2) + to(v3)));
                }
                r += 4;
            }
        }
        for _ in r..hi {
            let o = next_row();
            for (j, a) in acc.iter_mut().enumerate() {
                *a = *a + to(src[(o + j as isize * stride) as usize]);
            }
        }
        return acc;
    }
    let mid = lo + n.div_ceil(COLUMN_BLOCK) / 2 * COLUMN_BLOCK;
    let half = |lo, hi| column_tile(src, base, stride, w, red, lo, hi, to);
    let (mut a, b) = if n * w >= JOIN_MIN {
        rayon::join(|| half(lo, mid), || half(mid, hi))
    } else {
        (half(lo, mid), half(mid, hi))
    };
    for (x, &y) in a.iter_mut().zip(&b) {
        *x = *x + y;
    }
    a
}

/// One axis of a reduction's input: extent, input stride, output stride (0 when reduced).
#[derive(Clone, Copy, Debug)]
struct Axis {
    extent: usize,
    x: isize,
    out: isize,
    reduced: bool,
}

/// The sum of `to(x)` over `axes` of the view `x` (of `shape`), as a contiguous array of the
/// keepdims shape, each output converted with `from`. The summation order is the one of the
/// module docs: fixed by the shape and the strides of the view, whatever the thread count.
pub fn sum_axes<T: BufferElement, A: SumAcc>(
    x: &Data,
    shape: &[usize],
    axes: &[usize],
    to: impl Fn(T) -> A + Sync + Send,
    from: impl Fn(A) -> T + Sync + Send,
) -> Result<Vec<T>> {
    let out_shape: Vec<usize> = shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let n_out = numel(&out_shape);
    let n = numel(shape);
    if n == 0 {
        return try_filled(from(A::ACC_ZERO), n_out);
    }
    let src = x.buf.as_slice::<T>();
    let ostr = contiguous_strides(&out_shape);
    let logical: SmallVec<[Axis; 8]> = (0..shape.len())
        .filter(|&i| shape[i] > 1)
        .map(|i| {
            let reduced = axes.contains(&i);
            Axis { extent: shape[i], x: x.strides[i], out: if reduced { 0 } else { ostr[i] as isize }, reduced }
        })
        .collect();
    // memory order: largest stride outermost, broadcast (stride 0) axes outside everything
    let mut sorted = logical.clone();
    sorted.sort_by_key(|a| std::cmp::Reverse(if a.x == 0 { usize::MAX } else { a.x.unsigned_abs() }));
    let mut merged: SmallVec<[Axis; 8]> = SmallVec::new();
    for a in sorted {
        if let Some(last) = merged.last_mut() {
            if last.reduced == a.reduced
                && last.x == a.x * a.extent as isize
                && (a.reduced || last.out == a.out * a.extent as isize)
            {
                last.extent *= a.extent;
                last.x = a.x;
                last.out = a.out;
                continue;
            }
        }
        merged.push(a);
    }
    let red: SmallVec<[(usize, isize); 8]> = merged.iter().filter(|a| a.reduced).map(|a| (a.extent, a.x)).collect();
    let r_total: usize = red.iter().map(|d| d.0).product();
    let parallel = n >= PARALLEL_MIN && n_out > 1;
    let off = x.offset as isize;
    let mut out: Vec<T> = try_with_capacity(n_out)?;

    let innermost_kept = merged.last().is_some_and(|a| !a.reduced);
    if !innermost_kept || r_total == 1 {
        // row sums: one tree per output
        let kept: SmallVec<[Axis; 8]> = merged.iter().filter(|a| !a.reduced).copied().collect();
        let dense_rows = matches!(red[..], [(_, 1)])
            && (kept.is_empty() || (kept.len() == 1 && kept[0].x == r_total as isize && kept[0].out == 1));
        if dense_rows {
            let rows = &src[x.offset..x.offset + n_out * r_total];
            let f = |row: &[T]| from(sum_slice(row, &to));
            if parallel {
                out.par_extend(rows.par_chunks(r_total).map(f));
            } else {
                out.extend(rows.chunks(r_total).map(f));
            }
            return Ok(out);
        }
        let lk: SmallVec<[Axis; 8]> = logical.iter().filter(|a| !a.reduced).copied().collect();
        let f = |o: usize| {
            let base = off + lk.iter().map(|a| ((o / a.out as usize) % a.extent) as isize * a.x).sum::<isize>();
            from(sum_strided(src, base, &red, r_total, &to))
        };
        if parallel {
            out.par_extend((0..n_out).into_par_iter().map(f));
        } else {
            out.extend((0..n_out).map(f));
        }
        return Ok(out);
    }

    // column sums: rows of outputs along the innermost (kept) axis, in tiles of TILE outputs
    let inner = *merged.last().expect("an innermost kept axis");
    let outer: SmallVec<[Axis; 8]> = merged[..merged.len() - 1].iter().filter(|a| !a.reduced).copied().collect();
    let n_tiles_row = inner.extent.div_ceil(TILE);
    let tile = |q: usize, t: usize| -> (isize, isize, usize) {
        // (input offset, output offset, width) of tile t of the outer position q
        let (mut xb, mut ob, mut rem) = (off, 0isize, q);
        for a in outer.iter().rev() {
            let d = (rem % a.extent) as isize;
            rem /= a.extent;
            xb += d * a.x;
            ob += d * a.out;
        }
        let j0 = t * TILE;
        (xb + j0 as isize * inner.x, ob + j0 as isize * inner.out, TILE.min(inner.extent - j0))
    };
    let compute = |q: usize, t: usize| {
        let (xb, _, w) = tile(q, t);
        column_tile(src, xb, inner.x, w, &red, 0, r_total, &to)
    };
    let n_outer: usize = outer.iter().map(|a| a.extent).product();
    // whether the tiles, in order, are the outputs in order
    let mut expect = 1isize;
    let mut in_order = true;
    for a in std::iter::once(&inner).chain(outer.iter().rev()) {
        in_order &= a.out == expect;
        expect *= a.extent as isize;
    }
    if in_order {
        out.resize(n_out, from(A::ACC_ZERO));
        let fill = |q: usize, row: &mut [T]| {
            let one = |(t, dst): (usize, &mut [T])| {
                for (d, v) in dst.iter_mut().zip(compute(q, t)) {
                    *d = from(v);
                }
            };
            if parallel && n_tiles_row > 1 {
                row.par_chunks_mut(TILE).enumerate().for_each(one);
            } else {
                row.chunks_mut(TILE).enumerate().for_each(one);
            }
        };
        if parallel {
            out.par_chunks_mut(inner.extent).enumerate().for_each(|(q, row)| fill(q, row));
        } else {
            out.chunks_mut(inner.extent).enumerate().for_each(|(q, row)| fill(q, row));
        }
        return Ok(out);
    }
    let n_tiles = n_outer * n_tiles_row;
    let each = |k: usize| compute(k / n_tiles_row, k % n_tiles_row);
    let sums: Vec<Vec<A>> =
        if parallel { (0..n_tiles).into_par_iter().map(each).collect() } else { (0..n_tiles).map(each).collect() };
    out.resize(n_out, from(A::ACC_ZERO));
    for (k, v) in sums.into_iter().enumerate() {
        let (_, ob, _) = tile(k / n_tiles_row, k % n_tiles_row);
        for (j, a) in v.into_iter().enumerate() {
            out[(ob + j as isize * inner.out) as usize] = from(a);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(v: Vec<f32>, shape: &[usize]) -> Data {
        Data::from_vec(v, shape)
    }

    #[test]
    fn matches_f64_on_every_layout() {
        // values with a wide spread, so that orders would differ in the last bits; the sums
        // are compared against f64 within the error bound
        let (a, b, c) = (5usize, 300usize, 7usize);
        let v: Vec<f32> = (0..a * b * c).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 0.37).collect();
        let x = data(v.clone(), &[a, b, c]);
        let at = |i: usize, j: usize, k: usize| v[(i * b + j) * c + k] as f64;
        for axes in [vec![0], vec![1], vec![2], vec![0, 1], vec![0, 2], vec![1, 2], vec![0, 1, 2]] {
            let got = sum_axes::<f32, f32>(&x, &[a, b, c], &axes, |v| v, |v| v).unwrap();
            let dims = [a, b, c];
            let oshape: Vec<usize> = (0..3).map(|i| if axes.contains(&i) { 1 } else { dims[i] }).collect();
            for (o, &g) in got.iter().enumerate() {
                let (oi, oj, ok) = (o / (oshape[1] * oshape[2]), (o / oshape[2]) % oshape[1], o % oshape[2]);
                let (mut s, mut sa) = (0f64, 0f64);
                for i in 0..a {
                    for j in 0..b {
                        for k in 0..c {
                            let keep = (axes.contains(&0) || i == oi)
                                && (axes.contains(&1) || j == oj)
                                && (axes.contains(&2) || k == ok);
                            if keep {
                                s += at(i, j, k);
                                sa += at(i, j, k).abs();
                            }
                        }
                    }
                }
                assert!(
                    (g as f64 - s).abs() <= 64.0 * f32::EPSILON as f64 * sa,
                    "axes {axes:?} output {o}: {g} vs {s}"
                );
            }
            // the same through a transposed view (strides permuted)
            let t =
                Data { buf: x.buf.clone(), strides: smallvec::smallvec![1, c as isize, (b * c) as isize], offset: 0 };
            let _ = sum_axes::<f32, f32>(&t, &[c, b, a], &axes, |v| v, |v| v).unwrap();
        }
    }

    #[test]
    fn tree_is_pairwise() {
        // 2^25 ones: exact in f32 only when no partial sum passes 2^24 with a remainder
        let v = vec![1f32; 1 << 25];
        assert_eq!(sum_slice(&v, &|v| v), (1u32 << 25) as f32);
        let v = vec![0.1f32; 10_000_000];
        let s = sum_slice(&v, &|v| v);
        assert!((s as f64 - 1e6).abs() / 1e6 < 1e-6, "{s}");
    }
}
