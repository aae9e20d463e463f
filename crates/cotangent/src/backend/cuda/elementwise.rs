//! Element-wise kernels: one source template per arity (unary, binary, select, cast, copy) and
//! one expression snippet per op and dtype class, reproducing the CPU kernels' semantics
//! (`primitives/unary.rs`, `primitives/binary.rs`): wrapping integer arithmetic, numpy's floor
//! division and remainder, NaN-propagating maximum/minimum, round half to even, f16/bf16
//! computed in f32.
//!
//! Operands may be strided or broadcast (stride 0); the output is a new dense array. Shapes and
//! strides are merged and passed by value ([`Layout`]); element indices are 64-bit; a dense launch
//! skips the index arithmetic; all kernels use grid-stride loops.
use super::codegen::{self, Layout, PRELUDE};
use super::device::{CudaDevice, Kernel};
use super::storage::check_views;
use super::storage::CudaData;
use crate::backend::cpu::elementwise::broadcast_strides;
use crate::primitives::binary::BinaryOp;
use crate::primitives::unary::UnaryOp;
use crate::{DType, Result};
use smallvec::SmallVec;
use std::ffi::c_void;
use std::sync::Arc;

/// Threads per block of the element-wise kernels.
const BLOCK: u32 = 256;

/// Which family of dtypes a snippet is written for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    Float,
    Int,
    Bool,
}

pub(super) fn class(d: DType) -> Class {
    if d.is_float() {
        Class::Float
    } else if d == DType::Bool {
        Class::Bool
    } else {
        Class::Int
    }
}

/// The body of `R op(T x)` for a unary op on a dtype class (`None`: not defined there).
pub(super) fn unary_snippet(op: UnaryOp, c: Class) -> Option<&'static str> {
    use UnaryOp::*;
    Some(match (c, op) {
        (Class::Bool, LogicalNot) => "return !x;",
        (Class::Bool | Class::Int, IsNan | IsInf) => "return false;",
        (Class::Bool, _) => return None,
        (_, LogicalNot) => return None,
        (Class::Int, Neg) => "return (T)((U)0 - (U)x);",
        (Class::Int, Abs) => "return (IS_SIGNED && x < (T)0) ? (T)((U)0 - (U)x) : x;",
        (Class::Int, Sign) => "return x > (T)0 ? (T)1 : ((IS_SIGNED && x < (T)0) ? (T)-1 : (T)0);",
        (Class::Int, Square) => "return (T)((U)x * (U)x);",
        (Class::Int, Floor | Ceil | Round) => "return x;",
        (Class::Int, _) => return None,
        (Class::Float, op) => match op {
            Neg => "return -x;",
            Abs => "return F(fabs)(x);",
            Sign => "return x > (T)0 ? (T)1 : (x < (T)0 ? (T)-1 : x);",
            Exp => "return F(exp)(x);",
            Expm1 => "return F(expm1)(x);",
            Log => "return F(log)(x);",
            Log1p => "return F(log1p)(x);",
            Log2 => "return F(log2)(x);",
            Sqrt => "return F(sqrt)(x);",
            Rsqrt => "return (T)1 / F(sqrt)(x);",
            Square => "return x * x;",
            Reciprocal => "return (T)1 / x;",
            Sin => "return F(sin)(x);",
            Cos => "return F(cos)(x);",
            Tan => "return F(tan)(x);",
            Tanh => "return F(tanh)(x);",
            Sinh => "return F(sinh)(x);",
            Cosh => "return F(cosh)(x);",
            Arcsin => "return F(asin)(x);",
            Arccos => "return F(acos)(x);",
            Arctan => "return F(atan)(x);",
            Sigmoid => "if (x >= (T)0) return (T)1 / ((T)1 + F(exp)(-x)); T e = F(exp)(x); return e / ((T)1 + e);",
            Erf => "return (T)erf((double)x);",
            Erfinv => "return (T)erfinv((double)x);",
            Floor => "return F(floor)(x);",
            Ceil => "return F(ceil)(x);",
            Round => "return F(rint)(x);",
            IsNan => "return x != x;",
            IsInf => "return x == CT_INF || x == -CT_INF;",
            LogicalNot => return None,
        },
    })
}

/// The body of `R op(T x, T y)` for a binary op on a dtype class (`None`: not defined there).
pub(super) fn binary_snippet(op: BinaryOp, c: Class) -> Option<&'static str> {
    use BinaryOp::*;
    let cmp = match op {
        Equal => Some("return x == y;"),
        NotEqual => Some("return x != y;"),
        Less => Some("return x < y;"),
        LessEqual => Some("return x <= y;"),
        Greater => Some("return x > y;"),
        GreaterEqual => Some("return x >= y;"),
        LogicalAnd => Some("return x != (T)0 && y != (T)0;"),
        LogicalOr => Some("return x != (T)0 || y != (T)0;"),
        _ => None,
    };
    Some(match c {
        Class::Bool => match op {
            Add | LogicalOr | Maximum => "return x | y;",
            Multiply | LogicalAnd | Minimum => "return x & y;",
            Less => "return !x & y;",
            Greater => "return x & !y;",
            Equal | NotEqual | LessEqual | GreaterEqual => cmp?,
            _ => return None,
        },
        Class::Int => match op {
            Add => "return (T)((U)x + (U)y);",
            Subtract => "return (T)((U)x - (U)y);",
            Multiply => "return (T)((U)x * (U)y);",
            FloorDivide => {
                "if (y == (T)0) return (T)0; if (IS_SIGNED && y == (T)-1) return (T)((U)0 - (U)x); \
                 T q = x / y; if ((x % y != (T)0) && ((x < (T)0) != (y < (T)0))) return (T)(q - (T)1); return q;"
            }
            Remainder => {
                "if (y == (T)0 || (IS_SIGNED && y == (T)-1)) return (T)0; T r = x % y; \
                 if (r != (T)0 && ((r < (T)0) != (y < (T)0))) return (T)(r + y); return r;"
            }
            // integer power with a negative exponent fails the evaluation (as on the CPU), which
            // a kernel cannot report: it runs on the host
            Power => return None,
            Maximum => "return x > y ? x : y;",
            Minimum => "return x < y ? x : y;",
            Divide | Arctan2 | LogAddExp | MaximumShare | MinimumShare => return None,
            _ => cmp?,
        },
        Class::Float => match op {
            Add => "return x + y;",
            Subtract => "return x - y;",
            Multiply => "return x * y;",
            Divide => "return x / y;",
            FloorDivide => {
                "if (y == (T)0) return x / y; T md = F(fmod)(x, y); T div = (x - md) / y; \
                 if (md != (T)0 && ((y < (T)0) != (md < (T)0))) div = div - (T)1; \
                 if (div == (T)0) return (x / y < (T)0) ? -(T)0 : (T)0; \
                 T fl = F(floor)(div); return (div - fl > (T)0.5) ? fl + (T)1 : fl;"
            }
            Remainder => "T r = F(fmod)(x, y); return (r != (T)0 && ((r < (T)0) != (y < (T)0))) ? r + y : r;",
            Power => "return F(pow)(x, y);",
            Maximum => "if (x != x || y != y) return CT_NAN; return x >= y ? x : y;",
            Minimum => "if (x != x || y != y) return CT_NAN; return x <= y ? x : y;",
            MaximumShare => "return x > y ? (T)1 : (x == y ? (T)0.5 : (T)0);",
            MinimumShare => "return x < y ? (T)1 : (x == y ? (T)0.5 : (T)0);",
            Arctan2 => "return F(atan2)(x, y);",
            LogAddExp => {
                "T m = x > y ? x : y; if (m == -CT_INF || m == CT_INF || m != m) { if (x != x || y != y) return x + y; \
                 return m; } return m + F(log)(F(exp)(x - m) + F(exp)(y - m));"
            }
            _ => cmp?,
        },
    })
}

/// Launch a map kernel `(out_0, .., in_0, .., ct_args<K>)` over `layout.n()` elements, where
/// the kernel was generated by [`map_source`] for `outs.len()` outputs and `ins.len()` operands.
///
/// # Safety
///
/// `k` must be a kernel of [`map_source`] for exactly these output and operand counts and the
/// dtypes of the buffers, and `layout` must describe views that lie inside the live buffers at
/// `outs` and `ins` (each at least as large as the highest element the layout reaches).
pub(super) unsafe fn launch_map(
    dev: &CudaDevice,
    k: Kernel,
    outs: &[u64],
    ins: &[u64],
    mut layout: Layout,
) -> Result<()> {
    let mut ptrs: SmallVec<[u64; 8]> = outs.iter().chain(ins).copied().collect();
    let mut params: SmallVec<[*mut c_void; 9]> = ptrs.iter_mut().map(|p| p as *mut u64 as *mut c_void).collect();
    params.push(layout.as_param());
    let n = layout.n() as u64;
    let threads = if layout.dense() { n.div_ceil(DENSE_UNROLL as u64) } else { n };
    // SAFETY: kernels from `map_source` take (out_0, .., in_0, .., ct_args<K>), which `params`
    // lists in that order; the caller guarantees the layout and buffers (see `# Safety`).
    unsafe { dev.launch(k, dev.grid_for(threads, BLOCK), BLOCK, 0, &mut params) }
}

/// Check that all operands live on the same device; return it.
pub(crate) fn same_device<'a>(what: &str, xs: &[&'a CudaData]) -> Result<&'a Arc<CudaDevice>> {
    let d = xs[0].device();
    if let Some(o) = xs.iter().find(|x| x.device().ordinal() != d.ordinal()) {
        return Err(d.error(format!("{what}: operands on cuda:{} and cuda:{}", d.ordinal(), o.device().ordinal())));
    }
    Ok(d)
}

/// Elements each thread of a dense launch handles per step of its grid-stride loop: independent
/// loads in flight per thread, which a bandwidth-bound kernel needs on a GPU whose memory latency
/// times bandwidth exceeds what one load per resident thread covers (H200: ~25 KiB per SM).
const DENSE_UNROLL: u32 = 8;

/// Elements each thread of a strided launch loads before computing them (each needs its own
/// offsets, so fewer than [`DENSE_UNROLL`]): one load in flight per thread held a bias add
/// (`[4096, 512] + [512]`, two axes) at ~1.2 TB/s on an H100.
const STRIDED_UNROLL: usize = 4;

/// A map kernel's source. `outs` declares the output parameters (`float* __restrict__ out`),
/// `in_ts` are the operands' C types, `body` is the per-element statement: `@k@` stands for the value of
/// operand `k` at element `i` (its storage type, unconverted), `o[k]` for that operand's offset.
///
/// Dense launches (`g.contig`: every operand dense or a broadcast scalar, as in `x * 1.01`) take
/// an unrolled loop without index arithmetic that first issues the loads of all
/// [`DENSE_UNROLL`] elements and only then computes and stores them: a body that calls `sin`
/// or converts f16 would otherwise keep one load in flight per thread, and a bandwidth-bound
/// kernel needs several. Strided launches compute each operand's offset from the element
/// number.
pub(super) fn map_source(header: &str, name: &str, outs: &str, in_ts: &[&str], body: &str) -> String {
    map_source_unrolled(header, name, outs, in_ts, body, DENSE_UNROLL as usize)
}

/// [`map_source`] with at most `max_unroll` elements per thread and grid step on the dense
/// path: a long body (a fused group of many steps) is compute-bound already, and each unrolled
/// copy of it lengthens NVRTC's compile.
pub(super) fn map_source_unrolled(
    header: &str,
    name: &str,
    outs: &str,
    in_ts: &[&str],
    body: &str,
    max_unroll: usize,
) -> String {
    let k = in_ts.len();
    let params: String = in_ts.iter().enumerate().map(|(j, t)| format!("const {t}* __restrict__ a{j}, ")).collect();
    let used: Vec<usize> = (0..k).filter(|j| body.contains(&format!("@{j}@"))).collect();
    // loads in flight per thread: DENSE_UNROLL per operand for a few operands, fewer per operand
    // for a fused group reading many (their registers would spill to local memory)
    let unroll = (DENSE_UNROLL as usize * 4 / used.len().max(1)).clamp(1, max_unroll.clamp(1, DENSE_UNROLL as usize));
    let mut loads = String::new();
    let mut dense_body = body.to_string();
    let mut strided_body = body.to_string();
    for &j in &used {
        let t = in_ts[j];
        loads.push_str(&format!(
            "      {t} ld{j}[{unroll}];\n      \
             _Pragma(\"unroll\") for (int u = 0; u < {unroll}; u++) {{ i64 i = b + u * stride; \
             if (i < g.n) ld{j}[u] = a{j}[scalar[{j}] ? 0 : i]; }}\n"
        ));
        dense_body = dense_body.replace(&format!("@{j}@"), &format!("ld{j}[u]"));
        strided_body = strided_body.replace(&format!("@{j}@"), &format!("a{j}[o[{j}]]"));
    }
    // a strided launch issues the loads of several elements before computing them too, unless
    // the body addresses an operand itself (`o[k]`: a strided destination, as in `copy_into`)
    let strided_unroll = unroll.min(STRIDED_UNROLL);
    let strided_loop = if dense_body.contains("o[") {
        format!("  CT_LOOP(i, g.n) {{ i64 o[{k}]; ct_offsets<{k}>(g, i, o); {strided_body} }}\n")
    } else {
        let mut strided_loads = String::new();
        for &j in &used {
            strided_loads.push_str(&format!("      {t} ld{j}[{strided_unroll}];\n", t = in_ts[j]));
        }
        strided_loads.push_str(&format!(
            "      _Pragma(\"unroll\") for (int u = 0; u < {strided_unroll}; u++) {{ i64 i = b + u * stride; \
             if (i < g.n) {{ i64 o[{k}]; ct_offsets<{k}>(g, i, o);"
        ));
        for &j in &used {
            strided_loads.push_str(&format!(" ld{j}[u] = a{j}[o[{j}]];"));
        }
        strided_loads.push_str(" } }\n");
        format!(
            "  {{\n    const i64 stride = (i64)blockDim.x * gridDim.x;\n    \
             for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < g.n; b += {strided_unroll} * stride) {{\n\
{strided_loads}      \
               _Pragma(\"unroll\") for (int u = 0; u < {strided_unroll}; u++) {{\n        \
                 i64 i = b + u * stride;\n        \
                 if (i < g.n) {{ {dense_body} }}\n      \
               }}\n    \
             }}\n  \
           }}\n"
        )
    };
    format!(
        "{PRELUDE}\n{header}\nextern \"C\" __global__ void {name}({outs}, {params}ct_args<{k}> g) {{\n  \
         if (g.contig & 1) {{\n    \
           const i64 stride = (i64)blockDim.x * gridDim.x;\n    \
           bool scalar[{k}];\n    \
           for (int k = 0; k < {k}; k++) scalar[k] = k < 62 && ((g.contig >> (k + 1)) & 1);\n    \
           for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < g.n; b += {unroll} * stride) {{\n\
{loads}      \
             _Pragma(\"unroll\") for (int u = 0; u < {unroll}; u++) {{\n        \
               i64 i = b + u * stride;\n        \
               if (i < g.n) {{ i64 o[{k}]; for (int k = 0; k < {k}; k++) o[k] = scalar[k] ? 0 : i; {dense_body} }}\n      \
             }}\n    \
           }}\n    \
           return;\n  \
         }}\n{strided_loop}}}\n"
    )
}

/// The declaration of a map kernel's single output parameter `out` of C type `t`.
fn out_param(t: &str) -> String {
    format!("{t}* __restrict__ out")
}

/// Whether the code generator has a kernel for `op` on `dtype` (else the op runs on the host).
pub fn unary_defined(op: UnaryOp, dtype: DType) -> bool {
    unary_snippet(op, class(dtype)).is_some()
}

/// Whether the code generator has a kernel for `op` on operands of `dtype`.
pub fn binary_defined(op: BinaryOp, dtype: DType) -> bool {
    binary_snippet(op, class(dtype)).is_some()
}

/// `op(x)` element-wise into a new dense array of `shape`. The output dtype is `bool` for the
/// predicates (`isnan`, `isinf`, `logical_not`), else the input's.
pub fn unary(op: UnaryOp, x: &CudaData, shape: &[usize]) -> Result<CudaData> {
    check_views(op.name(), &[(x, shape)])?;
    let dev = x.device();
    let d = x.dtype;
    let out_dtype = if op.returns_bool() { DType::Bool } else { d };
    let snippet = unary_snippet(op, class(d))
        .ok_or_else(|| dev.error(format!("{} is not defined for {d} (shape {shape:?})", op.name())))?;
    let out = CudaData::empty(dev, out_dtype, shape)?;
    let layout = Layout::new(op.name(), shape, &[&x.strides])?;
    if layout.n() == 0 {
        return Ok(out);
    }
    let name = format!("ct_unary_{}_{}", op.name(), codegen::tag(d));
    let k = dev.kernel(&name, &name, || unary_source(op, d, snippet, &name))?;
    // SAFETY: `k` was generated for these operand counts and dtypes, and `layout` was built from
    // the shapes and strides of these live views (`out` allocated for the shape just above).
    unsafe { launch_map(dev, k, &[out.ptr()], &[x.ptr()], layout) }?;
    Ok(out)
}

/// `op(a, b)` element-wise with numpy broadcasting of `a_shape` and `b_shape` to `out_shape`.
/// Both operands have the same dtype; the output is `bool` for comparisons and logical ops.
pub fn binary(
    op: BinaryOp,
    a: &CudaData,
    a_shape: &[usize],
    b: &CudaData,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<CudaData> {
    let dev = same_device(op.name(), &[a, b])?;
    check_views(op.name(), &[(a, a_shape), (b, b_shape)])?;
    let d = a.dtype;
    if b.dtype != d {
        return Err(dev.error(format!("{}: operands of dtypes {d} and {}", op.name(), b.dtype)));
    }
    let out_dtype = if op.returns_bool() { DType::Bool } else { d };
    let snippet = binary_snippet(op, class(d))
        .ok_or_else(|| dev.error(format!("{} is not defined for {d} (shapes {a_shape:?}, {b_shape:?})", op.name())))?;
    let out = CudaData::empty(dev, out_dtype, out_shape)?;
    let (sa, sb) =
        (broadcast_strides(a_shape, &a.strides, out_shape), broadcast_strides(b_shape, &b.strides, out_shape));
    let layout = Layout::new(op.name(), out_shape, &[&sa, &sb])?;
    if layout.n() == 0 {
        return Ok(out);
    }
    let name = format!("ct_binary_{}_{}", op.name(), codegen::tag(d));
    let k = dev.kernel(&name, &name, || binary_source(op, d, snippet, &name))?;
    // SAFETY: `k` was generated for these operand counts and dtypes, and `layout` was built from
    // the shapes and strides of these live views (`out` allocated for the shape just above).
    unsafe { launch_map(dev, k, &[out.ptr()], &[a.ptr(), b.ptr()], layout) }?;
    Ok(out)
}

/// `cond ? a : b` element-wise with broadcasting (`cond` is bool; `a` and `b` share a dtype,
/// copied bit for bit).
pub fn select(
    cond: (&CudaData, &[usize]),
    a: (&CudaData, &[usize]),
    b: (&CudaData, &[usize]),
    out_shape: &[usize],
) -> Result<CudaData> {
    let dev = same_device("select", &[cond.0, a.0, b.0])?;
    check_views("select", &[cond, a, b])?;
    let d = a.0.dtype;
    if b.0.dtype != d || cond.0.dtype != DType::Bool {
        return Err(dev.error(format!("select: dtypes {} / {} / {} (need bool, T, T)", cond.0.dtype, d, b.0.dtype)));
    }
    let out = CudaData::empty(dev, d, out_shape)?;
    let st = [cond, a, b].map(|(x, s)| broadcast_strides(s, &x.strides, out_shape));
    let layout = Layout::new("select", out_shape, &[&st[0], &st[1], &st[2]])?;
    if layout.n() == 0 {
        return Ok(out);
    }
    let bits = codegen::bits_type(d);
    let name = format!("ct_select_{bits}");
    let k = dev.kernel(&name, &name, || {
        map_source("", &name, &out_param(bits), &["u8", bits, bits], "out[i] = @0@ ? @1@ : @2@;")
    })?;
    // SAFETY: `k` was generated for these operand counts and dtypes, and `layout` was built from
    // the shapes and strides of these live views (`out` allocated for the shape just above).
    unsafe { launch_map(dev, k, &[out.ptr()], &[cond.0.ptr(), a.0.ptr(), b.0.ptr()], layout) }?;
    Ok(out)
}

/// Conversion to `to` with the CPU's `astype` semantics (see [`codegen::cast_expr`]).
pub fn cast(x: &CudaData, shape: &[usize], to: DType) -> Result<CudaData> {
    check_views("astype", &[(x, shape)])?;
    let dev = x.device();
    let from = x.dtype;
    if from == to {
        return to_contiguous(x, shape);
    }
    let out = CudaData::empty(dev, to, shape)?;
    let layout = Layout::new("astype", shape, &[&x.strides])?;
    if layout.n() == 0 {
        return Ok(out);
    }
    let name = format!("ct_cast_{}_{}", codegen::tag(from), codegen::tag(to));
    let k = dev.kernel(&name, &name, || cast_source(from, to, &name))?;
    // SAFETY: `k` was generated for these operand counts and dtypes, and `layout` was built from
    // the shapes and strides of these live views (`out` allocated for the shape just above).
    unsafe { launch_map(dev, k, &[out.ptr()], &[x.ptr()], layout) }?;
    Ok(out)
}

/// `x` (of `shape`) as a dense row-major array: the same data when already dense, else a copy
/// (the base of reshaping a strided view).
pub fn to_contiguous(x: &CudaData, shape: &[usize]) -> Result<CudaData> {
    check_views("copy", &[(x, shape)])?;
    if x.is_contiguous(shape) {
        return Ok(x.clone());
    }
    let out = CudaData::empty(x.device(), x.dtype, shape)?;
    copy_into(&out, x, shape)?;
    Ok(out)
}

/// Copy the view `src` into the view `dst` (both of `shape`, same dtype), element by element,
/// bit for bit. `dst` is written in place: it must be a buffer nothing else reads (a fresh
/// array being assembled, e.g. by concatenate or slice_update). Overlapping views are not
/// supported.
pub fn copy_into(dst: &CudaData, src: &CudaData, shape: &[usize]) -> Result<()> {
    check_views("copy", &[(dst, shape), (src, shape)])?;
    let dev = same_device("copy", &[dst, src])?;
    if dst.dtype != src.dtype {
        return Err(dev.error(format!("copy: {} into {}", src.dtype, dst.dtype)));
    }
    let layout = Layout::new("copy", shape, &[&dst.strides, &src.strides])?;
    if layout.n() == 0 {
        return Ok(());
    }
    let bits = codegen::bits_type(src.dtype);
    let name = format!("ct_copy_{bits}");
    let k = dev.kernel(&name, &name, || {
        // the destination is operand 0 of the layout; `out` is unused by the body
        map_source("", &name, &out_param(bits), &[bits, bits], &format!("(({bits}*)a0)[o[0]] = @1@;"))
    })?;
    // SAFETY: `k` was generated for these operand counts and dtypes, and `layout` was built from
    // the shapes and strides of these live views (`out` allocated for the shape just above).
    unsafe { launch_map(dev, k, &[0], &[dst.ptr(), src.ptr()], layout) }
}

fn unary_source(op: UnaryOp, d: DType, snippet: &str, name: &str) -> String {
    let out = if op.returns_bool() { DType::Bool } else { d };
    let header = format!(
        "{}typedef {} R;\n__device__ __forceinline__ R op(T x) {{ {snippet} }}\n",
        codegen::generic_header(d),
        codegen::compute(out)
    );
    let body = format!("out[i] = {};", codegen::store(out, &format!("op({})", codegen::load(d, "@0@"))));
    map_source(&header, name, &out_param(codegen::storage(out)), &[codegen::storage(d)], &body)
}

fn binary_source(op: BinaryOp, d: DType, snippet: &str, name: &str) -> String {
    let out = if op.returns_bool() { DType::Bool } else { d };
    let header = format!(
        "{}typedef {} R;\n__device__ __forceinline__ R op(T x, T y) {{ {snippet} }}\n",
        codegen::generic_header(d),
        codegen::compute(out)
    );
    let call = format!("op({}, {})", codegen::load(d, "@0@"), codegen::load(d, "@1@"));
    let body = format!("out[i] = {};", codegen::store(out, &call));
    let s = codegen::storage(d);
    map_source(&header, name, &out_param(codegen::storage(out)), &[s, s], &body)
}

fn cast_source(from: DType, to: DType, name: &str) -> String {
    let body = format!("out[i] = {};", codegen::cast_expr(from, to, &codegen::load(from, "@0@")));
    map_source(&codegen::saturating_casts(), name, &out_param(codegen::storage(to)), &[codegen::storage(from)], &body)
}

/// Every element-wise kernel source (each defined op × dtype, every cast), as `(name, source)`,
/// for compile checks where NVRTC exists.
#[doc(hidden)]
pub fn all_sources() -> Vec<(String, String)> {
    let mut v = Vec::new();
    for d in crate::dtype::ALL_DTYPES {
        for op in ALL_UNARY {
            if let Some(s) = unary_snippet(op, class(d)) {
                let name = format!("ct_unary_{}_{}", op.name(), codegen::tag(d));
                v.push((name.clone(), unary_source(op, d, s, &name)));
            }
        }
        for op in ALL_BINARY {
            if let Some(s) = binary_snippet(op, class(d)) {
                let name = format!("ct_binary_{}_{}", op.name(), codegen::tag(d));
                v.push((name.clone(), binary_source(op, d, s, &name)));
            }
        }
        for to in crate::dtype::ALL_DTYPES {
            let name = format!("ct_cast_{}_{}", codegen::tag(d), codegen::tag(to));
            v.push((name.clone(), cast_source(d, to, &name)));
        }
    }
    v
}

/// Every unary op (for tests and compile checks).
pub const ALL_UNARY: [UnaryOp; 30] = {
    use UnaryOp::*;
    [
        Neg, Abs, Sign, Exp, Expm1, Log, Log1p, Log2, Sqrt, Rsqrt, Square, Reciprocal, Sin, Cos, Tan, Tanh, Sinh, Cosh,
        Arcsin, Arccos, Arctan, Sigmoid, Erf, Erfinv, Floor, Ceil, Round, LogicalNot, IsNan, IsInf,
    ]
};

/// Every binary op (for tests and compile checks).
pub const ALL_BINARY: [BinaryOp; 21] = {
    use BinaryOp::*;
    [
        Add,
        Subtract,
        Multiply,
        Divide,
        FloorDivide,
        Remainder,
        Power,
        Maximum,
        Minimum,
        Arctan2,
        LogAddExp,
        Equal,
        NotEqual,
        Less,
        LessEqual,
        Greater,
        GreaterEqual,
        LogicalAnd,
        LogicalOr,
        MaximumShare,
        MinimumShare,
    ]
};
