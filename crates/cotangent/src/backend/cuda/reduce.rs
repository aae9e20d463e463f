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
//! Results never depend on the grid size or on timing: every combination order is fixed by the
//! row length alone, so repeated runs give identical bits.
use super::codegen::{self, PRELUDE};
use super::device::CudaDevice;
use super::elementwise::to_contiguous;
use super::storage::CudaData;
use crate::primitives::reduce::{ArgReduceOp, ReduceOp, ScanOp};
use crate::shape::{contiguous_strides, numel};
use crate::{DType, Result};
use std::ffi::c_void;
use std::sync::Arc;

/// Elements per chunk of the two-pass plan.
pub const CHUNK: usize = 16384;
const BLOCK: u32 = 256;

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
    /// Expression storing accumulator `acc` as an output element.
    fin: String,
    /// Output dtype.
    out: DType,
}

fn nan_extremum(cmp: &str) -> String {
    format!("if (a != a) return a; if (b != b) return b; return (b {cmp} a) ? b : a;")
}

/// The fold of `op` over elements of `d`, accumulating into `acc` (the input dtype in a first
/// or only pass; the accumulator dtype in a second pass), storing `out`.
fn fold(dev: &CudaDevice, op: ReduceOp, d: DType, out: DType) -> Result<Fold> {
    let a = codegen::compute(d);
    let plain = |comb: &str, init: &str| Fold {
        acc_decl: format!("typedef {a} A;"),
        lift: "(A)(v)".into(),
        comb: comb.to_string(),
        init: init.to_string(),
        fin: codegen::store(out, "acc"),
        out,
    };
    let inf = if d == DType::F64 { "CT_INF_D" } else { "CT_INF_F" };
    Ok(match (class_of(d), op) {
        (C::Bool, ReduceOp::Max | ReduceOp::Sum | ReduceOp::Any) => plain("return a | b;", "false"),
        (C::Bool, ReduceOp::Min | ReduceOp::Prod | ReduceOp::All) => plain("return a & b;", "true"),
        (_, ReduceOp::All | ReduceOp::Any) => {
            return Err(dev.error(format!("{}: needs a bool input, got {d}", op.name())));
        }
        (C::Int, ReduceOp::Sum | ReduceOp::Prod) => {
            let sym = if op == ReduceOp::Sum { "+" } else { "*" };
            Fold {
                acc_decl: "typedef i64 A;".into(),
                lift: "(A)(v)".into(),
                comb: format!("return (A)((u64)a {sym} (u64)b);"),
                init: if op == ReduceOp::Sum { "0" } else { "1" }.into(),
                fin: format!("({})(acc)", codegen::storage(out)),
                out,
            }
        }
        (C::Int, ReduceOp::Max) => plain("return b > a ? b : a;", int_bound(d, true)),
        (C::Int, ReduceOp::Min) => plain("return b < a ? b : a;", int_bound(d, false)),
        (C::Float, ReduceOp::Sum) => plain("return a + b;", "0"),
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

/// Source of the row kernel: `out[row] = fold(x[q*r + start .. q*r + end])` for logical rows
/// `row = q * chunks + c` (chunk `c` of row `q`), `tpr` threads per row.
fn row_source(name: &str, d: DType, f: &Fold, tpr: u32) -> String {
    format!(
        r#"{PRELUDE}
{acc_decl}
__device__ __forceinline__ A comb(A a, A b) {{ {comb} }}
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
"#,
        acc_decl = f.acc_decl,
        comb = f.comb,
        out_t = codegen::storage(f.out),
        in_t = codegen::storage(d),
        init = f.init,
        load = codegen::load(d, "p[j]"),
        lift = f.lift,
        fin = f.fin,
    )
}

/// Source of the column kernel: `out[o * inner + k] = fold_j x[(o * r + j) * inner + k]`.
fn column_source(name: &str, d: DType, f: &Fold) -> String {
    format!(
        r#"{PRELUDE}
{acc_decl}
__device__ __forceinline__ A comb(A a, A b) {{ {comb} }}
extern "C" __global__ void {name}({out_t}* __restrict__ out, const {in_t}* __restrict__ x, i64 outer, i64 r, i64 inner) {{
    CT_LOOP(t, outer * inner) {{
        i64 o = t / inner, k = t - o * inner;
        const {in_t}* p = x + o * r * inner + k;
        A acc = {init};
        for (i64 j = 0; j < r; j++) {{ auto v = {load}; acc = comb(acc, {lift}); }}
        out[t] = {fin};
    }}
}}
"#,
        acc_decl = f.acc_decl,
        comb = f.comb,
        out_t = codegen::storage(f.out),
        in_t = codegen::storage(d),
        init = f.init,
        load = codegen::load(d, "p[j * inner]"),
        lift = f.lift,
        fin = f.fin,
    )
}

/// Launch the row kernel over `rows` dense rows of length `r` at `x` (dtype `d`), one output each.
fn run_rows(dev: &Arc<CudaDevice>, key: &str, d: DType, f: &Fold, x: u64, rows: usize, r: usize) -> Result<CudaData> {
    let out = CudaData::empty(dev, f.out, &[rows])?;
    if rows == 0 {
        return Ok(out);
    }
    let two_pass = rows < 2 * dev.sm_count() && r > 2 * CHUNK && !key.starts_with("arg");
    let (chunks, chunk) = if two_pass { (r.div_ceil(CHUNK), CHUNK) } else { (1, r.max(1)) };
    let tpr: u32 = if chunk.min(r) >= 1024 { BLOCK } else { 32 };
    let pass_out = if two_pass { CudaData::empty(dev, acc_dtype_of(f), &[rows * chunks])? } else { out.clone() };
    let first = if two_pass {
        Fold { fin: codegen::store(pass_out.dtype, "acc"), out: pass_out.dtype, ..fold_clone(f) }
    } else {
        fold_clone(f)
    };
    let name = format!("ct_rows_{key}_{}_{}_{tpr}", codegen::tag(d), codegen::tag(first.out));
    let k = dev.kernel(&name, &name, || row_source(&name, d, &first, tpr))?;
    let rows_per_block = (BLOCK / tpr) as u64;
    let grid = ((rows * chunks) as u64).div_ceil(rows_per_block).min(dev.sm_count() as u64 * 16) as u32;
    launch_rows(dev, k, pass_out.ptr(), x, [rows as i64, chunks as i64, r as i64, chunk as i64], grid)?;
    if !two_pass {
        return Ok(out);
    }
    // second pass: the per-chunk accumulators of each row, folded in chunk order
    let ad = pass_out.dtype;
    let second = Fold { lift: "(A)(v)".into(), ..fold_clone(f) };
    let name2 = format!("ct_rows2_{key}_{}_{}", codegen::tag(ad), codegen::tag(f.out));
    let k2 = dev.kernel(&name2, &name2, || row_source(&name2, ad, &second, 32))?;
    let grid2 = (rows as u64).div_ceil((BLOCK / 32) as u64) as u32;
    launch_rows(dev, k2, out.ptr(), pass_out.ptr(), [rows as i64, 1, chunks as i64, chunks as i64], grid2)?;
    Ok(out)
}

fn fold_clone(f: &Fold) -> Fold {
    Fold {
        acc_decl: f.acc_decl.clone(),
        lift: f.lift.clone(),
        comb: f.comb.clone(),
        init: f.init.clone(),
        fin: f.fin.clone(),
        out: f.out,
    }
}

/// The dtype that stores a fold's accumulator exactly (from its C declaration).
fn acc_dtype_of(f: &Fold) -> DType {
    match f.acc_decl.as_str() {
        "typedef float A;" => DType::F32,
        "typedef double A;" => DType::F64,
        "typedef i64 A;" => DType::I64,
        "typedef bool A;" => DType::Bool,
        "typedef u8 A;" => DType::U8,
        "typedef u32 A;" => DType::U32,
        "typedef int A;" => DType::I32,
        _ => f.out,
    }
}

fn launch_rows(dev: &CudaDevice, k: super::device::Kernel, out: u64, x: u64, dims: [i64; 4], grid: u32) -> Result<()> {
    let (mut out, mut x, mut dims) = (out, x, dims);
    let mut params: Vec<*mut c_void> = vec![&mut out as *mut u64 as *mut c_void, &mut x as *mut u64 as *mut c_void];
    for v in dims.iter_mut() {
        params.push(v as *mut i64 as *mut c_void);
    }
    dev.launch(k, grid, BLOCK, 0, &mut params)
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
    let dev = x.device();
    let d = x.dtype;
    let out_shape = keep_shape(shape, axes);
    let f = fold(dev, op, d, d)?;
    let key = op.name();
    let res = match plan(x, shape, axes, true)? {
        Plan::Rows { x, rows, r } => run_rows(dev, key, d, &f, x.ptr(), rows, r)?,
        Plan::Column { x, outer, r, inner } => {
            let out = CudaData::empty(dev, d, &[outer * inner])?;
            if outer * inner > 0 {
                let name = format!("ct_cols_{key}_{}", codegen::tag(d));
                let k = dev.kernel(&name, &name, || column_source(&name, d, &f))?;
                let (mut o, mut p, mut dims) = (out.ptr(), x.ptr(), [outer as i64, r as i64, inner as i64]);
                let mut params: Vec<*mut c_void> =
                    vec![&mut o as *mut u64 as *mut c_void, &mut p as *mut u64 as *mut c_void];
                for v in dims.iter_mut() {
                    params.push(v as *mut i64 as *mut c_void);
                }
                dev.launch(k, dev.grid_for((outer * inner) as u64, BLOCK), BLOCK, 0, &mut params)?;
            }
            out
        }
    };
    Ok(CudaData { strides: contiguous_strides(&out_shape), ..res })
}

/// Index (u32) of the maximum or minimum along `axis` (first on ties; the first NaN wins), with
/// the axis kept at extent 1.
pub fn arg_reduce(op: ArgReduceOp, x: &CudaData, shape: &[usize], axis: usize) -> Result<CudaData> {
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
        fin: "(u32)(acc.i < 0 ? 0 : acc.i)".into(),
        out: DType::U32,
    };
    let key = if op == ArgReduceOp::ArgMax { "argmax" } else { "argmin" };
    let out_shape = keep_shape(shape, &[axis]);
    let res = match plan(x, shape, &[axis], false)? {
        Plan::Rows { x, rows, r } => run_rows(dev, key, d, &f, x.ptr(), rows, r)?,
        Plan::Column { .. } => unreachable!("column plans are not offered here"),
    };
    Ok(CudaData { strides: contiguous_strides(&out_shape), ..res })
}

/// Source of the per-row logsumexp / softmax kernel (one block per row).
fn softmax_source(name: &str, d: DType, softmax: bool) -> String {
    let wide = d == DType::F64;
    let (a, f, inf) = if wide { ("double", "", "CT_INF_D") } else { ("float", "f", "CT_INF_F") };
    let fin = if softmax {
        format!(
            "A inv = (A)1 / s; for (i64 j = threadIdx.x; j < r; j += blockDim.x) {{ A v = {load}; out[row * r + j] = {st}; }}",
            load = codegen::load(d, "p[j]"),
            st = codegen::store(d, &format!("exp{f}(v - m) * inv"))
        )
    } else {
        format!("if (threadIdx.x == 0) out[row] = {};", codegen::store(d, &format!("shift + log{f}(s)")))
    };
    format!(
        r#"{PRELUDE}
typedef {a} A;
extern "C" __global__ void {name}({st}* __restrict__ out, const {st}* __restrict__ x, i64 rows, i64 r) {{
    __shared__ A sh[{BLOCK}];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {{
        const {st}* p = x + row * r;
        A m = -{inf};
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {{ A v = {load}; m = (m != m || v != v) ? (m + v) : (v > m ? v : m); }}
        sh[threadIdx.x] = m;
        __syncthreads();
        for (int s = {BLOCK} / 2; s > 0; s >>= 1) {{
            if (threadIdx.x < s) {{ A a = sh[threadIdx.x], b = sh[threadIdx.x + s]; sh[threadIdx.x] = (a != a || b != b) ? (a + b) : (b > a ? b : a); }}
            __syncthreads();
        }}
        m = sh[0];
        __syncthreads();
        A shift = (m != m || m == {inf} || m == -{inf}) ? (A)0 : m;
        A c = {softmax_shift};
        A s = 0;
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {{ A v = {load}; s += exp{f}(v - c); }}
        sh[threadIdx.x] = s;
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
"#,
        st = codegen::storage(d),
        load = codegen::load(d, "p[j]"),
        softmax_shift = if softmax { "m" } else { "shift" },
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
        let name = format!("ct_{what}_{}", codegen::tag(d));
        let k = dev.kernel(&name, &name, || softmax_source(&name, d, softmax))?;
        let (mut o, mut p, mut n_rows, mut len) = (out.ptr(), xr.ptr(), rows as i64, r as i64);
        let mut params: Vec<*mut c_void> = vec![
            &mut o as *mut u64 as *mut c_void,
            &mut p as *mut u64 as *mut c_void,
            &mut n_rows as *mut i64 as *mut c_void,
            &mut len as *mut i64 as *mut c_void,
        ];
        dev.launch(k, (rows as u64).min(dev.sm_count() as u64 * 16) as u32, BLOCK, 0, &mut params)?;
    }
    Ok((out, perm))
}

/// `log(sum(exp(x)))` over `axes` (numerically stable; float inputs), axes kept at extent 1.
pub fn logsumexp(x: &CudaData, shape: &[usize], axes: &[usize]) -> Result<CudaData> {
    let (out, _) = rows_kernel_float(x, shape, axes, false)?;
    Ok(CudaData { strides: contiguous_strides(&keep_shape(shape, axes)), ..out })
}

/// Softmax over `axes` (float inputs). The result has `x`'s shape; when the axes are not the
/// innermost ones it is a view whose strides undo the internal axis permutation (as the CPU's).
pub fn softmax(x: &CudaData, shape: &[usize], axes: &[usize]) -> Result<CudaData> {
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
/// out each element itself). One thread per row walks it in order, so the result is the CPU's
/// sequential one (integers in wrapping i64, f16/bf16 in f32).
pub fn scan(
    op: ScanOp,
    x: &CudaData,
    shape: &[usize],
    axis: usize,
    reverse: bool,
    inclusive: bool,
) -> Result<CudaData> {
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
    if rows * r > 0 {
        let is_sum = op == ScanOp::Sum;
        let key = format!("ct_scan_{}_{}", if is_sum { "sum" } else { "prod" }, codegen::tag(d));
        let k = dev.kernel(&key, &key, || {
            let (acc, comb) = if d.is_int() {
                ("i64", if is_sum { "(i64)((u64)acc + (u64)(i64)v)" } else { "(i64)((u64)acc * (u64)(i64)v)" })
            } else {
                (codegen::compute(d), if is_sum { "acc + v" } else { "acc * v" })
            };
            let st = codegen::storage(d);
            let fin = if d.is_int() { format!("({st})(acc)") } else { codegen::store(d, "acc") };
            format!(
                r#"{PRELUDE}
extern "C" __global__ void {key}({st}* __restrict__ out, const {st}* __restrict__ x, i64 rows, i64 r, int reverse, int inclusive) {{
    CT_LOOP(row, rows) {{
        {acc} acc = {init};
        for (i64 t = 0; t < r; t++) {{
            i64 j = reverse ? r - 1 - t : t;
            {ct} v = {load};
            if (inclusive) {{ acc = {comb}; out[row * r + j] = {fin}; }}
            else {{ out[row * r + j] = {fin}; acc = {comb}; }}
        }}
    }}
}}
"#,
                init = if is_sum { "0" } else { "1" },
                ct = codegen::compute(d),
                load = codegen::load(d, "x[row * r + j]"),
            )
        })?;
        let (mut o, mut p, mut n_rows, mut len, mut rev, mut inc) =
            (out.ptr(), xr.ptr(), rows as i64, r as i64, reverse as i32, inclusive as i32);
        let mut params: Vec<*mut c_void> = vec![
            &mut o as *mut u64 as *mut c_void,
            &mut p as *mut u64 as *mut c_void,
            &mut n_rows as *mut i64 as *mut c_void,
            &mut len as *mut i64 as *mut c_void,
            &mut rev as *mut i32 as *mut c_void,
            &mut inc as *mut i32 as *mut c_void,
        ];
        dev.launch(k, dev.grid_for(rows as u64, 128), 128, 0, &mut params)?;
    }
    Ok(CudaData { strides: permuted_back(shape, &perm), ..out })
}
