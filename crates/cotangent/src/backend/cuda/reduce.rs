//! Reductions (sum, prod, max, min, all, any), arg-max/arg-min, logsumexp, softmax and
//! cumulative sums/products, with the CPU kernels' semantics (`backend/cpu/reduce.rs`,
//! `primitives/reduce.rs`): NaN propagates through max/min (and wins arg-max/arg-min, first NaN),
//! ties pick the first index, integer sums and products wrap in i64 and are truncated, f16/bf16
//! accumulate in f32.
//!
//! Plans, chosen from the layout (axes of extent 1 are ignored):
//! * **row**: the reduced axes are the innermost of a dense input, or become so once the kept
//!   axes are moved in front (a strided input is copied to that order first): one warp (short
//!   rows) or one 256-thread block (long rows) per output; each thread folds a fixed stride of
//!   the row, then a shared-memory tree combines the threads in a fixed order;
//! * **column**: the reduced axes are one dense block in the middle or front of a dense input
//!   (`[outer, r, inner]`): one thread per output walks the reduced block in order, reading
//!   consecutive outputs' elements side by side (coalesced);
//! * **two passes**: few long rows (e.g. the whole array): rows are cut into fixed chunks of
//!   [`CHUNK`] elements reduced into an accumulator array, which a second row pass reduces.
//!
//! Float sums (and so means and variances) are compensated: every accumulator is a pair
//! `(s, c)` with the rounding error of each addition collected in `c` (Neumaier's two-sum,
//! skipped once the sum is infinite or NaN, so inf/NaN propagate as in a plain sum). The error of
//! a sum is then about `2u·|Σx| + n·u²·Σ|x|` whatever the order — within the CPU's documented
//! bound for blocked pairwise sums (`backend/cpu/sum.rs`), where a plain per-thread loop over a
//! long row or column is off by `n/threads · u · Σ|x|`.
//!
//! Results never depend on the grid size or on timing: every combination order is fixed by the
//! row length alone, so repeated runs give identical bits.
use super::codegen::{self, PRELUDE};
use super::device::CudaDevice;
use super::elementwise::to_contiguous;
use super::storage::check_views;
use super::storage::CudaData;
use crate::primitives::reduce::{ArgReduceOp, ReduceOp, ScanOp};
use crate::shape::{contiguous_strides, numel};
use crate::{DType, Result};
use std::ffi::c_void;
use std::sync::Arc;

/// Elements per chunk of the two-pass plan.
pub const CHUNK: usize = 16384;
const BLOCK: u32 = 256;
/// A column fold (see `fold_columns`) runs one thread per output down the whole column with at
/// least this many outputs ...
const COLUMN_MIN_OUTPUTS: usize = 1 << 16;
/// ... or columns at most this long; longer columns of fewer outputs fold in tiled passes of
/// [`COLUMN_SPLIT`] rows. One thread per output walking a long column keeps one or two loads in
/// flight per thread on a handful of SMs: the bias gradient of a `[4096, 512]` activation (512
/// threads, 4096 dependent steps each) took hundreds of microseconds that way. (Before the tiled
/// passes such sums took a transposing copy and the row plan, 19 + 7.6 µs on an H100 for that
/// gradient, then three or four chunked one-thread-per-output passes, 12 µs; measured with ncu.)
const COLUMN_MAX_SHORT: usize = 32;
/// Rows per block of a tiled column pass: with tiles of 32 columns, each of a block's 8 threads
/// per column folds 8 rows, so its [`COLUMN_LOADS`] loads go out in one round. With 256 rows a
/// thread made four dependent rounds of loads and a `[4096, 512]` bias gradient's pass ran at
/// ~1.1 TB/s (7.4 µs on an H100, ncu), half the GPU idle behind memory latency.
const COLUMN_SPLIT: usize = 64;
/// Columns of at most this many rows fold in one tiled pass (a split of the whole column)
/// rather than splits of [`COLUMN_SPLIT`] rows and a second pass over their accumulators: each
/// thread then makes at most two rounds of [`COLUMN_LOADS`] loads, and a small gradient saves a
/// launch (the bias gradients of a batch-128 MLP step took two kernels each, ~2.5 µs apiece on
/// an H100, for 256 KB of data).
const COLUMN_ONE_PASS_ROWS: usize = 2 * COLUMN_SPLIT;
/// Loads a thread of a column kernel issues before folding them (in order): a fold is a chain
/// of dependent steps, and one load in flight per thread left the tiled pass of a `[4096, 512]`
/// bias gradient at ~1 TB/s on an H100 (8.7 µs, ncu).
const COLUMN_LOADS: usize = 8;
/// Elements per thread of a chunked cumulative sum (at least; `sqrt(r)` for longer axes).
const SCAN_CHUNK: usize = 1024;

/// How one reduction folds elements: accumulator type, how an element enters it, the combine
/// step, the initial value and how the result is stored.
struct Fold {
    /// Declaration of the accumulator type `A` (typedef or struct).
    acc_decl: String,
    /// Expression lifting the loaded element `v` (at index `j` of its row) into an `A`.
    lift: String,
    /// Body of `A comb(A a, A b)`.
    comb: String,
    /// Initial accumulator.
    init: String,
    /// The finished accumulator `acc` as a C value (stored as an output element with
    /// [`codegen::store`]; a second pass lifts it back with `lift`).
    value: String,
    /// Output dtype.
    out: DType,
    /// The dtype that holds a (finished) accumulator between the passes of a two-pass plan.
    acc: DType,
}

/// The accumulator type and fold of a compensated float sum over values of C type `t`:
/// `A = {s, c}` holds the value `s + c`; `comb` adds with Neumaier's two-sum (the exact rounding
/// error of `a.s + b.s` goes to `c`) until the sum stops being finite.
fn compensated_sum(t: &str, out: DType, acc: DType) -> Fold {
    Fold {
        acc_decl: format!("struct A {{ {t} s; {t} c; }};"),
        lift: format!("A{{({t})(v), ({t})0}}"),
        comb: format!(
            "{t} s = a.s + b.s; {t} e = (s - s == ({t})0) ? ((fabs(a.s) >= fabs(b.s)) ? (a.s - s) + b.s : (b.s - s) + a.s) : ({t})0; \
             return A{{s, (a.c + b.c) + e}};"
        ),
        init: format!("A{{({t})0, ({t})0}}"),
        value: "((acc.s - acc.s == 0) ? acc.s + acc.c : acc.s)".into(),
        out,
        acc,
    }
}

/// The dtype of the C type a kernel computes `d` in (`f16`/`bf16` widen to `f32`).
fn compute_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

fn nan_extremum(cmp: &str) -> String {
    format!("if (a != a) return a; if (b != b) return b; return (b {cmp} a) ? b : a;")
}

/// The fold of `op` over elements of `d`, accumulating into `acc` (the input dtype in a first
/// or only pass; the accumulator dtype in a second pass), storing `out`. `Err` (a message) for
/// `all`/`any` of a non-bool input.
fn fold(op: ReduceOp, d: DType, out: DType) -> std::result::Result<Fold, String> {
    let a = codegen::compute(d);
    let plain = |comb: &str, init: &str| Fold {
        acc_decl: format!("typedef {a} A;"),
        lift: "(A)(v)".into(),
        comb: comb.to_string(),
        init: init.to_string(),
        value: "acc".into(),
        out,
        acc: compute_dtype(d),
    };
    let inf = if d == DType::F64 { "CT_INF_D" } else { "CT_INF_F" };
    Ok(match (class_of(d), op) {
        (C::Bool, ReduceOp::Max | ReduceOp::Sum | ReduceOp::Any) => plain("return a | b;", "false"),
        (C::Bool, ReduceOp::Min | ReduceOp::Prod | ReduceOp::All) => plain("return a & b;", "true"),
        (_, ReduceOp::All | ReduceOp::Any) => {
            return Err(format!("{}: needs a bool input, got {d}", op.name()));
        }
        (C::Int, ReduceOp::Sum | ReduceOp::Prod) => {
            let sym = if op == ReduceOp::Sum { "+" } else { "*" };
            Fold {
                acc_decl: "typedef i64 A;".into(),
                lift: "(A)(v)".into(),
                comb: format!("return (A)((u64)a {sym} (u64)b);"),
                init: if op == ReduceOp::Sum { "0" } else { "1" }.into(),
                value: "acc".into(),
                out,
                acc: DType::I64,
            }
        }
        (C::Int, ReduceOp::Max) => plain("return b > a ? b : a;", int_bound(d, true)),
        (C::Int, ReduceOp::Min) => plain("return b < a ? b : a;", int_bound(d, false)),
        (C::Float, ReduceOp::Sum) => compensated_sum(a, out, compute_dtype(d)),
        (C::Float, ReduceOp::Prod) => plain("return a * b;", "1"),
        (C::Float, ReduceOp::Max) => plain(&nan_extremum(">"), &format!("-{inf}")),
        (C::Float, ReduceOp::Min) => plain(&nan_extremum("<"), inf),
    })
}

fn int_bound(d: DType, min: bool) -> &'static str {
    match (d, min) {
        (DType::U8, true) | (DType::U32, true) => "0",
        (DType::U8, false) => "255",
        (DType::U32, false) => "4294967295u",
        (DType::I32, true) => "(-2147483647 - 1)",
        (DType::I32, false) => "2147483647",
        (DType::I64, true) => "(-9223372036854775807LL - 1)",
        _ => "9223372036854775807LL",
    }
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum C {
    Bool,
    Int,
    Float,
}
fn class_of(d: DType) -> C {
    if d == DType::Bool {
        C::Bool
    } else if d.is_float() {
        C::Float
    } else {
        C::Int
    }
}

/// The parts of a fold kernel's source that depend on the fold and dtype: `head` (the prelude,
/// the accumulator type `A` and `comb`), the C types of the output and input elements, the
/// initial accumulator, the load of the element at `index` (an expression in `p` and `j`) as
/// `v`, its lift into an `A`, and the store of the finished accumulator `acc`.
struct FoldText {
    head: String,
    out_t: &'static str,
    in_t: &'static str,
    init: String,
    load: String,
    lift: String,
    fin: String,
}

fn fold_text(d: DType, f: &Fold, index: &str) -> FoldText {
    FoldText {
        head: format!("{PRELUDE}\n{}\n__device__ __forceinline__ A comb(A a, A b) {{ {} }}", f.acc_decl, f.comb),
        out_t: codegen::storage(f.out),
        in_t: codegen::storage(d),
        init: f.init.clone(),
        load: codegen::load(d, index),
        lift: f.lift.clone(),
        fin: codegen::store(f.out, &f.value),
    }
}

/// Source of the row kernel: `out[row] = fold(x[q*r + start .. q*r + end])` for logical rows
/// `row = q * chunks + c` (chunk `c` of row `q`), `tpr` threads per row.
fn row_source(name: &str, d: DType, f: &Fold, tpr: u32) -> String {
    let FoldText { head, out_t, in_t, init, load, lift, fin } = fold_text(d, f, "p[j]");
    format!(
        r#"{head}
extern "C" __global__ void {name}({out_t}* __restrict__ out, const {in_t}* __restrict__ x, i64 rows, i64 chunks, i64 r, i64 chunk) {{
    __shared__ A sh[{BLOCK}];
    const int TPR = {tpr};
    const int RPB = {BLOCK} / TPR;
    int lane = threadIdx.x % TPR, sub = threadIdx.x / TPR;
    i64 total = rows * chunks;
    for (i64 base = (i64)blockIdx.x * RPB; base < total; base += (i64)gridDim.x * RPB) {{
        i64 row = base + sub;
        A acc = {init};
        if (row < total) {{
            i64 q = row / chunks, c = row - q * chunks;
            i64 start = c * chunk, end = start + chunk;
            if (end > r) end = r;
            const {in_t}* p = x + q * r;
            for (i64 j = start + lane; j < end; j += TPR) {{ auto v = {load}; acc = comb(acc, {lift}); }}
        }}
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int s = TPR / 2; s > 0; s >>= 1) {{
            if (lane < s) sh[threadIdx.x] = comb(sh[threadIdx.x], sh[threadIdx.x + s]);
            __syncthreads();
        }}
        if (lane == 0 && row < total) {{ acc = sh[threadIdx.x]; out[row] = {fin}; }}
        __syncthreads();
    }}
}}
"#
    )
}

/// Source of the column kernel over a dense `[outer, r, inner]` input, folding the middle axis in
/// chunks of `chunk` rows: `out[(o * chunks + c) * inner + k] = fold_{j in chunk c}
/// x[(o * r + j) * inner + k]`. With one chunk (`chunk >= r`) it is the whole fold; with several, `out` holds
/// the chunks' accumulators, which the next pass folds the same way.
fn column_source(name: &str, d: DType, f: &Fold) -> String {
    let FoldText { head, out_t, in_t, init, load, lift, fin } = fold_text(d, f, "p[j * inner]");
    let load_w = codegen::load(d, "w[u]");
    format!(
        r#"{head}
extern "C" __global__ void {name}({out_t}* __restrict__ out, const {in_t}* __restrict__ x, i64 outer, i64 r, i64 inner, i64 chunk, i64 chunks) {{
    CT_LOOP(t, outer * chunks * inner) {{
        i64 k = t % inner, oc = t / inner;
        i64 c = oc % chunks, o = oc / chunks;
        i64 start = c * chunk, n = r - start < chunk ? r - start : chunk;
        const {in_t}* p = x + (o * r + start) * inner + k;
        A acc = {init};
        i64 j = 0;
        for (; j + {COLUMN_LOADS} <= n; j += {COLUMN_LOADS}) {{
            {in_t} w[{COLUMN_LOADS}];
            _Pragma("unroll") for (int u = 0; u < {COLUMN_LOADS}; u++) w[u] = p[(j + u) * inner];
            _Pragma("unroll") for (int u = 0; u < {COLUMN_LOADS}; u++) {{ auto v = {load_w}; acc = comb(acc, {lift}); }}
        }}
        for (; j < n; j++) {{ auto v = {load}; acc = comb(acc, {lift}); }}
        out[t] = {fin};
    }}
}}
"#
    )
}

/// Source of the tiled column kernel over a dense `[outer, r, inner]` input: a 256-thread block
/// folds a tile of `tw` neighbouring columns (coalesced loads) over one split of `split` rows,
/// `256 / tw` threads per column each folding every `256 / tw`-th row of the split, then a
/// shared-memory tree combines those threads in a fixed order: `out[(o * splits + s) * inner +
/// k] = fold_{j in split s} x[(o * r + j) * inner + k]`.
fn tile_source(name: &str, d: DType, f: &Fold, tw: u32) -> String {
    let FoldText { head, out_t, in_t, init, load, lift, fin } = fold_text(d, f, "p[j * inner]");
    let load_w = codegen::load(d, "w[u]");
    format!(
        r#"{head}
extern "C" __global__ void {name}({out_t}* __restrict__ out, const {in_t}* __restrict__ x, i64 outer, i64 r, i64 inner, i64 split, i64 splits) {{
    __shared__ A sh[{BLOCK}];
    const int TW = {tw};
    const int RL = {BLOCK} / TW;
    int lx = threadIdx.x % TW, ly = threadIdx.x / TW;
    i64 tiles = (inner + TW - 1) / TW;
    i64 total = outer * splits * tiles;
    for (i64 b = blockIdx.x; b < total; b += gridDim.x) {{
        i64 tile = b % tiles, os = b / tiles;
        i64 s = os % splits, o = os / splits;
        i64 k = tile * TW + lx;
        i64 start = s * split, end = start + split < r ? start + split : r;
        A acc = {init};
        if (k < inner) {{
            const {in_t}* p = x + o * r * inner + k;
            i64 j = start + ly;
            for (; j + ({COLUMN_LOADS} - 1) * RL < end; j += {COLUMN_LOADS} * RL) {{
                {in_t} w[{COLUMN_LOADS}];
                _Pragma("unroll") for (int u = 0; u < {COLUMN_LOADS}; u++) w[u] = p[(j + u * RL) * inner];
                _Pragma("unroll") for (int u = 0; u < {COLUMN_LOADS}; u++) {{ auto v = {load_w}; acc = comb(acc, {lift}); }}
            }}
            for (; j < end; j += RL) {{ auto v = {load}; acc = comb(acc, {lift}); }}
        }}
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int h = RL / 2; h > 0; h >>= 1) {{
            if (ly < h) sh[threadIdx.x] = comb(sh[threadIdx.x], sh[threadIdx.x + h * TW]);
            __syncthreads();
        }}
        if (ly == 0 && k < inner) {{ acc = sh[threadIdx.x]; out[(o * splits + s) * inner + k] = {fin}; }}
        __syncthreads();
    }}
}}
"#
    )
}

/// Fold the middle axis of the dense `[outer, r, inner]` array at `x` (dtype `d`) into `outer ×
/// inner` results. One thread per output walks its whole column when there are enough outputs
/// to fill the GPU or the column is short; otherwise a tiled pass (`tile_source`) folds every
/// [`COLUMN_SPLIT`] rows of each column into an accumulator with a block per tile and split
/// (columns of up to [`COLUMN_ONE_PASS_ROWS`] rows are one split, folded by that pass alone), and
/// the `[outer, r / COLUMN_SPLIT, inner]` accumulators are folded the same way, in split order
/// (deterministic: the order depends on the shape alone). The bias gradient of a `[4096, 512]`
/// activation takes two tiled kernels: 1024 blocks folding 64 rows each, then 16 blocks folding
/// each column's 64 accumulators.
///
/// # Safety
///
/// `x` must be the address of a live, dense buffer of `outer × r × inner` elements of dtype `d`
/// on `dev`.
unsafe fn fold_columns(
    dev: &Arc<CudaDevice>,
    key: &str,
    d: DType,
    f: &Fold,
    x: u64,
    [outer, r, inner]: [usize; 3],
) -> Result<CudaData> {
    if outer * inner == 0 {
        return CudaData::empty(dev, f.out, &[0]);
    }
    let (mut src, mut src_dtype, mut rows) = (None::<CudaData>, d, r);
    loop {
        let input = src.as_ref().map_or(x, |s| s.ptr());
        if outer * inner >= COLUMN_MIN_OUTPUTS || rows <= COLUMN_MAX_SHORT {
            // one thread per output down the whole (remaining) column
            let out = CudaData::empty(dev, f.out, &[outer * inner])?;
            let name = format!("ct_cols_{key}_{}_{}", codegen::tag(src_dtype), codegen::tag(f.out));
            let k = dev.kernel(&name, &name, || column_source(&name, src_dtype, f))?;
            let grid = dev.grid_for((outer * inner) as u64, BLOCK);
            // SAFETY: the column kernel takes (out, x, outer, r, inner, chunk, chunks); `out` was
            // just allocated with `outer × inner` elements of `f.out`, and the input is the
            // caller's dense `outer × r × inner` buffer (first pass) or the previous pass's
            // `outer × rows × inner` accumulators, of dtype `src_dtype`.
            unsafe {
                launch_fold(dev, k, out.ptr(), input, [outer, rows, inner, rows.max(1), 1].map(|v| v as i64), grid)
            }?;
            return Ok(out);
        }
        let split = if rows <= COLUMN_ONE_PASS_ROWS { rows } else { COLUMN_SPLIT };
        let splits = rows.div_ceil(split);
        let last = splits == 1;
        let pass = Fold { out: if last { f.out } else { f.acc }, ..fold_clone(f) };
        let tw = inner.next_power_of_two().min(32) as u32;
        let out = CudaData::empty(dev, pass.out, &[outer * splits * inner])?;
        let name = format!("ct_tiles_{key}_{}_{}_{tw}", codegen::tag(src_dtype), codegen::tag(pass.out));
        let k = dev.kernel(&name, &name, || tile_source(&name, src_dtype, &pass, tw))?;
        let blocks = (outer * splits * inner.div_ceil(tw as usize)) as u64;
        let grid = blocks.min(dev.sm_count() as u64 * 16) as u32;
        let dims = [outer, rows, inner, split, splits].map(|v| v as i64);
        // SAFETY: the tile kernel takes (out, x, outer, r, inner, split, splits); `out` was just
        // allocated with `outer × splits × inner` elements of the pass's output dtype, and the
        // input is as above.
        unsafe { launch_fold(dev, k, out.ptr(), input, dims, grid) }?;
        if last {
            return Ok(out);
        }
        (src, src_dtype, rows) = (Some(out), f.acc, splits);
    }
}

/// Launch the row kernel over `rows` dense rows of length `r` at `x` (dtype `d`), one output each.
///
/// # Safety
///
/// `x` must be the address of a live, dense buffer of `rows × r` elements of dtype `d` on `dev`.
unsafe fn run_rows(
    dev: &Arc<CudaDevice>,
    key: &str,
    d: DType,
    f: &Fold,
    x: u64,
    rows: usize,
    r: usize,
) -> Result<CudaData> {
    let out = CudaData::empty(dev, f.out, &[rows])?;
    if rows == 0 {
        return Ok(out);
    }
    let two_pass = rows < 2 * dev.sm_count() && r > 2 * CHUNK && !key.starts_with("arg");
    let (chunks, chunk) = if two_pass { (r.div_ceil(CHUNK), CHUNK) } else { (1, r.max(1)) };
    let tpr: u32 = if chunk.min(r) >= 1024 { BLOCK } else { 32 };
    let pass_out = if two_pass { CudaData::empty(dev, f.acc, &[rows * chunks])? } else { out.clone() };
    let first = if two_pass { Fold { out: pass_out.dtype, ..fold_clone(f) } } else { fold_clone(f) };
    let name = format!("ct_rows_{key}_{}_{}_{tpr}", codegen::tag(d), codegen::tag(first.out));
    let k = dev.kernel(&name, &name, || row_source(&name, d, &first, tpr))?;
    let rows_per_block = (BLOCK / tpr) as u64;
    let grid = ((rows * chunks) as u64).div_ceil(rows_per_block).min(dev.sm_count() as u64 * 16) as u32;
    // SAFETY: `x` is the dense `rows × r` input (the caller's guarantee) and `pass_out` was allocated for `rows × chunks`.
    unsafe { launch_fold(dev, k, pass_out.ptr(), x, [rows as i64, chunks as i64, r as i64, chunk as i64], grid) }?;
    if !two_pass {
        return Ok(out);
    }
    // second pass: the per-chunk accumulators of each row, folded in chunk order
    let ad = pass_out.dtype;
    let second = fold_clone(f);
    let name2 = format!("ct_rows2_{key}_{}_{}", codegen::tag(ad), codegen::tag(f.out));
    let k2 = dev.kernel(&name2, &name2, || row_source(&name2, ad, &second, 32))?;
    let grid2 = (rows as u64).div_ceil((BLOCK / 32) as u64) as u32;
    // SAFETY: the second pass reduces the `rows × chunks` partials into `out`, allocated for `rows`.
    unsafe { launch_fold(dev, k2, out.ptr(), pass_out.ptr(), [rows as i64, 1, chunks as i64, chunks as i64], grid2) }?;
    Ok(out)
}

fn fold_clone(f: &Fold) -> Fold {
    Fold {
        acc_decl: f.acc_decl.clone(),
        lift: f.lift.clone(),
        comb: f.comb.clone(),
        init: f.init.clone(),
        value: f.value.clone(),
        out: f.out,
        acc: f.acc,
    }
}

/// Launch a fold kernel taking `(out, x, sizes...)`: the row kernel `(out, x, rows, chunks, r,
/// chunk)` or the column kernel `(out, x, outer, r, inner, chunk, chunks)`.
///
/// # Safety
///
/// `k` must take exactly these parameters; `out` and `x` must be live buffers of `k`'s dtypes on
/// `dev`, `x` dense with as many elements as `dims` say the kernel reads and `out` with room for
/// as many results as it writes.
unsafe fn launch_fold<const N: usize>(
    dev: &CudaDevice,
    k: super::device::Kernel,
    out: u64,
    x: u64,
    dims: [i64; N],
    grid: u32,
) -> Result<()> {
    let (mut out, mut x, mut dims) = (out, x, dims);
    let mut params: Vec<*mut c_void> = vec![&mut out as *mut u64 as *mut c_void, &mut x as *mut u64 as *mut c_void];
    for v in dims.iter_mut() {
        params.push(v as *mut i64 as *mut c_void);
    }
    // SAFETY: the kernel takes (out, x, N i64 sizes), passed in that order (the caller's
    // guarantee, as are the buffers: see `# Safety`).
    unsafe { dev.launch(k, grid, BLOCK, 0, &mut params) }
}

/// The layout of a reduction: either dense `[outer, r, inner]` (reduced block in the middle) or
/// a dense rows view `[n_out, r]` after moving the axes last (copied when needed).
enum Plan {
    /// `x` dense as `[outer, r, inner]`.
    Column { x: CudaData, outer: usize, r: usize, inner: usize },
    /// `x` dense as `[rows, r]`.
    Rows { x: CudaData, rows: usize, r: usize },
}

/// The axes of `shape` with `axes` moved last (kept axes first, in order).
fn rows_permutation(ndim: usize, axes: &[usize]) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..ndim).filter(|a| !axes.contains(a)).collect();
    perm.extend_from_slice(axes);
    perm
}

fn plan(x: &CudaData, shape: &[usize], axes: &[usize], allow_column: bool) -> Result<Plan> {
    let r: usize = axes.iter().map(|&a| shape[a]).product();
    let n = numel(shape);
    let rows = n.checked_div(r).unwrap_or_else(|| numel(&keep_shape(shape, axes)));
    // dense input, axes of extent > 1 forming one consecutive block
    if x.is_contiguous(shape) {
        let big: Vec<usize> = (0..shape.len()).filter(|&a| shape[a] != 1).collect();
        let red: Vec<usize> = big.iter().copied().filter(|a| axes.contains(a)).collect();
        let pos: Vec<usize> = red.iter().map(|a| big.iter().position(|b| b == a).unwrap_or(0)).collect();
        let consecutive = pos.windows(2).all(|w| w[1] == w[0] + 1);
        if red.is_empty() || consecutive && pos.last() == Some(&(big.len() - 1)) {
            return Ok(Plan::Rows { x: x.clone(), rows, r });
        }
        if consecutive && allow_column {
            let first = red[0];
            let last = *red.last().unwrap_or(&first);
            let outer: usize = shape[..first].iter().product();
            let inner: usize = shape[last + 1..].iter().product();
            return Ok(Plan::Column { x: x.clone(), outer, r, inner });
        }
    }
    let perm = rows_permutation(shape.len(), axes);
    let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let pstrides: Vec<isize> = perm.iter().map(|&p| x.strides[p]).collect();
    let view = x.view(&pstrides, x.offset);
    Ok(Plan::Rows { x: to_contiguous(&view, &pshape)?, rows, r })
}

fn keep_shape(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect()
}

/// Reduce `x` (of `shape`) over `axes` (sorted, distinct); the result keeps the reduced axes with
/// extent 1 and has `x`'s dtype (`all`/`any` need bool inputs).
pub fn reduce(op: ReduceOp, x: &CudaData, shape: &[usize], axes: &[usize]) -> Result<CudaData> {
    check_views(op.name(), &[(x, shape)])?;
    let dev = x.device();
    let d = x.dtype;
    let out_shape = keep_shape(shape, axes);
    let f = fold(op, d, d).map_err(|m| dev.error(m))?;
    let key = op.name();
    let res = match plan(x, shape, axes, true)? {
        // SAFETY: a row plan's `x` is a live dense view of `rows × r` elements of dtype `d`.
        Plan::Rows { x, rows, r } => unsafe { run_rows(dev, key, d, &f, x.ptr(), rows, r) }?,
        // SAFETY: a column plan's `x` is a live dense view of `outer × r × inner` elements of dtype `d`.
        Plan::Column { x, outer, r, inner } => unsafe { fold_columns(dev, key, d, &f, x.ptr(), [outer, r, inner]) }?,
    };
    Ok(CudaData { strides: contiguous_strides(&out_shape), ..res })
}

/// Index (u32) of the maximum or minimum along `axis` (first on ties; the first NaN wins), with
/// the axis kept at extent 1.
pub fn arg_reduce(op: ArgReduceOp, x: &CudaData, shape: &[usize], axis: usize) -> Result<CudaData> {
    check_views("argmax/argmin", &[(x, shape)])?;
    let dev = x.device();
    let d = x.dtype;
    if shape[axis] == 0 && numel(shape) > 0 {
        return Err(dev.error(format!("argmax/argmin over an empty axis {axis} of {shape:?}")));
    }
    let cmp = if op == ArgReduceOp::ArgMax { ">" } else { "<" };
    let t = codegen::compute(d);
    let f = Fold {
        acc_decl: format!("struct A {{ {t} v; i64 i; }};"),
        lift: "A{v, j}".into(),
        comb: format!(
            "if (a.i < 0) return b; if (b.i < 0) return a; bool an = a.v != a.v, bn = b.v != b.v; \
             if (an || bn) {{ if (an && bn) return a.i <= b.i ? a : b; return an ? a : b; }} \
             if ((b.v {cmp} a.v) || (b.v == a.v && b.i < a.i)) return b; return a;"
        ),
        init: format!("A{{({t})0, -1}}"),
        value: "(acc.i < 0 ? 0 : acc.i)".into(),
        out: DType::U32,
        acc: DType::U32,
    };
    let key = if op == ArgReduceOp::ArgMax { "argmax" } else { "argmin" };
    let out_shape = keep_shape(shape, &[axis]);
    let res = match plan(x, shape, &[axis], false)? {
        // SAFETY: a row plan's `x` is a live dense view of `rows × r` elements of dtype `d`.
        Plan::Rows { x, rows, r } => unsafe { run_rows(dev, key, d, &f, x.ptr(), rows, r) }?,
        Plan::Column { .. } => unreachable!("column plans are not offered here"),
    };
    Ok(CudaData { strides: contiguous_strides(&out_shape), ..res })
}

/// Rows at most this long take the thread-per-row logsumexp / softmax kernel
/// ([`short_softmax_source`]): a block of 256 threads per row of 10 class scores (a
/// classifier's cross-entropy) idles most of its threads through 16 barriers per row.
const SHORT_ROW: usize = 32;

/// The source both logsumexp / softmax kernels share, for a loop `each` over the elements of a
/// row that one thread handles and a guard `once` of the single logsumexp store: the
/// accumulator type, the running maximum (NaN-propagating), the compensated sum of
/// `exp(v - shift)` (the shift is the maximum for softmax, and for logsumexp the maximum where it
/// is finite, else 0), and the outputs once `s` holds the row's sum.
struct SoftmaxText {
    st: &'static str,
    typedef: String,
    max: String,
    sum: String,
    fin: String,
}

fn softmax_text(d: DType, softmax: bool, each: &str, once: &str) -> SoftmaxText {
    let wide = d == DType::F64;
    let (a, f, inf) = if wide { ("double", "", "CT_INF_D") } else { ("float", "f", "CT_INF_F") };
    let load = codegen::load(d, "p[j]");
    let fin = if softmax {
        format!(
            "A inv = (A)1 / s; {each} {{ A v = {load}; out[row * r + j] = {st}; }}",
            st = codegen::store(d, &format!("exp{f}(v - m) * inv"))
        )
    } else {
        format!("{once}out[row] = {};", codegen::store(d, &format!("shift + log{f}(s)")))
    };
    SoftmaxText {
        st: codegen::storage(d),
        typedef: format!("typedef {a} A;"),
        max: format!(
            "A m = -{inf};\n        {each} {{ A v = {load}; m = (m != m || v != v) ? (m + v) : (v > m ? v : m); }}"
        ),
        sum: format!(
            "A shift = (m != m || m == {inf} || m == -{inf}) ? (A)0 : m;\n        \
             A c = {c};\n        A s = 0;\n        A e = 0;\n        \
             {each} {{\n            A v = {load}; A y = exp{f}(v - c); A t = s + y;\n            \
             e += (t - t == (A)0) ? ((fabs(s) >= fabs(y)) ? (s - t) + y : (y - t) + s) : (A)0;\n            \
             s = t;\n        }}",
            c = if softmax { "m" } else { "shift" }
        ),
        fin,
    }
}

/// Source of the logsumexp / softmax kernel for rows of at most [`SHORT_ROW`] elements: one
/// thread per row walks it in order.
fn short_softmax_source(name: &str, d: DType, softmax: bool) -> String {
    let SoftmaxText { st, typedef, max, sum, fin } = softmax_text(d, softmax, "for (i64 j = 0; j < r; j++)", "");
    format!(
        r#"{PRELUDE}
{typedef}
extern "C" __global__ void {name}({st}* __restrict__ out, const {st}* __restrict__ x, i64 rows, i64 r) {{
    CT_LOOP(row, rows) {{
        const {st}* p = x + row * r;
        {max}
        {sum}
        s = (s - s == (A)0) ? s + e : s;
        {fin}
    }}
}}
"#
    )
}

/// Source of the per-row logsumexp / softmax kernel (one block per row: each thread folds a
/// strided share of the row, then the block combines the shares in a fixed tree order).
fn softmax_source(name: &str, d: DType, softmax: bool) -> String {
    let SoftmaxText { st, typedef, max, sum, fin } =
        softmax_text(d, softmax, "for (i64 j = threadIdx.x; j < r; j += blockDim.x)", "if (threadIdx.x == 0) ");
    format!(
        r#"{PRELUDE}
{typedef}
extern "C" __global__ void {name}({st}* __restrict__ out, const {st}* __restrict__ x, i64 rows, i64 r) {{
    __shared__ A sh[{BLOCK}];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {{
        const {st}* p = x + row * r;
        {max}
        sh[threadIdx.x] = m;
        __syncthreads();
        for (int s = {BLOCK} / 2; s > 0; s >>= 1) {{
            if (threadIdx.x < s) {{ A a = sh[threadIdx.x], b = sh[threadIdx.x + s]; sh[threadIdx.x] = (a != a || b != b) ? (a + b) : (b > a ? b : a); }}
            __syncthreads();
        }}
        m = sh[0];
        __syncthreads();
        {sum}
        sh[threadIdx.x] = (s - s == (A)0) ? s + e : s;
        __syncthreads();
        for (int k = {BLOCK} / 2; k > 0; k >>= 1) {{
            if (threadIdx.x < k) sh[threadIdx.x] = sh[threadIdx.x] + sh[threadIdx.x + k];
            __syncthreads();
        }}
        s = sh[0];
        __syncthreads();
        {fin}
    }}
}}
"#
    )
}

fn rows_kernel_float(x: &CudaData, shape: &[usize], axes: &[usize], softmax: bool) -> Result<(CudaData, Vec<usize>)> {
    let dev = x.device();
    let d = x.dtype;
    let what = if softmax { "softmax" } else { "logsumexp" };
    if !d.is_float() {
        return Err(dev.error(format!("{what}: needs a float input, got {d}")));
    }
    let (xr, rows, r) = match plan(x, shape, axes, false)? {
        Plan::Rows { x, rows, r } => (x, rows, r),
        Plan::Column { .. } => unreachable!("column plans are not offered here"),
    };
    let out = CudaData::empty(dev, d, &[if softmax { rows * r } else { rows }])?;
    let perm = rows_permutation(shape.len(), axes);
    if rows > 0 && (r > 0 || !softmax) {
        let short = r <= SHORT_ROW;
        let name = format!("ct_{what}{}_{}", if short { "_short" } else { "" }, codegen::tag(d));
        let k = dev.kernel(&name, &name, || {
            if short {
                short_softmax_source(&name, d, softmax)
            } else {
                softmax_source(&name, d, softmax)
            }
        })?;
        let (mut o, mut p, mut n_rows, mut len) = (out.ptr(), xr.ptr(), rows as i64, r as i64);
        let mut params: Vec<*mut c_void> = vec![
            &mut o as *mut u64 as *mut c_void,
            &mut p as *mut u64 as *mut c_void,
            &mut n_rows as *mut i64 as *mut c_void,
            &mut len as *mut i64 as *mut c_void,
        ];
        // a thread per row (short rows) or a block per row
        let grid =
            if short { dev.grid_for(rows as u64, BLOCK) } else { (rows as u64).min(dev.sm_count() as u64 * 16) as u32 };
        // SAFETY: both softmax/logsumexp kernels take (out, x, rows, len); `out` was just
        // allocated for the results of `rows` rows of `len` and `xr` is the dense `rows × len`
        // input.
        unsafe { dev.launch(k, grid, BLOCK, 0, &mut params) }?;
    }
    Ok((out, perm))
}

/// `log(sum(exp(x)))` over `axes` (numerically stable; float inputs), axes kept at extent 1.
pub fn logsumexp(x: &CudaData, shape: &[usize], axes: &[usize]) -> Result<CudaData> {
    check_views("logsumexp", &[(x, shape)])?;
    let (out, _) = rows_kernel_float(x, shape, axes, false)?;
    Ok(CudaData { strides: contiguous_strides(&keep_shape(shape, axes)), ..out })
}

/// Softmax over `axes` (float inputs). The result has `x`'s shape; when the axes are not the
/// innermost ones it is a view whose strides undo the internal axis permutation (as the CPU's).
pub fn softmax(x: &CudaData, shape: &[usize], axes: &[usize]) -> Result<CudaData> {
    check_views("softmax", &[(x, shape)])?;
    let (out, perm) = rows_kernel_float(x, shape, axes, true)?;
    Ok(CudaData { strides: permuted_back(shape, &perm), ..out })
}

/// Strides of a dense array stored in the `perm` order of `shape`, seen in the original order.
fn permuted_back(shape: &[usize], perm: &[usize]) -> crate::shape::Strides {
    let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let pstr = contiguous_strides(&pshape);
    let mut strides = pstr.clone();
    for (k, &p) in perm.iter().enumerate() {
        strides[p] = pstr[k];
    }
    strides
}

/// Cumulative sum or product along `axis` (from the end when `reverse`; an exclusive scan leaves
/// out each element itself), integers in wrapping i64, f16/bf16 in f32.
///
/// Products: one thread per row walks it in order, so the result is the CPU's sequential one.
/// Sums over axes longer than `SCAN_CHUNK` are cut into chunks of about `sqrt(r)` elements:
/// one thread per chunk adds it up, one per row scans the chunk totals, and one per chunk scans
/// it from its offset. Float sums are compensated (see the module documentation), so every
/// running sum is within a few roundings of the exact one however long the axis.
pub fn scan(
    op: ScanOp,
    x: &CudaData,
    shape: &[usize],
    axis: usize,
    reverse: bool,
    inclusive: bool,
) -> Result<CudaData> {
    check_views("scan", &[(x, shape)])?;
    let dev = x.device();
    let d = x.dtype;
    if d == DType::Bool {
        return Err(dev.error("cumsum/cumprod: bool input (cast to int32 first)"));
    }
    let (xr, rows, r) = match plan(x, shape, &[axis], false)? {
        Plan::Rows { x, rows, r } => (x, rows, r),
        Plan::Column { .. } => unreachable!("column plans are not offered here"),
    };
    let out = CudaData::empty(dev, d, &[rows * r])?;
    let perm = rows_permutation(shape.len(), &[axis]);
    if rows * r == 0 {
        return Ok(CudaData { strides: permuted_back(shape, &perm), ..out });
    }
    let is_sum = op == ScanOp::Sum;
    let f = if !is_sum {
        let a = if d.is_int() { "i64" } else { codegen::compute(d) };
        let comb = if d.is_int() { "return (A)((u64)a * (u64)b);" } else { "return a * b;" };
        let acc = if d.is_int() { DType::I64 } else { compute_dtype(d) };
        Fold {
            acc_decl: format!("typedef {a} A;"),
            lift: "(A)(v)".into(),
            comb: comb.into(),
            init: "1".into(),
            value: "acc".into(),
            out: d,
            acc,
        }
    } else if d.is_int() {
        fold(ReduceOp::Sum, d, d).map_err(|m| dev.error(m))?
    } else {
        compensated_sum(codegen::compute(d), d, compute_dtype(d))
    };
    let chunk = if is_sum && r > SCAN_CHUNK { SCAN_CHUNK.max((r as f64).sqrt().ceil() as usize) } else { r };
    let chunks = r.div_ceil(chunk);
    let key = format!("ct_scan_{}_{}", if is_sum { "sum" } else { "prod" }, codegen::tag(d));
    let st = codegen::storage(d);
    let at = codegen::storage(f.acc);
    let header = format!(
        "{PRELUDE}\n{decl}\n__device__ __forceinline__ A comb(A a, A b) {{ {comb} }}\n",
        decl = f.acc_decl,
        comb = f.comb
    );
    // logical position `t` of a row, in scan order, is element `j` of the stored row; every
    // `lift` below lifts a value named `v`
    let walk = "i64 j = reverse ? r - 1 - t : t;";
    let offsets = if chunks > 1 { Some(CudaData::empty(dev, f.acc, &[rows * chunks])?) } else { None };
    if let Some(off) = &offsets {
        // chunk totals, then an exclusive scan of them per row (in place)
        let tot = format!("{key}_totals");
        let src = format!(
            r#"{header}
extern "C" __global__ void {tot}({at}* __restrict__ off, const {st}* __restrict__ x, i64 rows, i64 r, int reverse, i64 chunk, i64 chunks) {{
    CT_LOOP(id, rows * chunks) {{
        i64 row = id / chunks, t0 = (id - row * chunks) * chunk, t1 = t0 + chunk < r ? t0 + chunk : r;
        A acc = {init};
        for (i64 t = t0; t < t1; t++) {{ {walk} {ct} v = {load}; acc = comb(acc, {lifted}); }}
        off[id] = ({at})({value});
    }}
}}
extern "C" __global__ void {tot}_scan({at}* __restrict__ off, i64 rows, i64 chunks) {{
    CT_LOOP(row, rows) {{
        A acc = {init};
        for (i64 c = 0; c < chunks; c++) {{ {at} v = off[row * chunks + c]; off[row * chunks + c] = ({at})({value}); acc = comb(acc, {lifted_acc}); }}
    }}
}}
"#,
            init = f.init,
            ct = codegen::compute(d),
            load = codegen::load(d, "x[row * r + j]"),
            lifted = f.lift,
            lifted_acc = f.lift,
            value = f.value,
        );
        // two kernels of one source (the disk cache compiles it once)
        let k = dev.kernel(&tot, &tot, || src.clone())?;
        let (mut o, mut p, mut n_rows, mut len, mut rev, mut ch, mut n_ch) =
            (off.ptr(), xr.ptr(), rows as i64, r as i64, reverse as i32, chunk as i64, chunks as i64);
        let mut params: Vec<*mut c_void> = vec![
            &mut o as *mut u64 as *mut c_void,
            &mut p as *mut u64 as *mut c_void,
            &mut n_rows as *mut i64 as *mut c_void,
            &mut len as *mut i64 as *mut c_void,
            &mut rev as *mut i32 as *mut c_void,
            &mut ch as *mut i64 as *mut c_void,
            &mut n_ch as *mut i64 as *mut c_void,
        ];
        // SAFETY: the chunk-totals kernel takes (totals, x, rows, len, reverse, chunk, chunks);
        // `off` has `rows * chunks` elements and `xr` is the dense `rows × len` input.
        unsafe { dev.launch(k, dev.grid_for((rows * chunks) as u64, 128), 128, 0, &mut params) }?;
        let scan_name = format!("{tot}_scan");
        let k2 = dev.kernel(&scan_name, &scan_name, || src)?;
        let mut params: Vec<*mut c_void> = vec![
            &mut o as *mut u64 as *mut c_void,
            &mut n_rows as *mut i64 as *mut c_void,
            &mut n_ch as *mut i64 as *mut c_void,
        ];
        // SAFETY: the totals-scan kernel takes (totals, rows, chunks), over the same `off`.
        unsafe { dev.launch(k2, dev.grid_for(rows as u64, 128), 128, 0, &mut params) }?;
    }
    let k = dev.kernel(&key, &key, || {
        format!(
            r#"{header}
extern "C" __global__ void {key}({st}* __restrict__ out, const {st}* __restrict__ x, const {at}* __restrict__ off, i64 rows, i64 r, int reverse, int inclusive, i64 chunk, i64 chunks) {{
    CT_LOOP(id, rows * chunks) {{
        i64 row = id / chunks, t0 = (id - row * chunks) * chunk, t1 = t0 + chunk < r ? t0 + chunk : r;
        A acc = {init};
        if (off) {{ {at} v = off[id]; acc = {lifted_acc}; }}
        for (i64 t = t0; t < t1; t++) {{
            {walk}
            {ct} v = {load};
            if (inclusive) {{ acc = comb(acc, {lifted}); out[row * r + j] = {fin}; }}
            else {{ out[row * r + j] = {fin}; acc = comb(acc, {lifted}); }}
        }}
    }}
}}
"#,
            init = f.init,
            ct = codegen::compute(d),
            load = codegen::load(d, "x[row * r + j]"),
            lifted = f.lift,
            lifted_acc = f.lift,
            fin = codegen::store(d, &f.value),
        )
    })?;
    let (mut o, mut p, mut offp, mut n_rows, mut len, mut rev, mut inc, mut ch, mut n_ch) = (
        out.ptr(),
        xr.ptr(),
        offsets.as_ref().map_or(0, |o| o.ptr()),
        rows as i64,
        r as i64,
        reverse as i32,
        inclusive as i32,
        chunk as i64,
        chunks as i64,
    );
    let mut params: Vec<*mut c_void> = vec![
        &mut o as *mut u64 as *mut c_void,
        &mut p as *mut u64 as *mut c_void,
        &mut offp as *mut u64 as *mut c_void,
        &mut n_rows as *mut i64 as *mut c_void,
        &mut len as *mut i64 as *mut c_void,
        &mut rev as *mut i32 as *mut c_void,
        &mut inc as *mut i32 as *mut c_void,
        &mut ch as *mut i64 as *mut c_void,
        &mut n_ch as *mut i64 as *mut c_void,
    ];
    // SAFETY: the scan kernel takes (out, x, totals, rows, len, reverse, inclusive, chunk,
    // chunks); `out` and `x` hold `rows × len` elements and `off` `rows * chunks`.
    unsafe { dev.launch(k, dev.grid_for((rows * chunks) as u64, 128), 128, 0, &mut params) }?;
    Ok(CudaData { strides: permuted_back(shape, &perm), ..out })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::nvrtc;
    use crate::dtype::ALL_DTYPES;

    /// Every fold kernel the reductions generate compiles for sm_90 — row passes (first and
    /// second of a two-pass plan), column passes (first, middle and last of a chunked fold) and
    /// the softmax/logsumexp rows — for every dtype and op they accept. Needs libnvrtc, not a
    /// GPU (skipped where it does not load).
    #[test]
    fn generated_fold_kernels_compile() {
        if !nvrtc::available() {
            println!("libnvrtc not found: skipped");
            return;
        }
        let compiles = |src: String, name: &str| {
            nvrtc::check_compiles(&src, name, (9, 0)).unwrap_or_else(|e| panic!("{name}: {e}\n{src}"));
        };
        let ops = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::All, ReduceOp::Any];
        for d in ALL_DTYPES {
            for op in ops {
                let Ok(f) = fold(op, d, d) else { continue };
                let to_acc = Fold { out: f.acc, ..fold_clone(&f) };
                let name = format!("ct_test_{}_{}", op.name(), codegen::tag(d));
                compiles(row_source(&name, d, &to_acc, 256), &name);
                compiles(row_source(&name, f.acc, &f, 32), &name);
                compiles(column_source(&name, d, &to_acc), &name);
                compiles(column_source(&name, f.acc, &f), &name);
                for tw in [1, 16, 32] {
                    compiles(tile_source(&name, d, &to_acc, tw), &name);
                    compiles(tile_source(&name, f.acc, &f, tw), &name);
                }
            }
            if d.is_float() {
                for softmax in [false, true] {
                    let name = format!("ct_test_softmax_{}", codegen::tag(d));
                    compiles(softmax_source(&name, d, softmax), &name);
                    compiles(short_softmax_source(&name, d, softmax), &name);
                }
            }
        }
    }
}
