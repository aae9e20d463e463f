//! Gather (`take_along_axis`) and scatter (`scatter_add_along_axis`, `put_along_axis`) along one
//! axis, with the CPU's semantics (`backend/cpu/gather.rs`): any integer index dtype, negative
//! indices count from the end, an out-of-range index makes the call return `Err` naming the first
//! bad index in row-major order (found with an atomic minimum over positions; reading it
//! synchronises). Indices uploaded from the host carry their range (`CudaBuffer::int_range`):
//! when it lies inside the axis, no cell is read back and the launch does not wait for the GPU,
//! so labels and token ids, the common case, cost no synchronisation.
//!
//! Scatters are deterministic by default: each thread owns a lane of the output (one position on
//! every axis but the scattered one) and a range of positions along that axis, walks the lane's
//! indices in order and combines the updates that land in its range, with no atomics. Every
//! output element therefore sees its updates in the CPU's order (row-major over the indices), so
//! float sums equal the CPU's bit for bit and `put` keeps the last duplicate, as the CPU does.
//! `COTANGENT_DETERMINISTIC=0` switches scatter-add to one atomic addition per update instead:
//! faster when a lane has many indices (an embedding's gradient), but float sums of duplicate
//! indices then depend on the order the atomics land in (within rounding of the CPU's sum).
//! Atomics are native `atomicAdd` for f32, f64, i32, u32 and i64 (wrapping), and a
//! compare-and-swap on the aligned 32-bit word for u8, f16, bf16 (rounded after each addition)
//! and bool (or).
use super::codegen::{self, Args, PRELUDE};
use super::elementwise::{copy_into, same_device};
use super::storage::check_views;
use super::storage::CudaData;
use crate::primitives::index::ScatterMode;
use crate::shape::{contiguous_strides, numel};
use crate::{DType, Result};
use cudarc::driver::result as dr;
use std::ffi::c_void;

const BLOCK: u32 = 256;

/// How many gathers and scatters checked their indices on the device and waited for the result
/// (those whose indices were not known to be in range from the host).
pub static INDEX_CHECK_WAITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn check_index(idx: &CudaData, what: &str) -> Result<()> {
    if !idx.dtype.is_int() {
        return Err(idx.device().error(format!("{what}: indices must be integers, got {}", idx.dtype)));
    }
    Ok(())
}

/// Whether every index `idx` can hold lies in `-n..n`, known on the host without looking at
/// the device (the buffer's values were uploaded from the host, see `CudaBuffer::int_range`).
/// A graph capture records the buffers it trusted so (`capture::note_index_bound`).
fn known_in_range(idx: &CudaData, n: usize) -> bool {
    let known = idx.buf.int_range(idx.dtype).is_some_and(|(lo, hi)| lo >= -(n as i64) && hi < n as i64);
    if known {
        super::capture::note_index_bound(idx.device().ordinal(), idx.buf.ptr(), idx.dtype, n as i64);
    }
    known
}

/// The bad-index cell of a launch: none (a null pointer, which the kernels skip) when the
/// indices are known to be in range, so the launch needs no read-back and the host does not
/// wait for the GPU; else a new cell for [`report`].
fn check_cell(x: &CudaData, idx: &CudaData, n: usize) -> Result<Option<CudaData>> {
    if known_in_range(idx, n) {
        Ok(None)
    } else {
        bad_cell(x).map(Some)
    }
}

/// An 8-byte device cell set to `u64::MAX` (no bad index yet).
fn bad_cell(x: &CudaData) -> Result<CudaData> {
    let dev = x.device();
    let cell = CudaData::empty(dev, DType::I64, &[1])?;
    // SAFETY: the cell is one `i64`, 8 bytes (in an 8-byte bucket) just allocated on this
    // device's stream, and the memset is queued on that stream, before any kernel reads it.
    unsafe { dr::memset_d8_async(cell.ptr(), 0xff, 8, dev.cu_stream()) }
        .map_err(|e| dev.error(format!("index check cell: {e}")))?;
    Ok(cell)
}

/// Read the bad-index cell; `Err` with the CPU's message when an index was out of range (the
/// node adds the op and where it was built).
fn report(cell: &CudaData, idx: &CudaData, idx_shape: &[usize], axis: usize, n: usize) -> Result<()> {
    INDEX_CHECK_WAITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pos = cell.to_host(&[1])?.buf.as_slice::<i64>()[0];
    if pos == -1 {
        return Ok(());
    }
    let host = idx.to_host(idx_shape)?;
    let k: i64 = crate::dispatch_dtype!(idx.dtype, T => {
        use crate::dtype::Element;
        host.buf.as_slice::<T>()[pos as usize].to_i64()
    });
    Err(idx.device().error(format!("index {k} is out of range for axis {axis} of extent {n} (valid: -{n}..{n})")))
}

/// `out[.., j, ..] = x[.., idx[.., j, ..], ..]` along `axis`; `idx` has `x`'s rank and the same
/// extents on every other axis. The result is dense with `idx_shape`.
pub fn gather(x: &CudaData, x_shape: &[usize], idx: &CudaData, idx_shape: &[usize], axis: usize) -> Result<CudaData> {
    check_views("take_along_axis", &[(x, x_shape), (idx, idx_shape)])?;
    let dev = same_device("take_along_axis", &[x, idx])?;
    check_index(idx, "take_along_axis")?;
    let out = CudaData::empty(dev, x.dtype, idx_shape)?;
    if numel(idx_shape) == 0 {
        return Ok(out);
    }
    let n = x_shape[axis];
    let mut xs = x.strides.clone();
    let ax_stride = xs[axis] as i64;
    xs[axis] = 0;
    let args = Args::<2>::new("take_along_axis", idx_shape, [&xs, &idx.strides])?;
    let cell = check_cell(x, idx, n)?;
    let (t, it) = (codegen::bits_type(x.dtype), codegen::storage(idx.dtype));
    let name = format!("ct_gather_{t}_{}", codegen::tag(idx.dtype));
    let k = dev.kernel(&name, &name, || gather_source(&name, t, it))?;
    let (mut po, mut px, mut pi, mut a, mut s, mut nn, mut pb) =
        (out.ptr(), x.ptr(), idx.ptr(), args, ax_stride, n as i64, cell.as_ref().map_or(0, CudaData::ptr));
    let mut params: Vec<*mut c_void> = vec![
        &mut po as *mut u64 as *mut c_void,
        &mut px as *mut u64 as *mut c_void,
        &mut pi as *mut u64 as *mut c_void,
        &mut a as *mut Args<2> as *mut c_void,
        &mut s as *mut i64 as *mut c_void,
        &mut nn as *mut i64 as *mut c_void,
        &mut pb as *mut u64 as *mut c_void,
    ];
    // SAFETY: the gather kernel takes (out, x, idx, ct_args<2>, axis stride, axis length,
    // bad-index cell); `args` describes the live `out`, `x` and `idx` views it was built from,
    // and the cell is a live one-element buffer or null (the kernel then writes no cell; it
    // checks every index against `n` either way).
    unsafe { dev.launch(k, dev.grid_for(args.n as u64, BLOCK), BLOCK, 0, &mut params) }?;
    if let Some(cell) = &cell {
        report(cell, idx, idx_shape, axis, n)?;
    }
    Ok(out)
}

/// The atomic accumulation `*p += v` for elements of `d` (C source of `ct_acc`).
fn atomic_add_source(d: DType) -> String {
    let st = codegen::storage(d);
    match d {
        DType::F32 | DType::F64 | DType::I32 | DType::U32 => {
            format!("__device__ __forceinline__ void ct_acc({st}* p, {st} v) {{ atomicAdd(p, v); }}")
        }
        DType::I64 => "__device__ __forceinline__ void ct_acc(i64* p, i64 v) { atomicAdd((u64*)p, (u64)v); }".into(),
        _ => {
            let comb = match d {
                DType::Bool => "(u8)((cur | v) != 0 ? 1 : 0)".to_string(),
                DType::U8 => "(u8)(cur + v)".to_string(),
                DType::F16 => "ct_f32_to_f16(ct_f16_to_f32(cur) + ct_f16_to_f32(v))".to_string(),
                _ => "ct_f32_to_bf16(ct_bf16_to_f32(cur) + ct_bf16_to_f32(v))".to_string(),
            };
            let mask = if d.size_of() == 1 { "0xffu" } else { "0xffffu" };
            format!(
                r#"__device__ __forceinline__ void ct_acc({st}* p, {st} v) {{
    u32* w = (u32*)((u64)p & ~(u64)3);
    u32 shift = (u32)((u64)p & 3) * 8u;
    u32 mask = {mask} << shift;
    u32 old = *w, assumed;
    do {{
        assumed = old;
        {st} cur = ({st})((assumed & mask) >> shift);
        {st} nw = {comb};
        old = atomicCAS(w, assumed, (assumed & ~mask) | (((u32)nw << shift) & mask));
    }} while (old != assumed);
}}"#
            )
        }
    }
}

/// Whether scatter-adds run in a fixed order (the default) rather than with atomics
/// (`COTANGENT_DETERMINISTIC=0`); read once.
pub fn deterministic() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("COTANGENT_DETERMINISTIC").map_or(true, |v| v.trim() != "0"))
}

/// About how many threads a deterministic scatter launches (lanes times ranges along the axis):
/// enough to fill the device, few enough that re-reading each lane's indices per range stays
/// cheap.
const SCATTER_THREADS: usize = 1 << 16;

/// A dense copy of `x` with `updates[.., j, ..]` put (`Put`: the last duplicate in row-major
/// order wins) or added (`Add`: duplicates accumulate) at `[.., idx[.., j, ..], ..]` along
/// `axis`. `updates` has `idx_shape`, whose extents off `axis` are `x_shape`'s.
pub fn scatter(
    mode: ScatterMode,
    x: &CudaData,
    x_shape: &[usize],
    idx: &CudaData,
    idx_shape: &[usize],
    updates: &CudaData,
    axis: usize,
) -> Result<CudaData> {
    let op = match mode {
        ScatterMode::Add => "scatter_add_along_axis",
        ScatterMode::Put => "put_along_axis",
    };
    check_views(op, &[(x, x_shape), (idx, idx_shape), (updates, idx_shape)])?;
    let dev = same_device(op, &[x, idx, updates])?;
    check_index(idx, op)?;
    if updates.dtype != x.dtype {
        return Err(dev.error(format!("{op}: updates of {} into {}", updates.dtype, x.dtype)));
    }
    let out = CudaData::empty(dev, x.dtype, x_shape)?;
    copy_into(&out, x, x_shape)?;
    if numel(idx_shape) == 0 {
        return Ok(out);
    }
    let n = x_shape[axis];
    let mut os = contiguous_strides(x_shape);
    let ax_stride = os[axis] as i64;
    os[axis] = 0;
    let cell = check_cell(x, idx, n)?;
    let (t, it) = (codegen::storage(x.dtype), codegen::storage(idx.dtype));
    let mut pb = cell.as_ref().map_or(0, CudaData::ptr);
    let (mut po, mut pi, mut pu, mut s, mut nn) = (out.ptr(), idx.ptr(), updates.ptr(), ax_stride, n as i64);
    if mode == ScatterMode::Add && !deterministic() {
        let args = Args::<3>::new(op, idx_shape, [&os, &idx.strides, &updates.strides])?;
        let name = format!("ct_scatter_add_{}_{}", codegen::tag(x.dtype), codegen::tag(idx.dtype));
        let k = dev.kernel(&name, &name, || scatter_add_source(&name, x.dtype, t, it))?;
        let mut a = args;
        let mut params: Vec<*mut c_void> = vec![
            &mut po as *mut u64 as *mut c_void,
            &mut pi as *mut u64 as *mut c_void,
            &mut pu as *mut u64 as *mut c_void,
            &mut a as *mut Args<3> as *mut c_void,
            &mut s as *mut i64 as *mut c_void,
            &mut nn as *mut i64 as *mut c_void,
            &mut pb as *mut u64 as *mut c_void,
        ];
        // SAFETY: the scatter-add kernel takes (out, idx, updates, ct_args<3>, axis stride, axis
        // length, bad-index cell); `args` describes the live `out`, `idx` and `updates` views it
        // was built from, and the cell is a live one-element buffer or null (then no cell is
        // written).
        unsafe { dev.launch(k, dev.grid_for(args.n as u64, BLOCK), BLOCK, 0, &mut params) }?;
    } else {
        // one lane per position off the axis; each lane's indices are walked in order
        let mut lane_shape = idx_shape.to_vec();
        lane_shape[axis] = 1;
        let lanes = numel(&lane_shape);
        let mut a = Args::<3>::new(op, &lane_shape, [&os, &idx.strides, &updates.strides])?;
        let ranges = SCATTER_THREADS.div_ceil(lanes).clamp(1, n);
        let (mut m, mut chunk, mut nr) = (idx_shape[axis] as i64, n.div_ceil(ranges) as i64, ranges as i64);
        let (mut idx_ax, mut upd_ax) = (idx.strides[axis] as i64, updates.strides[axis] as i64);
        let mut inner = numel(&idx_shape[axis + 1..]) as i64;
        let name = format!(
            "ct_scatter_{}_{}_{}",
            if mode == ScatterMode::Add { "add" } else { "put" },
            codegen::tag(x.dtype),
            codegen::tag(idx.dtype)
        );
        let k = dev.kernel(&name, &name, || ordered_scatter_source(&name, mode, x.dtype, t, it))?;
        let mut params: Vec<*mut c_void> = vec![
            &mut po as *mut u64 as *mut c_void,
            &mut pi as *mut u64 as *mut c_void,
            &mut pu as *mut u64 as *mut c_void,
            &mut a as *mut Args<3> as *mut c_void,
            &mut m as *mut i64 as *mut c_void,
            &mut idx_ax as *mut i64 as *mut c_void,
            &mut upd_ax as *mut i64 as *mut c_void,
            &mut s as *mut i64 as *mut c_void,
            &mut nn as *mut i64 as *mut c_void,
            &mut chunk as *mut i64 as *mut c_void,
            &mut nr as *mut i64 as *mut c_void,
            &mut inner as *mut i64 as *mut c_void,
            &mut pb as *mut u64 as *mut c_void,
        ];
        // SAFETY: the ordered scatter kernel takes (out, idx, updates, ct_args<3> over the lanes,
        // lane length, idx and updates strides along the axis, out's axis stride, axis extent,
        // range length, range count, elements after the axis, bad-index cell), all i64 but the
        // pointers; `a` describes the lanes of the live `out`, `idx` and `updates` views, whose
        // strides along the axis are the ones passed, and the cell is live or null.
        unsafe { dev.launch(k, dev.grid_for((lanes * ranges) as u64, BLOCK), BLOCK, 0, &mut params) }?;
    }
    if let Some(cell) = &cell {
        report(cell, idx, idx_shape, axis, n)?;
    }
    Ok(out)
}

/// `out = combine(out, v)` for elements of `d` (C type `st`), where `combine` replaces (`Put`)
/// or adds as the CPU does (`Add`: integers wrap, bools or, f16/bf16 add in f32 and round).
fn combine_source(mode: ScatterMode, d: DType, st: &str) -> String {
    let body = match (mode, d) {
        (ScatterMode::Put, _) => "*p = v;".to_string(),
        (_, DType::Bool) => "*p = (u8)((*p | v) != 0 ? 1 : 0);".to_string(),
        (_, DType::F16) => "*p = ct_f32_to_f16(ct_f16_to_f32(*p) + ct_f16_to_f32(v));".to_string(),
        (_, DType::BF16) => "*p = ct_f32_to_bf16(ct_bf16_to_f32(*p) + ct_bf16_to_f32(v));".to_string(),
        (_, DType::F32 | DType::F64) => "*p = *p + v;".to_string(),
        // integers wrap: add as the unsigned type of the same width
        _ => format!("*p = ({st})((u64)(i64)*p + (u64)(i64)v);"),
    };
    format!("__device__ __forceinline__ void ct_combine({st}* p, {st} v) {{ {body} }}")
}

/// The C source of the ordered (atomic-free) scatter kernel `name`: thread `t` owns lane
/// `t % lanes` and the range `t / lanes` of positions along the axis.
fn ordered_scatter_source(name: &str, mode: ScatterMode, d: DType, t: &str, it: &str) -> String {
    format!(
        r#"{PRELUDE}
{combine}
extern "C" __global__ void {name}({t}* __restrict__ out, const {it}* __restrict__ idx, const {t}* __restrict__ upd, ct_args<3> g, i64 m, i64 idx_ax, i64 upd_ax, i64 out_ax, i64 n, i64 chunk, i64 ranges, i64 inner, u64* bad) {{
    CT_LOOP(t, g.n * ranges) {{
        i64 lane = t % g.n, r = t / g.n;
        i64 o[3]; ct_offsets<3>(g, lane, o);
        i64 lo = r * chunk, hi = lo + chunk < n ? lo + chunk : n;
        const {it}* ip = idx + o[1];
        const {t}* up = upd + o[2];
        {t}* op = out + o[0];
        for (i64 j = 0; j < m; j++) {{
            i64 k = (i64)ip[j * idx_ax];
            if (k < 0) k += n;
            if (k >= lo && k < hi) ct_combine(op + k * out_ax, up[j * upd_ax]);
            else if ((k < 0 || k >= n) && r == 0 && bad) atomicMin(bad, (u64)((lane / inner) * m * inner + j * inner + lane % inner));
        }}
    }}
}}
"#,
        combine = combine_source(mode, d, t)
    )
}

/// The C source of the gather kernel `name` for elements of C type `t` and indices of `it`.
fn gather_source(name: &str, t: &str, it: &str) -> String {
    format!(
        r#"{PRELUDE}
extern "C" __global__ void {name}({t}* __restrict__ out, const {t}* __restrict__ x, const {it}* __restrict__ idx, ct_args<2> g, i64 ax_stride, i64 n, u64* bad) {{
    CT_LOOP(i, g.n) {{
        i64 o[2]; ct_offsets<2>(g, i, o);
        i64 k = (i64)idx[o[1]];
        if (k < 0) k += n;
        if (k < 0 || k >= n) {{ if (bad) atomicMin(bad, (u64)i); out[i] = 0; }}
        else out[i] = x[o[0] + k * ax_stride];
    }}
}}
"#
    )
}

/// The C source of the scatter-add kernel `name` for elements of dtype `d` (C type `t`) and
/// indices of C type `it`.
fn scatter_add_source(name: &str, d: DType, t: &str, it: &str) -> String {
    format!(
        r#"{PRELUDE}
{acc}
extern "C" __global__ void {name}({t}* out, const {it}* __restrict__ idx, const {t}* __restrict__ upd, ct_args<3> g, i64 ax_stride, i64 n, u64* bad) {{
    CT_LOOP(i, g.n) {{
        i64 o[3]; ct_offsets<3>(g, i, o);
        i64 k = (i64)idx[o[1]];
        if (k < 0) k += n;
        if (k < 0 || k >= n) {{ if (bad) atomicMin(bad, (u64)i); }}
        else ct_acc(out + o[0] + k * ax_stride, upd[o[2]]);
    }}
}}
"#,
        acc = atomic_add_source(d)
    )
}

/// Every gather and scatter kernel source (each element dtype with each index dtype), for
/// compile checks.
pub fn all_sources() -> Vec<(String, String)> {
    let mut v = Vec::new();
    for d in crate::dtype::ALL_DTYPES {
        for i in crate::dtype::ALL_DTYPES.into_iter().filter(|i| i.is_int()) {
            let (t, it) = (codegen::bits_type(d), codegen::storage(i));
            let name = format!("ct_gather_{t}_{}", codegen::tag(i));
            if !v.iter().any(|(n, _)| *n == name) {
                v.push((name.clone(), gather_source(&name, t, it)));
            }
            let name = format!("ct_scatter_add_{}_{}", codegen::tag(d), codegen::tag(i));
            v.push((name.clone(), scatter_add_source(&name, d, codegen::storage(d), it)));
            for (mode, tag) in [(ScatterMode::Add, "add"), (ScatterMode::Put, "put")] {
                let name = format!("ct_scatter_{tag}_{}_{}", codegen::tag(d), codegen::tag(i));
                v.push((name.clone(), ordered_scatter_source(&name, mode, d, codegen::storage(d), it)));
            }
        }
    }
    v
}
