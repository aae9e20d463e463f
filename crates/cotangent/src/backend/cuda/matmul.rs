//! Matrix products through cuBLAS `cublasGemmStridedBatchedEx`.
//!
//! cuBLAS is column-major; a row-major `C = A·B` (`[m, k]·[k, n]`) is the column-major
//! `Cᵀ = Bᵀ·Aᵀ`, so the operands are swapped and each one's transpose flag and leading dimension
//! come from its strides: a row-contiguous operand (column stride 1) is used as stored, a
//! column-contiguous one (row stride 1, e.g. a transposed view) with the transpose flag — no
//! copy either way. Only an operand that is neither is copied to a dense array first. Batch axes
//! (broadcast with stride 0 where an operand is repeated) are merged where they are dense for all
//! three arrays; the innermost merged batch axis goes to cuBLAS as the strided batch, the outer
//! ones are looped over on the host.
//!
//! Compute types are explicit: f32 products use `CUBLAS_COMPUTE_32F` (exact f32, no TF32)
//! unless [`set_tf32`] or `COTANGENT_CUDA_TF32=1` allows TF32; f16 and bf16 accumulate in f32;
//! f64 uses `CUBLAS_COMPUTE_64F`. Integer and bool products are not supported here (`Err`).
use super::device::CudaDevice;
use super::elementwise::{same_device, to_contiguous};
use super::storage::check_views;
use super::storage::CudaData;
use crate::backend::cpu::elementwise::broadcast_strides;
use crate::{DType, Result};
use cudarc::cublas::sys as bs;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// 0: not decided yet (read the environment), 1: exact f32, 2: TF32 allowed.
static TF32: AtomicU8 = AtomicU8::new(0);

/// Allow (or forbid) TF32 tensor-core arithmetic for f32 products (faster, ~1e-3 relative
/// error). Off by default; `COTANGENT_CUDA_TF32=1` turns it on at start.
pub fn set_tf32(allow: bool) {
    TF32.store(if allow { 2 } else { 1 }, Ordering::Relaxed);
}

fn tf32_allowed() -> bool {
    match TF32.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var("COTANGENT_CUDA_TF32").is_ok_and(|v| v == "1" || v == "true");
            set_tf32(on);
            on
        }
        v => v == 2,
    }
}

/// One operand as cuBLAS sees it (column-major): transpose flag and leading dimension.
struct Operand {
    x: CudaData,
    trans: bool,
    ld: i64,
}

/// `x` (a `rows × cols` row-major matrix view with row stride `rs`, column stride `cs`) as a
/// column-major `cols × rows` operand (the transpose of `x`), or `None` if it needs a copy.
fn as_operand(x: &CudaData, rows: usize, cols: usize, rs: isize, cs: isize) -> Option<(bool, i64)> {
    // row-contiguous: column-major cols × rows with ld = rs, no transpose
    if (cs == 1 || cols <= 1) && (rows <= 1 || rs >= cols.max(1) as isize) {
        let ld = if rows <= 1 { cols.max(1) as isize } else { rs };
        return Some((false, ld as i64));
    }
    // column-contiguous: stored column-major rows × cols with ld = cs: transpose
    if (rs == 1 || rows <= 1) && (cols <= 1 || cs >= rows.max(1) as isize) {
        let ld = if cols <= 1 { rows.max(1) as isize } else { cs };
        return Some((true, ld as i64));
    }
    let _ = x;
    None
}

fn operand(x: &CudaData, shape: &[usize]) -> Result<(Operand, Vec<usize>)> {
    let nd = shape.len();
    let (rows, cols) = (shape[nd - 2], shape[nd - 1]);
    if let Some((trans, ld)) = as_operand(x, rows, cols, x.strides[nd - 2], x.strides[nd - 1]) {
        return Ok((Operand { x: x.clone(), trans, ld }, shape.to_vec()));
    }
    let dense = to_contiguous(x, shape)?;
    Ok((Operand { x: dense, trans: false, ld: cols.max(1) as i64 }, shape.to_vec()))
}

/// `a · b` for `a: [..., m, k]` and `b: [..., k, n]` (same float dtype, at least two axes each),
/// batch axes broadcast to `out_shape = [batch..., m, n]`. Returns a dense array.
pub fn matmul(
    a: &CudaData,
    a_shape: &[usize],
    b: &CudaData,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<CudaData> {
    let dev = same_device("matmul", &[a, b])?;
    check_views("matmul", &[(a, a_shape), (b, b_shape)])?;
    let d = a.dtype;
    if b.dtype != d {
        return Err(dev.error(format!("matmul: operands of dtypes {d} and {}", b.dtype)));
    }
    let (na, nb, no) = (a_shape.len(), b_shape.len(), out_shape.len());
    if na < 2 || nb < 2 || no < 2 {
        return Err(dev.error(format!("matmul: needs matrices, got {a_shape:?} · {b_shape:?}")));
    }
    let (m, k, n) = (out_shape[no - 2], a_shape[na - 1], out_shape[no - 1]);
    let (dt, ct) = match d {
        DType::F32 => (
            bs::cudaDataType::CUDA_R_32F,
            if tf32_allowed() {
                bs::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
            } else {
                bs::cublasComputeType_t::CUBLAS_COMPUTE_32F
            },
        ),
        DType::F64 => (bs::cudaDataType::CUDA_R_64F, bs::cublasComputeType_t::CUBLAS_COMPUTE_64F),
        DType::F16 => (bs::cudaDataType::CUDA_R_16F, bs::cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::BF16 => (bs::cudaDataType::CUDA_R_16BF, bs::cublasComputeType_t::CUBLAS_COMPUTE_32F),
        other => {
            return Err(dev.error(format!(
                "matmul of {other} is not supported on CUDA ({a_shape:?} · {b_shape:?}); cast to a float dtype"
            )))
        }
    };
    let out = if k == 0 { CudaData::zeros(dev, d, out_shape)? } else { CudaData::empty(dev, d, out_shape)? };
    let batch = &out_shape[..no - 2];
    let nbatch: usize = batch.iter().product();
    if m == 0 || n == 0 || k == 0 || nbatch == 0 {
        return Ok(out);
    }
    for (what, v) in [("m", m), ("n", n), ("k", k)] {
        if v > i32::MAX as usize {
            return Err(dev.error(format!("matmul: {what} = {v} exceeds cuBLAS's 32-bit sizes")));
        }
    }
    let (oa, _) = operand(a, a_shape)?;
    let (ob, _) = operand(b, b_shape)?;
    // batch strides (elements) of a, b (broadcast) and c (dense)
    let sa = broadcast_strides(&a_shape[..na - 2], &oa.x.strides[..na - 2], batch);
    let sb = broadcast_strides(&b_shape[..nb - 2], &ob.x.strides[..nb - 2], batch);
    let sc = crate::shape::contiguous_strides(&out_shape[..no - 2])
        .iter()
        .map(|&s| s * (m * n) as isize)
        .collect::<Vec<_>>();
    let (dims, strides) = merge_batch(batch, [&sa, &sb, &sc]);
    // the innermost merged batch axis is cuBLAS's batch; outer ones are host loops
    let (inner, inner_st) = match dims.last() {
        Some(&l) => (l, strides[strides.len() - 1]),
        None => (1, [0, 0, 0]),
    };
    let outer_dims = &dims[..dims.len().saturating_sub(1)];
    let outer_strides = &strides[..strides.len().saturating_sub(1)];
    let outer: usize = outer_dims.iter().product();
    let es = d.size_of() as u64;
    let one32 = 1.0f32;
    let zero32 = 0.0f32;
    let one64 = 1.0f64;
    let zero64 = 0.0f64;
    let (alpha, beta) = if d == DType::F64 {
        (&one64 as *const f64 as *const c_void, &zero64 as *const f64 as *const c_void)
    } else {
        (&one32 as *const f32 as *const c_void, &zero32 as *const f32 as *const c_void)
    };
    dev.with_blas(|blas| {
        for o in 0..outer {
            // offsets of this outer batch element
            let (mut rem, mut offs) = (o, [0isize; 3]);
            for ax in (0..outer_dims.len()).rev() {
                let i = (rem % outer_dims[ax]) as isize;
                rem /= outer_dims[ax];
                for t in 0..3 {
                    offs[t] += i * outer_strides[ax][t];
                }
            }
            let pa = (oa.x.ptr() as i64 + offs[0] as i64 * es as i64) as u64;
            let pb = (ob.x.ptr() as i64 + offs[1] as i64 * es as i64) as u64;
            let pc = (out.ptr() as i64 + offs[2] as i64 * es as i64) as u64;
            gemm(
                dev,
                blas,
                (dt, ct),
                (m, n, k),
                (&ob, pb, inner_st[1]),
                (&oa, pa, inner_st[0]),
                (pc, inner_st[2]),
                inner,
                (alpha, beta),
            )?;
        }
        Ok(())
    })?;
    Ok(out)
}

/// Merge batch axes (extent > 1) that are dense for all three operands.
fn merge_batch(batch: &[usize], st: [&[isize]; 3]) -> (Vec<usize>, Vec<[isize; 3]>) {
    let mut dims: Vec<usize> = Vec::new();
    let mut strides: Vec<[isize; 3]> = Vec::new();
    for (ax, &e) in batch.iter().enumerate() {
        if e == 1 {
            continue;
        }
        let s = [st[0][ax], st[1][ax], st[2][ax]];
        if let (Some(ld), Some(ls)) = (dims.last_mut(), strides.last_mut()) {
            if (0..3).all(|t| ls[t] == s[t] * e as isize) {
                *ld *= e;
                *ls = s;
                continue;
            }
        }
        dims.push(e);
        strides.push(s);
    }
    (dims, strides)
}

/// One strided-batched product: column-major `C(n×m) = op(B)(n×k) · op(A)(k×m)`.
#[allow(clippy::too_many_arguments)]
fn gemm(
    dev: &Arc<CudaDevice>,
    blas: &cudarc::cublas::CudaBlas,
    (dt, ct): (bs::cudaDataType, bs::cublasComputeType_t),
    (m, n, k): (usize, usize, usize),
    (b, pb, sb): (&Operand, u64, isize),
    (a, pa, sa): (&Operand, u64, isize),
    (pc, sc): (u64, isize),
    count: usize,
    (alpha, beta): (*const c_void, *const c_void),
) -> Result<()> {
    let op = |t: bool| if t { bs::cublasOperation_t::CUBLAS_OP_T } else { bs::cublasOperation_t::CUBLAS_OP_N };
    if count > i32::MAX as usize || b.ld > i32::MAX as i64 || a.ld > i32::MAX as i64 {
        return Err(dev.error(format!("matmul: batch {count} or leading dimensions exceed cuBLAS's 32-bit sizes")));
    }
    let algo = bs::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    let failed = |e| dev.error(format!("cuBLAS gemm ({m}×{k}·{k}×{n}, batch {count}, {dt:?}): {e:?}"));
    // SAFETY: `pa`, `pb` and `pc` address live buffers of this device (`a`, `b` and the output,
    // held by the caller) holding the `count` strided matrices the sizes, leading dimensions and
    // batch strides describe (derived from the operands' shapes and strides by `as_operand`, so
    // every addressed element lies in its view); m, n, k, the leading dimensions and `count` fit
    // in `i32` (checked here and in `matmul`). The output is a fresh dense buffer no input
    // shares. The handle works on the device's stream; alpha and beta point to host scalars of
    // the compute type's scalar type (f64 for `CUBLAS_COMPUTE_64F`, else f32) that outlive
    // the call.
    unsafe {
        cudarc::cublas::result::gemm_strided_batched_ex(
            *blas.handle(),
            op(b.trans),
            op(a.trans),
            n as i32,
            m as i32,
            k as i32,
            alpha,
            pb as *const c_void,
            dt,
            b.ld as i32,
            sb as i64,
            pa as *const c_void,
            dt,
            a.ld as i32,
            sa as i64,
            beta,
            pc as *mut c_void,
            dt,
            n as i32,
            sc as i64,
            count as i32,
            ct,
            algo,
        )
    }
    .map_err(failed)
}
