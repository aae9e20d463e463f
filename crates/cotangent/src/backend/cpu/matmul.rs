//! Matrix products: batched, broadcasting over batch axes, on strided views.
//!
//! Floats (`f32`, `f64`, `f16`) go through the [`gemm`] crate with the inputs' own row and
//! column strides, so transposed views are multiplied without a copy (except a column-major
//! right operand of a tall product: `column_major_rhs_worth_copying`); `bf16` is computed
//! through `f32`. Batch axes are walked with stride arithmetic (broadcast batch axes have stride 0), never
//! materialised. Integers and `bool` use a plain loop (wrapping integer arithmetic, as numpy;
//! `bool` is "or of ands").
//!
//! # Which `gemm` kernel runs
//! `gemm` picks its micro-kernel at run time from the CPU's features, but its AVX-512 kernels
//! are compiled only with its `x86-v4` cargo feature, which this crate enables (without it
//! `gemm` stops at the AVX2/FMA kernels). Verified on the development machine: its CPU has
//! AVX-512 (`grep -o 'avx512[a-z]*' /proc/cpuinfo | sort -u` lists `avx512f avx512bw avx512cd
//! avx512dq avx512vl avx512ifma avx512vbmi`), and `gemm-common`'s `init_gemm_fn` returns the
//! `avx512f` kernels when `feature_detected!("avx512f")` holds and `x86-v4` is on (checked in
//! the gemm 0.19 sources). `examples/matmul_gflops.rs` measured about 90-130 GFLOP/s for an f32
//! 1024³ product and 150-210 GFLOP/s at 512³ on 2 cores (a busy shared machine, so these are
//! lower bounds); the AVX2-only build was not measured side by side.
//!
//! # Threads and determinism
//! A single large product runs with `gemm::Parallelism::Rayon` above [`GEMM_PARALLEL_FLOPS`];
//! many small products in a batch are instead spread over rayon one matrix per task. `gemm`
//! splits work over output tiles, never over the contracted axis, so every output element is
//! summed in the same order whatever the number of threads: results are bit-identical.
use super::buffer::{try_filled, try_with_capacity, BufferElement, Data};
use super::elementwise::broadcast_strides;
use crate::{DType, Result};
use half::{bf16, f16};
use rayon::prelude::*;

/// `m * n * k` at or above which one product uses all of rayon's threads inside `gemm`.
/// Chosen on 2 cores (64³ single-threaded already reaches ~170 GFLOP/s f32); not tuned finely.
pub const GEMM_PARALLEL_FLOPS: usize = 96 * 96 * 96;
/// Total `m * n * k` of a batch of products each below [`GEMM_PARALLEL_FLOPS`] at or above which
/// the batch is split over rayon's threads (one product per task). Below it the batch runs on
/// one thread: the 4-product 64×64×64 batches of a chunked gated delta (1 M multiply-adds, some
/// 6–12 µs) gained less from two threads than the hand-over to the kernel pool cost.
pub const BATCH_PARALLEL_FLOPS: usize = 4 * GEMM_PARALLEL_FLOPS;
/// `m * n * k` below which a plain loop is used instead of `gemm` (avoids its dispatch and
/// packing for tiny matrices; the threshold is a conservative guess, not finely measured).
pub const SMALL_FLOPS: usize = 16 * 16 * 16;

/// Geometry of one batched product: the output's batch shape, the matrix sizes and, for each
/// operand, the strides of its matrix axes and its batch strides broadcast to the output batch.
struct Geometry {
    batch: Vec<usize>,
    m: usize,
    n: usize,
    k: usize,
    a_rs: isize,
    a_cs: isize,
    b_rs: isize,
    b_cs: isize,
    a_bs: Vec<isize>,
    b_bs: Vec<isize>,
}

impl Geometry {
    /// Starting offsets (a, b) of every batch element, in row-major batch order.
    fn offsets(&self, a_off: usize, b_off: usize) -> Vec<(isize, isize)> {
        let count: usize = self.batch.iter().product();
        let mut out = Vec::with_capacity(count);
        let nb = self.batch.len();
        let mut idx = vec![0usize; nb];
        let (mut oa, mut ob) = (a_off as isize, b_off as isize);
        for _ in 0..count {
            out.push((oa, ob));
            // increment the multi-index
            for ax in (0..nb).rev() {
                idx[ax] += 1;
                oa += self.a_bs[ax];
                ob += self.b_bs[ax];
                if idx[ax] < self.batch[ax] {
                    break;
                }
                oa -= self.a_bs[ax] * self.batch[ax] as isize;
                ob -= self.b_bs[ax] * self.batch[ax] as isize;
                idx[ax] = 0;
            }
        }
        out
    }
}

/// Whether strides of a `rows x cols` matrix can be handed to `gemm` as they are
/// (non-negative, and no zero stride on an axis longer than one).
fn gemm_friendly(rows: usize, cols: usize, rs: isize, cs: isize) -> bool {
    rs >= 0 && cs >= 0 && (rows <= 1 || rs > 0) && (cols <= 1 || cs > 0)
}

/// Product of `a` (`[..., m, k]`) and `b` (`[..., k, n]`) into a dense array of `out_shape`
/// (`[broadcast batch..., m, n]`). Both operands have dtype `dtype` and at least two axes.
/// `Err(Error::OutOfMemory)` when the output (or a copy of an operand) cannot be allocated.
pub fn matmul(
    a: &Data,
    a_shape: &[usize],
    b: &Data,
    b_shape: &[usize],
    out_shape: &[usize],
    dtype: DType,
) -> Result<Data> {
    Ok(match dtype {
        DType::F32 => Data::from_vec(matmul_typed::<f32>(a, a_shape, b, b_shape, out_shape)?, out_shape),
        DType::F64 => Data::from_vec(matmul_typed::<f64>(a, a_shape, b, b_shape, out_shape)?, out_shape),
        DType::F16 => Data::from_vec(matmul_typed::<f16>(a, a_shape, b, b_shape, out_shape)?, out_shape),
        DType::BF16 => {
            let wa = Data::from_vec(super::elementwise::unary_map::<bf16, f32>(a, a_shape, bf16::to_f32)?, a_shape);
            let wb = Data::from_vec(super::elementwise::unary_map::<bf16, f32>(b, b_shape, bf16::to_f32)?, b_shape);
            let r = Data::from_vec(matmul_typed::<f32>(&wa, a_shape, &wb, b_shape, out_shape)?, out_shape);
            Data::from_vec(super::elementwise::unary_map::<f32, bf16>(&r, out_shape, bf16::from_f32)?, out_shape)
        }
        DType::Bool => Data::from_vec(matmul_bool(a, a_shape, b, b_shape, out_shape)?, out_shape),
        DType::U8 => Data::from_vec(matmul_int::<u8>(a, a_shape, b, b_shape, out_shape)?, out_shape),
        DType::U32 => Data::from_vec(matmul_int::<u32>(a, a_shape, b, b_shape, out_shape)?, out_shape),
        DType::I32 => Data::from_vec(matmul_int::<i32>(a, a_shape, b, b_shape, out_shape)?, out_shape),
        DType::I64 => Data::from_vec(matmul_int::<i64>(a, a_shape, b, b_shape, out_shape)?, out_shape),
    })
}

fn geometry(a: &Data, a_shape: &[usize], b: &Data, b_shape: &[usize], out_shape: &[usize]) -> Geometry {
    let (na, nb, no) = (a_shape.len(), b_shape.len(), out_shape.len());
    let batch = out_shape[..no - 2].to_vec();
    Geometry {
        m: out_shape[no - 2],
        n: out_shape[no - 1],
        k: a_shape[na - 1],
        a_rs: a.strides[na - 2],
        a_cs: a.strides[na - 1],
        b_rs: b.strides[nb - 2],
        b_cs: b.strides[nb - 1],
        a_bs: broadcast_strides(&a_shape[..na - 2], &a.strides[..na - 2], &batch).to_vec(),
        b_bs: broadcast_strides(&b_shape[..nb - 2], &b.strides[..nb - 2], &batch).to_vec(),
        batch,
    }
}

/// Element types `gemm` multiplies natively, with a plain-loop accumulator type.
trait GemmFloat: BufferElement + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {
    type Acc: Copy + Default + std::ops::Add<Output = Self::Acc> + std::ops::Mul<Output = Self::Acc>;
    const ZERO: Self;
    const ONE: Self;
    fn acc(self) -> Self::Acc;
    fn from_acc(a: Self::Acc) -> Self;
}
impl GemmFloat for f32 {
    type Acc = f32;
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    #[inline(always)]
    fn acc(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_acc(a: f32) -> f32 {
        a
    }
}
impl GemmFloat for f64 {
    type Acc = f64;
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    #[inline(always)]
    fn acc(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_acc(a: f64) -> f64 {
        a
    }
}
impl GemmFloat for f16 {
    type Acc = f32;
    const ZERO: f16 = f16::ZERO;
    const ONE: f16 = f16::ONE;
    #[inline(always)]
    fn acc(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn from_acc(a: f32) -> f16 {
        f16::from_f32(a)
    }
}

/// Copy a view to a dense buffer when its matrix strides are unsuitable for `gemm`.
fn friendly<'a, T: BufferElement>(d: &'a Data, shape: &[usize]) -> Result<std::borrow::Cow<'a, Data>> {
    let n = shape.len();
    Ok(if gemm_friendly(shape[n - 2], shape[n - 1], d.strides[n - 2], d.strides[n - 1]) {
        std::borrow::Cow::Borrowed(d)
    } else {
        std::borrow::Cow::Owned(Data::from_vec(d.try_to_vec::<T>(shape)?, shape))
    })
}

/// Whether the right operand is stored column-major (a transposed view, as in the backward
/// `g @ Wᵀ` of a dense layer) and the product is large enough that copying it row-major first
/// pays: `gemm`'s packing of a column-major right operand is slow (measured on AVX-512, f32,
/// 128×512 @ (512×512)ᵀ: 60 GFLOP/s on one thread, against 110 for the row-major operand).
/// The copy costs k·n against the product's m·k·n, so it is skipped for short left operands
/// (m < 64: a recurrence's 32×256 @ (256×256)ᵀ spent 8 % of its time re-copying the weight).
fn column_major_rhs_worth_copying(b: &Data, b_shape: &[usize], a_shape: &[usize]) -> bool {
    let nb = b_shape.len();
    let (k, n) = (b_shape[nb - 2], b_shape[nb - 1]);
    let m = a_shape[a_shape.len() - 2];
    b.strides[nb - 2] == 1 && b.strides[nb - 1] != 1 && n > 1 && m >= 64 && m * n * k >= GEMM_PARALLEL_FLOPS
}

fn matmul_typed<T: GemmFloat>(
    a: &Data,
    a_shape: &[usize],
    b: &Data,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<Vec<T>> {
    let total = crate::shape::numel(out_shape);
    let a = friendly::<T>(a, a_shape)?;
    let b = if column_major_rhs_worth_copying(b, b_shape, a_shape) {
        std::borrow::Cow::Owned(Data::from_vec(b.try_to_vec::<T>(b_shape)?, b_shape))
    } else {
        friendly::<T>(b, b_shape)?
    };
    // `gemm` reads through raw pointers: check the views against their buffers (O(ndim)), so
    // that a view paired with the wrong shape panics here instead of reading out of bounds.
    assert!(
        a.lies_inside(a_shape) && b.lies_inside(b_shape),
        "cotangent internal error: matmul operand views {a_shape:?} / {b_shape:?} reach outside their buffers"
    );
    let g = geometry(&a, a_shape, &b, b_shape, out_shape);
    if total == 0 || g.k == 0 {
        return try_filled(T::ZERO, total);
    }
    // Both the plain loop and `gemm` (with `read_dst = false`) overwrite every output element,
    // so the output is not zeroed first (for the backward products of a dense layer that saves
    // a pass over 1-2 MB).
    let mut out: Vec<T> = try_with_capacity(total)?;
    products_into(&mut out.spare_capacity_mut()[..total], &a, &b, &g);
    // SAFETY: `out` has room for `total` elements. `total` is the batch size times m·n and
    // `g.offsets` yields one offset pair per batch element, so `products_into` hands each of the
    // `total / (m·n)` chunks of m·n slots to one product, and every product path (plain loop,
    // `gemm` with `read_dst = false`, scratch + transpose) writes all m·n elements of its chunk.
    // (A panic before this point leaves `out` empty.)
    unsafe { out.set_len(total) };
    Ok(out)
}

/// How a batch of products splits its work over rayon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// One thread for the whole batch.
    None,
    /// Each product uses all of rayon's threads inside `gemm`, one after the other.
    InsideGemm,
    /// One product per rayon task.
    OverBatch,
}

/// The [`Split`] of `nbatch` products of `flops` multiply-adds each: inside `gemm` from
/// [`GEMM_PARALLEL_FLOPS`] a product, over the batch from [`BATCH_PARALLEL_FLOPS`] in all.
fn split_of(flops: usize, nbatch: usize) -> Split {
    if flops >= GEMM_PARALLEL_FLOPS {
        Split::InsideGemm
    } else if nbatch > 1 && flops.saturating_mul(nbatch) >= BATCH_PARALLEL_FLOPS {
        Split::OverBatch
    } else {
        Split::None
    }
}

/// Whether a product of operands shaped `a_shape` (`[.., m, k]`) and `b_shape` (`[.., k, n]`)
/// into `out_shape` may split its work over rayon: the rule [`products_into`] follows
/// ([`split_of`]). The evaluator asks it to decide where the product's kernel runs.
pub(crate) fn may_split(a_shape: &[usize], b_shape: &[usize], out_shape: &[usize]) -> bool {
    let (na, nb, no) = (a_shape.len(), b_shape.len(), out_shape.len());
    if na < 2 || nb < 2 || no < 2 {
        return false;
    }
    let (m, k, n) = (a_shape[na - 2], a_shape[na - 1], b_shape[nb - 1]);
    let flops = m.saturating_mul(n).saturating_mul(k);
    split_of(flops, out_shape[..no - 2].iter().product()) != Split::None
}

/// Every batch element's product written into `out` (`batch * m * n` elements, each written).
fn products_into<T: GemmFloat>(out: &mut [std::mem::MaybeUninit<T>], a: &Data, b: &Data, g: &Geometry) {
    let (sa, sb) = (a.buf.as_slice::<T>(), b.buf.as_slice::<T>());
    let offs = g.offsets(a.offset, b.offset);
    let mn = g.m * g.n;
    let flops = g.m * g.n * g.k;
    let one = |dst: &mut [std::mem::MaybeUninit<T>], (oa, ob): (isize, isize), par: gemm::Parallelism| {
        let ops = Operands { sa, oa, sb, ob };
        if flops < SMALL_FLOPS {
            small_loop::<T>(g, ops, dst);
        } else if column_major_output_cheaper(g) {
            product_through_column_major(g, ops, dst, par);
        } else {
            // SAFETY: `dst` is a unique borrow of exactly m·n slots, addressed with row stride n
            // and column stride 1 (element (i, j) at i·n + j < m·n); `MaybeUninit<T>` has `T`'s
            // layout. The operands are views of `sa` / `sb` that `matmul_typed` checked to lie
            // inside their buffers (every element of an m×k / k×n matrix at this batch element's
            // offset), with non-negative strides (`friendly` copied any other view), so gemm
            // reads in bounds.
            unsafe { gemm_into(g, ops, dst.as_mut_ptr() as *mut T, (g.n as isize, 1), par) }
        }
    };
    let split = split_of(flops, offs.len());
    if split == Split::OverBatch {
        out.par_chunks_mut(mn).zip(offs.par_iter()).for_each(|(dst, &o)| one(dst, o, gemm::Parallelism::None));
    } else {
        let par = if split == Split::InsideGemm && rayon::current_num_threads() > 1 {
            gemm::Parallelism::Rayon(0)
        } else {
            gemm::Parallelism::None
        };
        for (dst, &o) in out.chunks_mut(mn).zip(&offs) {
            one(dst, o, par);
        }
    }
}

/// The operands of one product of a batch: both buffers and the offsets of this batch
/// element's matrices in them (strides are in the [`Geometry`]).
#[derive(Clone, Copy)]
struct Operands<'a, T> {
    sa: &'a [T],
    oa: isize,
    sb: &'a [T],
    ob: isize,
}

/// One product `a @ b` of the geometry `g` and operands `ops`, written
/// by `gemm` into `dst` with the given (row, column) strides; every element is overwritten
/// (`read_dst = false`, so `dst` need not be initialised).
///
/// # Safety
/// `dst` must be valid for writes of the m×n elements that `dst_strides` address (element
/// (i, j) at `i * rs + j * cs`), and nothing else may access them during the call. The offsets
/// of `ops` and the strides of `g` must describe valid views of `ops.sa` and `ops.sb` (as built
/// by [`geometry`]), so that every offset `oa + i*a_rs + p*a_cs` (i < m, p < k) lies inside
/// `sa`, likewise `ob + p*b_rs + j*b_cs` (p < k, j < n) inside `sb`. `gemm` trusts all of these
/// without checking.
unsafe fn gemm_into<T: GemmFloat>(
    g: &Geometry,
    Operands { sa, oa, sb, ob }: Operands<'_, T>,
    dst: *mut T,
    dst_strides: (isize, isize),
    par: gemm::Parallelism,
) {
    let (dst_rs, dst_cs) = dst_strides;
    // SAFETY: gemm reads `m·k` elements of the left operand and `k·n` of the right at the given
    // strides and (with `read_dst = false`) only writes the m×n destination: exactly the ranges
    // the caller promised valid. `oa` / `ob` lie inside `sa` / `sb` by that promise (for m, n, k
    // ≥ 1, which `matmul_typed` ensures), so `offset` stays inside the slices.
    unsafe {
        gemm::gemm::<T>(
            g.m,
            g.n,
            g.k,
            dst,
            dst_cs,
            dst_rs,
            false,
            sa.as_ptr().offset(oa),
            g.a_cs,
            g.a_rs,
            sb.as_ptr().offset(ob),
            g.b_cs,
            g.b_rs,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            par,
        )
    }
}

/// Whether one product is cheaper computed into a column-major scratch matrix and transposed
/// into the row-major output than written row-major directly.
///
/// `gemm`'s micro-kernel wants a column-major left operand; for a row-major output it computes
/// `Cᵀ = Bᵀ Aᵀ`, whose left operand `Bᵀ` is column-major only when `B` is row-major. When `B`
/// is column-major (a transposed view, as the weight in the backward `g @ Wᵀ` of a dense layer)
/// that orientation packs all k·n elements of `B` with a strided gather on every call. The
/// column-major orientation `C = A B` instead reads `B` in place (its columns are contiguous) and
/// packs only `A` (m·k elements, none if `A` is column-major too), at the price of transposing
/// the m·n output. Chosen when that moves fewer elements.
///
/// Also chosen for a narrow output (n < 16 columns, m ≥ 64 rows) when `A` is column-major (the
/// weight gradient `hᵀ @ g` of a classifier head): the row-major orientation runs the kernel's
/// vector lanes along n, mostly idle, the column-major one along m, with nothing to pack.
/// `512×128 @ 128×10`: 27 → 13 µs. With a row-major `A` the packing gather costs more than the
/// lanes gain (`128×512 @ 512×10`: 21 µs row-major, 149 µs column-major).
fn column_major_output_cheaper(g: &Geometry) -> bool {
    if g.m <= 1 || g.n <= 1 {
        return false;
    }
    let a_column_major = g.a_rs == 1;
    let narrow = g.n < 16 && g.m >= 64 && a_column_major;
    let b_column_major = g.b_rs == 1 && g.b_cs != 1;
    let a_packing = if a_column_major { 0 } else { g.m * g.k };
    narrow || (b_column_major && a_packing + g.m * g.n < g.k * g.n)
}

/// One product computed column-major into a scratch matrix, then transposed into `dst`
/// (row-major m×n); see [`column_major_output_cheaper`].
fn product_through_column_major<T: GemmFloat>(
    g: &Geometry,
    ops: Operands<'_, T>,
    dst: &mut [std::mem::MaybeUninit<T>],
    par: gemm::Parallelism,
) {
    let (m, n) = (g.m, g.n);
    let mut scratch: Vec<T> = Vec::with_capacity(m * n);
    // SAFETY: the scratch has room for m·n elements, addressed with row stride 1 and column
    // stride m (element (i, j) at i + j·m < m·n, column-major); `gemm` overwrites every one of
    // them (`read_dst = false`), so they are initialised when the length is set. The operands
    // are this batch element's views, valid as in `products_into` (the caller).
    unsafe {
        gemm_into(g, ops, scratch.as_mut_ptr(), (1, m as isize), par);
        scratch.set_len(m * n);
    }
    super::transpose::transpose_into(&scratch, m, m, n, dst);
}

/// Reduced positions per block of the plain loop's inner products (see [`small_loop_blocked`]).
const SMALL_K_BLOCK: usize = 128;
/// The widest output row [`small_loop_blocked`] handles (its partial sums live on the stack).
const SMALL_BLOCKED_MAX_N: usize = 32;

/// Plain-loop product of one small matrix pair (row of `a` times `b`, accumulated per output row
/// in a fixed order). Inner products longer than [`SMALL_K_BLOCK`] are summed blockwise and
/// pairwise ([`small_loop_blocked`]).
#[inline]
fn small_loop<T: GemmFloat>(g: &Geometry, ops: Operands<'_, T>, dst: &mut [std::mem::MaybeUninit<T>]) {
    if g.k > SMALL_K_BLOCK && g.n <= SMALL_BLOCKED_MAX_N {
        // (below SMALL_FLOPS, k > 128 means m·n < 32)
        return small_loop_blocked(g, ops, dst);
    }
    let Operands { sa, oa, sb, ob } = ops;
    let mut acc = [<T::Acc>::default(); 64];
    let mut heap;
    let acc: &mut [T::Acc] = if g.n <= 64 {
        &mut acc[..g.n]
    } else {
        heap = vec![<T::Acc>::default(); g.n];
        &mut heap
    };
    for i in 0..g.m {
        acc.iter_mut().for_each(|v| *v = Default::default());
        let arow = oa + i as isize * g.a_rs;
        for p in 0..g.k {
            let aip = sa[(arow + p as isize * g.a_cs) as usize].acc();
            let brow = ob + p as isize * g.b_rs;
            if g.b_cs == 1 {
                let row = &sb[brow as usize..brow as usize + g.n];
                for (c, &bv) in acc.iter_mut().zip(row) {
                    *c = *c + aip * bv.acc();
                }
            } else {
                for (j, c) in acc.iter_mut().enumerate() {
                    *c = *c + aip * sb[(brow + j as isize * g.b_cs) as usize].acc();
                }
            }
        }
        for (d, &c) in dst[i * g.n..(i + 1) * g.n].iter_mut().zip(acc.iter()) {
            d.write(T::from_acc(c));
        }
    }
}

/// [`small_loop`] for a long inner dimension: every output's inner product is summed over
/// blocks of [`SMALL_K_BLOCK`] positions (in order inside a block), and the blocks' sums are
/// combined by a pairwise tree (halves split at a block boundary, as the sums of
/// `backend::cpu::sum`), so the rounding error grows with `SMALL_K_BLOCK + log2(k)` instead of
/// `k`. The order depends only on the shapes.
fn small_loop_blocked<T: GemmFloat>(g: &Geometry, ops: Operands<'_, T>, dst: &mut [std::mem::MaybeUninit<T>]) {
    for i in 0..g.m {
        let acc = small_tree(g, ops, i, 0, g.k);
        for (d, &c) in dst[i * g.n..(i + 1) * g.n].iter_mut().zip(&acc[..g.n]) {
            d.write(T::from_acc(c));
        }
    }
}

/// Row `i` of the product over the inner positions `lo..hi` (see [`small_loop_blocked`]).
fn small_tree<T: GemmFloat>(
    g: &Geometry,
    ops: Operands<'_, T>,
    i: usize,
    lo: usize,
    hi: usize,
) -> [T::Acc; SMALL_BLOCKED_MAX_N] {
    if hi - lo > SMALL_K_BLOCK {
        let mid = lo + (hi - lo).div_ceil(SMALL_K_BLOCK) / 2 * SMALL_K_BLOCK;
        let mut a = small_tree(g, ops, i, lo, mid);
        let b = small_tree(g, ops, i, mid, hi);
        for (x, &y) in a.iter_mut().zip(&b) {
            *x = *x + y;
        }
        return a;
    }
    let Operands { sa, oa, sb, ob } = ops;
    let mut acc = [<T::Acc>::default(); SMALL_BLOCKED_MAX_N];
    let arow = oa + i as isize * g.a_rs;
    for p in lo..hi {
        let aip = sa[(arow + p as isize * g.a_cs) as usize].acc();
        let brow = ob + p as isize * g.b_rs;
        for (j, c) in acc[..g.n].iter_mut().enumerate() {
            *c = *c + aip * sb[(brow + j as isize * g.b_cs) as usize].acc();
        }
    }
    acc
}

fn matmul_int<T: BufferElement>(
    a: &Data,
    a_shape: &[usize],
    b: &Data,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<Vec<T>> {
    let g = geometry(a, a_shape, b, b_shape, out_shape);
    let total = crate::shape::numel(out_shape);
    let mut out = try_filled(T::from_i64(0), total)?;
    if total == 0 || g.k == 0 {
        return Ok(out);
    }
    let (sa, sb) = (a.buf.as_slice::<T>(), b.buf.as_slice::<T>());
    let mn = g.m * g.n;
    let offs = g.offsets(a.offset, b.offset);
    let mut acc = vec![0i64; g.n];
    for (dst, &(oa, ob)) in out.chunks_mut(mn).zip(&offs) {
        for i in 0..g.m {
            acc.iter_mut().for_each(|v| *v = 0);
            for p in 0..g.k {
                let aip = sa[(oa + i as isize * g.a_rs + p as isize * g.a_cs) as usize].to_i64();
                let brow = ob + p as isize * g.b_rs;
                for (j, c) in acc.iter_mut().enumerate() {
                    *c = c.wrapping_add(aip.wrapping_mul(sb[(brow + j as isize * g.b_cs) as usize].to_i64()));
                }
            }
            for (d, &c) in dst[i * g.n..(i + 1) * g.n].iter_mut().zip(&acc) {
                *d = T::from_i64(c);
            }
        }
    }
    Ok(out)
}

fn matmul_bool(a: &Data, a_shape: &[usize], b: &Data, b_shape: &[usize], out_shape: &[usize]) -> Result<Vec<bool>> {
    let g = geometry(a, a_shape, b, b_shape, out_shape);
    let total = crate::shape::numel(out_shape);
    let mut out = try_filled(false, total)?;
    if total == 0 || g.k == 0 {
        return Ok(out);
    }
    let (sa, sb) = (a.buf.as_slice::<bool>(), b.buf.as_slice::<bool>());
    let mn = g.m * g.n;
    let offs = g.offsets(a.offset, b.offset);
    for (dst, &(oa, ob)) in out.chunks_mut(mn).zip(&offs) {
        for i in 0..g.m {
            for p in 0..g.k {
                if sa[(oa + i as isize * g.a_rs + p as isize * g.a_cs) as usize] {
                    let brow = ob + p as isize * g.b_rs;
                    for (j, d) in dst[i * g.n..(i + 1) * g.n].iter_mut().enumerate() {
                        *d |= sb[(brow + j as isize * g.b_cs) as usize];
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod split_tests {
    use super::*;

    #[test]
    fn products_split_by_their_multiply_adds() {
        // a 64-step chunk's 4 heads of 64×64×64: one thread (no hand-over to the pool)
        assert!(!may_split(&[1, 4, 64, 64], &[1, 4, 64, 64], &[1, 4, 64, 64]));
        assert_eq!(split_of(64 * 64 * 64, 4), Split::None);
        // one 96³ product splits inside gemm; 16 heads of 64³ split over the batch
        assert!(may_split(&[96, 96], &[96, 96], &[96, 96]));
        assert_eq!(split_of(96 * 96 * 96, 1), Split::InsideGemm);
        assert!(may_split(&[16, 64, 64], &[64, 64], &[16, 64, 64]));
        assert_eq!(split_of(64 * 64 * 64, 16), Split::OverBatch);
        // tiny products never split, however many; vectors are no products here
        assert!(!may_split(&[8, 8], &[8, 8], &[8, 8]));
        assert!(!may_split(&[64], &[64, 64], &[64]));
        // sizes whose product overflows still split, not wrap around
        assert_eq!(split_of(usize::MAX, 2), Split::InsideGemm);
        assert_eq!(split_of(GEMM_PARALLEL_FLOPS - 1, usize::MAX), Split::OverBatch);
    }
}
