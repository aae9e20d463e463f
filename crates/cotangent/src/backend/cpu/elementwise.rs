//! Element-wise kernels: unary maps and broadcasting binary/ternary maps over strided views,
//! with contiguous and scalar fast paths, split over rayon above a size threshold.
use super::buffer::{try_filled, try_with_capacity, BufferElement, Data};
use super::strided::for_each_row;
use crate::shape::Strides;
use crate::Result;
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

/// A new vector of `len` elements, written by `fill(start, chunk)` for consecutive chunks of
/// `CHUNK` elements (in parallel at or above [`PARALLEL_THRESHOLD`], else one call for all).
///
/// The buffer is not zeroed first (that saves a pass over the output, a third of the traffic of
/// a large memory-bound kernel). It is allocated fallibly: `Err(Error::OutOfMemory)` when the
/// memory cannot be had (`fill` is then not called).
///
/// # Safety
/// `fill` must write every element of each chunk it is handed (`chunk[i]` is element
/// `start + i`); the result is read as `len` initialised values.
pub unsafe fn new_vec_with<U: BufferElement>(
    len: usize,
    fill: impl Fn(usize, &mut [std::mem::MaybeUninit<U>]) + Sync + Send,
) -> Result<Vec<U>> {
    // SAFETY: the caller's promise (`fill` writes every element it is handed) is
    // `new_vec_in_chunks`'s; `CHUNK` is not 0.
    unsafe { new_vec_in_chunks(len, CHUNK, fill) }
}

/// [`new_vec_with`] with chunks of `chunk` elements (the parallel case; `chunk > 0`).
///
/// # Safety
/// As [`new_vec_with`]: `fill` must write every element of each chunk it is handed (all of
/// `0..len` over the calls, which cover it once: consecutive chunks of `chunk` elements, or one
/// call for all below [`PARALLEL_THRESHOLD`]).
unsafe fn new_vec_in_chunks<U: BufferElement>(
    len: usize,
    chunk: usize,
    fill: impl Fn(usize, &mut [std::mem::MaybeUninit<U>]) + Sync + Send,
) -> Result<Vec<U>> {
    let mut out = try_with_capacity::<U>(len)?;
    let dst = &mut out.spare_capacity_mut()[..len];
    if len >= PARALLEL_THRESHOLD {
        dst.par_chunks_mut(chunk).enumerate().for_each(|(c, o)| fill(c * chunk, o));
    } else {
        fill(0, dst);
    }
    // SAFETY: `try_with_capacity` reserved room for exactly `len` elements, and `fill` wrote
    // every element of `dst`, those first `len` slots (the caller's promise; `par_chunks_mut` and
    // the single call hand it every slot once), so they are initialised `U`s. A panic in `fill`
    // leaves `out` at length 0, so nothing uninitialised is ever read or dropped.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// Map a contiguous slice into a new vector, in parallel for large inputs.
#[inline]
pub fn map_slice<T: Copy + Send + Sync, U: BufferElement>(
    src: &[T],
    f: impl Fn(T) -> U + Sync + Send,
) -> Result<Vec<U>> {
    // SAFETY: each chunk of the output is zipped with the source elements at the same positions,
    // and the source has exactly `len` elements, so every output element is written.
    unsafe {
        new_vec_with(src.len(), |start, out| {
            for (o, &s) in out.iter_mut().zip(&src[start..]) {
                o.write(f(s));
            }
        })
    }
}

/// `f(x, y)` for every `x` of a contiguous slice and one `y`, in a new vector. The scalar is a
/// by-value argument of the loop (not captured by reference), so the loop keeps it in a register
/// and vectorises.
#[inline]
fn map_slice_scalar<T: Copy + Send + Sync, U: BufferElement>(
    src: &[T],
    y: T,
    f: impl Fn(T, T) -> U + Sync + Send,
) -> Result<Vec<U>> {
    #[inline(always)]
    fn run<T: Copy, U: Copy>(out: &mut [std::mem::MaybeUninit<U>], src: &[T], y: T, f: &impl Fn(T, T) -> U) {
        for (o, &s) in out.iter_mut().zip(src) {
            o.write(f(s, y));
        }
    }
    // SAFETY: as in `map_slice`: the source has `len` elements, zipped position by position.
    unsafe { new_vec_with(src.len(), |start, out| run(out, &src[start..], y, &f)) }
}

/// Apply `f` to every element of a (possibly strided) input; the result is contiguous
/// (`Err(Error::OutOfMemory)` when it cannot be allocated).
pub fn unary_map<T: BufferElement, U: BufferElement>(
    x: &Data,
    shape: &[usize],
    f: impl Fn(T) -> U + Sync + Send,
) -> Result<Vec<U>> {
    if let Some(s) = x.contiguous_slice::<T>(shape) {
        return map_slice(s, f);
    }
    let src = x.buf.as_slice::<T>();
    let mut out = try_with_capacity(crate::shape::numel(shape))?;
    for_each_row(shape, [&x.strides], [x.offset as isize], |[o], n, [s]| {
        for i in 0..n as isize {
            out.push(f(src[(o + i * s) as usize]));
        }
    });
    Ok(out)
}

/// Apply `f` element-wise to two inputs broadcast to `out_shape`; the result is contiguous
/// (`Err(Error::OutOfMemory)` when it cannot be allocated).
pub fn binary_map<T: BufferElement, U: BufferElement>(
    a: &Data,
    a_shape: &[usize],
    b: &Data,
    b_shape: &[usize],
    out_shape: &[usize],
    f: impl Fn(T, T) -> U + Sync + Send,
) -> Result<Vec<U>> {
    let n = crate::shape::numel(out_shape);
    let an = crate::shape::numel(a_shape);
    let bn = crate::shape::numel(b_shape);
    let sa = a.contiguous_slice::<T>(a_shape);
    let sb = b.contiguous_slice::<T>(b_shape);
    match (sa, sb) {
        (Some(x), Some(y)) if an == n && bn == n => {
            // SAFETY: both inputs have `n` elements (checked by the match guard), zipped with
            // the output position by position, so every output element is written.
            return unsafe {
                new_vec_with(n, |start, out| {
                    for ((o, &x), &y) in out.iter_mut().zip(&x[start..]).zip(&y[start..]) {
                        o.write(f(x, y));
                    }
                })
            };
        }
        (Some(x), _) if an == n && bn == 1 => {
            let y = b.buf.as_slice::<T>()[b.offset];
            return map_slice_scalar(x, y, f);
        }
        (_, Some(y)) if bn == n && an == 1 => {
            let x = a.buf.as_slice::<T>()[a.offset];
            return map_slice_scalar(y, x, move |y, x| f(x, y));
        }
        _ => {}
    }
    let ast = broadcast_strides(a_shape, &a.strides, out_shape);
    let bst = broadcast_strides(b_shape, &b.strides, out_shape);
    let xa = a.buf.as_slice::<T>();
    let xb = b.buf.as_slice::<T>();
    if out_shape.last().is_some_and(|&cols| cols >= ROW_PATH_MIN_COLS) {
        return binary_rows((xa, &ast, a.offset as isize), (xb, &bst, b.offset as isize), out_shape, f);
    }
    // SAFETY: one chunk of all `n` elements; `for_each_row` visits every row of `out_shape` once,
    // in row-major order, and `write_row` writes each of them, so positions 0..n are written.
    unsafe {
        new_vec_in_chunks(n, n.max(1), |_, dst| {
            let mut pos = 0;
            for_each_row(out_shape, [&ast, &bst], [a.offset as isize, b.offset as isize], |[oa, ob], len, [da, db]| {
                write_row(&mut dst[pos..pos + len], (xa, oa, da), (xb, ob, db), &f);
                pos += len;
            });
        })
    }
}

/// One row of a binary op: `out[i] = f(xa[oa + i·da], xb[ob + i·db])`, as zipped slices where
/// both operands run densely along the row, a repeated scalar where one is broadcast along it
/// (stride 0), a strided walk otherwise.
#[inline]
fn write_row<T: BufferElement, U: BufferElement>(
    out: &mut [std::mem::MaybeUninit<U>],
    (xa, oa, da): (&[T], isize, isize),
    (xb, ob, db): (&[T], isize, isize),
    f: &impl Fn(T, T) -> U,
) {
    let len = out.len();
    match (da, db) {
        (1, 1) => {
            let (ra, rb) = (&xa[oa as usize..oa as usize + len], &xb[ob as usize..ob as usize + len]);
            for ((o, &x), &y) in out.iter_mut().zip(ra).zip(rb) {
                o.write(f(x, y));
            }
        }
        (1, 0) => {
            let y = xb[ob as usize];
            for (o, &x) in out.iter_mut().zip(&xa[oa as usize..oa as usize + len]) {
                o.write(f(x, y));
            }
        }
        (0, 1) => {
            let x = xa[oa as usize];
            for (o, &y) in out.iter_mut().zip(&xb[ob as usize..ob as usize + len]) {
                o.write(f(x, y));
            }
        }
        _ => {
            for (i, o) in out.iter_mut().enumerate() {
                let i = i as isize;
                o.write(f(xa[(oa + i * da) as usize], xb[(ob + i * db) as usize]));
            }
        }
    }
}

/// Output rows (last axis) at least this long take [`binary_rows`] in [`binary_map`]'s
/// broadcasting / strided case; shorter rows keep the sequential walk, which merges axes.
const ROW_PATH_MIN_COLS: usize = 16;

/// One operand of [`binary_rows`]: its buffer, strides broadcast to the output, and offset.
type RowOperand<'a, T> = (&'a [T], &'a [isize], isize);

/// [`binary_map`] of broadcast or strided operands, one output row (the last axis) at a time,
/// rows split over threads for large outputs, each written by [`write_row`]. (The sequential
/// walk grew the output with `Vec::extend` row by row on one thread: a `[32, 64, 64]` product
/// with a `[64]` row took ~170 µs, with a sliced operand ~210 µs.)
fn binary_rows<T: BufferElement, U: BufferElement>(
    (xa, ast, oa): RowOperand<'_, T>,
    (xb, bst, ob): RowOperand<'_, T>,
    out_shape: &[usize],
    f: impl Fn(T, T) -> U + Sync + Send,
) -> Result<Vec<U>> {
    let nd = out_shape.len();
    let cols = out_shape[nd - 1];
    let n = crate::shape::numel(out_shape);
    let (ca, cb) = (ast[nd - 1], bst[nd - 1]);
    // the offsets of row `r`'s first element in each operand
    let row_start = |mut r: usize| {
        let (mut pa, mut pb) = (oa, ob);
        for ax in (0..nd - 1).rev() {
            let i = (r % out_shape[ax]) as isize;
            r /= out_shape[ax];
            pa += i * ast[ax];
            pb += i * bst[ax];
        }
        (pa, pb)
    };
    let fill_rows = |start: usize, chunk: &mut [std::mem::MaybeUninit<U>]| {
        for (r, out) in chunk.chunks_exact_mut(cols).enumerate() {
            let (pa, pb) = row_start(start / cols + r);
            write_row(out, (xa, pa, ca), (xb, pb, cb), &f);
        }
    };
    // SAFETY: the chunks are whole rows (`n` and the chunk length are multiples of `cols`), and
    // `fill_rows` writes every element of each row it is handed.
    unsafe { new_vec_in_chunks(n, CHUNK.div_ceil(cols) * cols, fill_rows) }
}

/// Apply `f` element-wise to three inputs broadcast to `out_shape` (used by `select`).
#[allow(clippy::too_many_arguments)]
pub fn ternary_map<A: BufferElement, T: BufferElement, U: BufferElement>(
    a: (&Data, &[usize]),
    b: (&Data, &[usize]),
    c: (&Data, &[usize]),
    out_shape: &[usize],
    f: impl Fn(A, T, T) -> U,
) -> Result<Vec<U>> {
    let ast = broadcast_strides(a.1, &a.0.strides, out_shape);
    let bst = broadcast_strides(b.1, &b.0.strides, out_shape);
    let cst = broadcast_strides(c.1, &c.0.strides, out_shape);
    let xa = a.0.buf.as_slice::<A>();
    let xb = b.0.buf.as_slice::<T>();
    let xc = c.0.buf.as_slice::<T>();
    let mut out = try_with_capacity(crate::shape::numel(out_shape))?;
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
    Ok(out)
}

// ----- buffer donation ----------------------------------------------------------------------

/// An input of an element-wise kernel: a borrowed view of a computed array, or a buffer handed
/// over by an input that nothing else references (`Array::take_unique_data`), which the kernel
/// may overwrite with its result instead of allocating one.
#[derive(Debug)]
pub enum Operand<'a> {
    /// A view the kernel only reads.
    View(&'a Data),
    /// A dense buffer the kernel owns. If it turns out not to fit the output (other dtype or
    /// length, or shared after all), the kernels read it like a view.
    Owned(Data),
}

impl Operand<'_> {
    /// The data, to read.
    #[inline]
    pub fn data(&self) -> &Data {
        match self {
            Operand::View(d) => d,
            Operand::Owned(d) => d,
        }
    }
    /// The buffer, if it is owned and can hold an output of `shape` with elements of type `T`.
    fn donated<T: BufferElement>(self, shape: &[usize]) -> Result<Data, Self> {
        match self {
            Operand::Owned(mut d) => {
                if d.unique_slice_mut::<T>(shape).is_some() {
                    Ok(d)
                } else {
                    Err(Operand::Owned(d))
                }
            }
            view => Err(view),
        }
    }
}

/// `d`, a dense view of its whole buffer, as a dense row-major view of `shape` (same element
/// count; e.g. an input of shape `[4]` of an output of shape `[1, 4]`).
pub fn dense(mut d: Data, shape: &[usize]) -> Data {
    d.strides = crate::shape::contiguous_strides(shape);
    d.offset = 0;
    d
}

/// `v[i] = f(v[i])`, in parallel for large slices.
#[inline]
pub fn map_in_place<T: Copy + Send + Sync>(v: &mut [T], f: impl Fn(T) -> T + Sync + Send) {
    if v.len() >= PARALLEL_THRESHOLD {
        v.par_chunks_mut(CHUNK).for_each(|c| c.iter_mut().for_each(|x| *x = f(*x)));
    } else {
        v.iter_mut().for_each(|x| *x = f(*x));
    }
}

/// `dst[i] = f(src[i])` for a view `src` of `shape` (row-major order) and a dense `dst`.
pub fn map_into<S: BufferElement, U: Copy + Send + Sync>(
    src: &Data,
    shape: &[usize],
    dst: &mut [U],
    f: impl Fn(S) -> U + Sync + Send,
) {
    if let Some(s) = src.contiguous_slice::<S>(shape) {
        if s.len() >= PARALLEL_THRESHOLD {
            dst.par_chunks_mut(CHUNK).zip(s.par_chunks(CHUNK)).for_each(|(o, s)| {
                o.iter_mut().zip(s).for_each(|(o, &s)| *o = f(s));
            });
        } else {
            dst.iter_mut().zip(s).for_each(|(o, &s)| *o = f(s));
        }
        return;
    }
    let xs = src.buf.as_slice::<S>();
    let mut i = 0;
    for_each_row(shape, [&src.strides], [src.offset as isize], |[o], n, [s]| {
        for (k, d) in dst[i..i + n].iter_mut().enumerate() {
            *d = f(xs[(o + k as isize * s) as usize]);
        }
        i += n;
    });
}

/// `f` applied to every element of `x` (shape `shape`); the result is written into `x`'s buffer
/// when it is owned (donated), else into a new one.
pub fn unary_apply<T: BufferElement>(x: Operand, shape: &[usize], f: impl Fn(T) -> T + Sync + Send) -> Result<Data> {
    Ok(match x.donated::<T>(shape) {
        Ok(mut d) => {
            map_in_place(d.unique_slice_mut::<T>(shape).expect("checked by donated"), f);
            dense(d, shape)
        }
        Err(x) => Data::from_vec(unary_map::<T, T>(x.data(), shape, f)?, shape),
    })
}

/// Like [`unary_apply`] with a slice kernel: `f(src, dst)` writes `dst[i] = g(src[i])` and
/// `f_in_place(v)` does `v[i] = g(v[i])` (vectorised kernels, e.g. [`super::vmath`]). A donated
/// buffer is overwritten, a contiguous view is mapped into a new buffer, and a strided view is
/// first copied into a contiguous one (so every layout gives the same bits). Slices at or above
/// [`PARALLEL_THRESHOLD`] are split over rayon in fixed chunks.
pub fn unary_apply_slices<T: BufferElement>(
    x: Operand,
    shape: &[usize],
    f: impl Fn(&[T], &mut [T]) + Sync + Send,
    f_in_place: impl Fn(&mut [T]) + Sync + Send,
) -> Result<Data> {
    let in_place = |v: &mut [T]| {
        if v.len() >= PARALLEL_THRESHOLD {
            v.par_chunks_mut(CHUNK).for_each(&f_in_place);
        } else {
            f_in_place(v);
        }
    };
    Ok(match x.donated::<T>(shape) {
        Ok(mut d) => {
            in_place(d.unique_slice_mut::<T>(shape).expect("checked by donated"));
            dense(d, shape)
        }
        Err(x) => match x.data().contiguous_slice::<T>(shape) {
            Some(s) => {
                let mut out = try_filled(T::default(), s.len())?;
                if s.len() >= PARALLEL_THRESHOLD {
                    out.par_chunks_mut(CHUNK).zip(s.par_chunks(CHUNK)).for_each(|(o, s)| f(s, o));
                } else {
                    f(s, &mut out);
                }
                Data::from_vec(out, shape)
            }
            None => {
                let mut v = x.data().try_to_vec::<T>(shape)?;
                in_place(&mut v);
                Data::from_vec(v, shape)
            }
        },
    })
}

/// `f` of every element of `src` (shape `shape`, type `S`), written into `dst` when it is an
/// owned buffer of type `U` that fits, else into a new buffer (a conversion, e.g. f32 → f16).
pub fn convert_into<S: BufferElement, U: BufferElement>(
    src: &Data,
    shape: &[usize],
    dst: Option<Operand>,
    f: impl Fn(S) -> U + Sync + Send,
) -> Result<Data> {
    if let Some(Ok(mut d)) = dst.map(|d| d.donated::<U>(shape)) {
        map_into(src, shape, d.unique_slice_mut::<U>(shape).expect("checked by donated"), f);
        return Ok(dense(d, shape));
    }
    Ok(Data::from_vec(unary_map::<S, U>(src, shape, f)?, shape))
}

/// `dst[i] = f(dst[i], other[i])` for a dense `dst` of `out_shape` and a view `other` of
/// `other_shape` broadcast to it.
fn zip_in_place<T: BufferElement>(
    dst: &mut [T],
    other: &Data,
    other_shape: &[usize],
    out_shape: &[usize],
    f: impl Fn(T, T) -> T + Sync + Send,
) {
    let n = dst.len();
    let on = crate::shape::numel(other_shape);
    if on == n {
        if let Some(y) = other.contiguous_slice::<T>(other_shape) {
            if n >= PARALLEL_THRESHOLD {
                dst.par_chunks_mut(CHUNK).zip(y.par_chunks(CHUNK)).for_each(|(o, y)| {
                    o.iter_mut().zip(y).for_each(|(o, &y)| *o = f(*o, y));
                });
            } else {
                dst.iter_mut().zip(y).for_each(|(o, &y)| *o = f(*o, y));
            }
            return;
        }
    }
    if on == 1 {
        let y = other.buf.as_slice::<T>()[other.offset];
        #[inline(always)]
        fn run<T: Copy>(v: &mut [T], y: T, f: &impl Fn(T, T) -> T) {
            v.iter_mut().for_each(|x| *x = f(*x, y));
        }
        // `y` is a by-value argument of the loop, so it stays in a register (see map_slice_scalar).
        if n >= PARALLEL_THRESHOLD {
            dst.par_chunks_mut(CHUNK).for_each(|c| run(c, y, &f));
        } else {
            run(dst, y, &f);
        }
        return;
    }
    let st = broadcast_strides(other_shape, &other.strides, out_shape);
    let ys = other.buf.as_slice::<T>();
    let mut i = 0;
    for_each_row(out_shape, [&st], [other.offset as isize], |[o], len, [s]| {
        let row = &mut dst[i..i + len];
        if s == 0 {
            let y = ys[o as usize];
            row.iter_mut().for_each(|x| *x = f(*x, y));
        } else if s == 1 {
            // a dense row of the other operand (a bias broadcast over rows): slices vectorise
            row.iter_mut().zip(&ys[o as usize..o as usize + len]).for_each(|(x, &y)| *x = f(*x, y));
        } else {
            for (k, x) in row.iter_mut().enumerate() {
                *x = f(*x, ys[(o + k as isize * s) as usize]);
            }
        }
        i += len;
    });
}

/// `f(a, b)` element-wise with broadcasting; the result is written into the buffer of `a` or
/// `b` when one is owned (donated) and has the output's size, else into a new one.
pub fn binary_apply<T: BufferElement>(
    a: (Operand, &[usize]),
    b: (Operand, &[usize]),
    out_shape: &[usize],
    f: impl Fn(T, T) -> T + Sync + Send,
) -> Result<Data> {
    let n = crate::shape::numel(out_shape);
    let ((a, a_shape), (b, b_shape)) = (a, b);
    // An input with the output's element count broadcasts without repeating anything, so its
    // row-major order is the output's.
    let a = if crate::shape::numel(a_shape) == n { a.donated::<T>(a_shape) } else { Err(a) };
    let a = match a {
        Ok(mut d) => {
            zip_in_place(d.unique_slice_mut::<T>(a_shape).expect("checked"), b.data(), b_shape, out_shape, f);
            return Ok(dense(d, out_shape));
        }
        Err(a) => a,
    };
    let b = if crate::shape::numel(b_shape) == n { b.donated::<T>(b_shape) } else { Err(b) };
    match b {
        Ok(mut d) => {
            zip_in_place(d.unique_slice_mut::<T>(b_shape).expect("checked"), a.data(), a_shape, out_shape, |y, x| {
                f(x, y)
            });
            Ok(dense(d, out_shape))
        }
        Err(b) => {
            Ok(Data::from_vec(binary_map::<T, T>(a.data(), a_shape, b.data(), b_shape, out_shape, f)?, out_shape))
        }
    }
}

/// `select(cond, a, b)` element-wise with broadcasting, written into the buffer of `a` or `b`
/// when one is owned (donated) and has the output's size, else into a new one.
pub fn select_apply<T: BufferElement>(
    cond: (&Data, &[usize]),
    a: (Operand, &[usize]),
    b: (Operand, &[usize]),
    out_shape: &[usize],
) -> Result<Data> {
    let n = crate::shape::numel(out_shape);
    let ((a, a_shape), (b, b_shape)) = (a, b);
    let pick = |keep_dst_when: bool, dst: &mut [T], other: &Data, other_shape: &[usize]| {
        let cst = broadcast_strides(cond.1, &cond.0.strides, out_shape);
        let ost = broadcast_strides(other_shape, &other.strides, out_shape);
        let cs = cond.0.buf.as_slice::<bool>();
        let os = other.buf.as_slice::<T>();
        let mut i = 0;
        for_each_row(
            out_shape,
            [&cst, &ost],
            [cond.0.offset as isize, other.offset as isize],
            |[oc, oo], len, [dc, dd]| {
                for (k, x) in dst[i..i + len].iter_mut().enumerate() {
                    let k = k as isize;
                    if cs[(oc + k * dc) as usize] != keep_dst_when {
                        *x = os[(oo + k * dd) as usize];
                    }
                }
                i += len;
            },
        );
    };
    let a = if crate::shape::numel(a_shape) == n { a.donated::<T>(a_shape) } else { Err(a) };
    let a = match a {
        Ok(mut d) => {
            pick(true, d.unique_slice_mut::<T>(a_shape).expect("checked"), b.data(), b_shape);
            return Ok(dense(d, out_shape));
        }
        Err(a) => a,
    };
    let b = if crate::shape::numel(b_shape) == n { b.donated::<T>(b_shape) } else { Err(b) };
    match b {
        Ok(mut d) => {
            pick(false, d.unique_slice_mut::<T>(b_shape).expect("checked"), a.data(), a_shape);
            Ok(dense(d, out_shape))
        }
        Err(b) => Ok(Data::from_vec(
            ternary_map::<bool, T, T>(cond, (a.data(), a_shape), (b.data(), b_shape), out_shape, |c, x, y| {
                if c {
                    x
                } else {
                    y
                }
            })?,
            out_shape,
        )),
    }
}
