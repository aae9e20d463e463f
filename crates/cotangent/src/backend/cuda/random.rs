//! Counter-based random numbers on the device: the CPU's Threefry-2x32 (20 rounds) stream layout
//! and samplers (`backend/cpu/random.rs`, `primitives/random.rs`), so a key gives the same bits
//! on both devices. Bits, uniforms, integers, splits and fold-ins are bit-identical to the CPU;
//! normals, truncated normals and Gumbel samples go through `log`/`erf`, whose last bit may
//! differ between CUDA's libdevice and the host's libm.
use super::codegen::{self, PRELUDE};
use super::elementwise::to_contiguous;
use super::storage::check_views;
use super::storage::CudaData;
use crate::primitives::random::Dist;
use crate::shape::numel;
use crate::{DType, Result};
use std::ffi::c_void;

const BLOCK: u32 = 256;

/// Scalar parameters of a sampler, by value (the C `ct_rand`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Params {
    n: i64,
    total: i64,
    lo: f64,
    hi: f64,
    a: f64,
    b: f64,
    ilo: i64,
    span: u64,
    fold: u32,
    _pad: u32,
}

const THREEFRY: &str = r#"
struct ct_rand { i64 n; i64 total; double lo, hi, a, b; i64 ilo; u64 span; u32 fold; u32 pad; };
__device__ __forceinline__ u32 ct_rotl(u32 x, u32 r) { return (x << r) | (x >> (32u - r)); }
__device__ __forceinline__ void ct_threefry(u32 k0, u32 k1, u32 c0, u32 c1, u32* o0, u32* o1) {
    const u32 R[8] = {13u, 15u, 26u, 6u, 17u, 29u, 16u, 24u};
    u32 ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
    u32 x0 = c0 + ks[0], x1 = c1 + ks[1];
#pragma unroll
    for (int r = 0; r < 20; r++) {
        x0 += x1; x1 = ct_rotl(x1, R[r % 8]); x1 ^= x0;
        if (r % 4 == 3) { int s = r / 4 + 1; x0 += ks[s % 3]; x1 += ks[(s + 1) % 3] + (u32)s; }
    }
    *o0 = x0; *o1 = x1;
}
__device__ __forceinline__ u32 ct_bits32(u32 k0, u32 k1, u64 i) { u32 a, b; ct_threefry(k0, k1, (u32)(i >> 32), (u32)i, &a, &b); return a ^ b; }
__device__ __forceinline__ u64 ct_bits64(u32 k0, u32 k1, u64 i) { u32 a, b; ct_threefry(k0, k1, (u32)(i >> 32), (u32)i, &a, &b); return ((u64)a << 32) | (u64)b; }
__device__ __forceinline__ double ct_unit_f32(u32 k0, u32 k1, u64 i) { return (double)(__uint_as_float((ct_bits32(k0, k1, i) >> 9) | 0x3F800000u) - 1.0f); }
__device__ __forceinline__ double ct_unit_f64(u32 k0, u32 k1, u64 i) { return __longlong_as_double((i64)((ct_bits64(k0, k1, i) >> 12) | 0x3FF0000000000000ULL)) - 1.0; }
__device__ double ct_erfinv_fast(double y) {
    if (y <= -1.0) return -CT_INF_D;
    if (y >= 1.0) return CT_INF_D;
    double w = -log((1.0 - y) * (1.0 + y));
    double p;
    if (w < 5.0) {
        w = w - 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w; p = -4.39150654e-06 + p * w; p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w; p = -0.00417768164 + p * w; p = 0.246640727 + p * w; p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w; p = 0.00134934322 + p * w; p = -0.00367342844 + p * w; p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w; p = 0.00943887047 + p * w; p = 1.00167406 + p * w; p = 2.83297682 + p * w;
    }
    return p * y;
}
__device__ double ct_erfinv(double y) {
    if (y != y || y < -1.0 || y > 1.0) return CT_NAN_D;
    if (y == 1.0) return CT_INF_D;
    if (y == -1.0) return -CT_INF_D;
    double x = ct_erfinv_fast(y);
    for (int k = 0; k < 3; k++) { double e = erf(x) - y; x -= e / (FRAC_2_SQRT_PI * exp(-x * x)); }
    return x;
}
"#;

/// Draw a sample of `shape` and `dtype` from `dist` for every key of `keys` (u32, shape
/// `[kb..., 2]`): the result has shape `[kb..., shape...]`, one independent sample per key, as
/// the CPU's `RandomSample`. `Permutation` is not supported on CUDA (`Err`).
pub fn random(dist: Dist, keys: &CudaData, keys_shape: &[usize], shape: &[usize], dtype: DType) -> Result<CudaData> {
    check_views("random", &[(keys, keys_shape)])?;
    let dev = keys.device();
    if keys.dtype != DType::U32 || keys_shape.last() != Some(&2) {
        return Err(dev.error(format!("random: key must be u32 [..., 2], got {keys_shape:?} {}", keys.dtype)));
    }
    let keys = to_contiguous(keys, keys_shape)?;
    let nkeys = numel(keys_shape) / 2;
    let n = numel(shape);
    let mut out_shape: Vec<usize> = keys_shape[..keys_shape.len() - 1].to_vec();
    out_shape.extend_from_slice(shape);
    let bad = || dev.error(format!("random: {dist:?} cannot produce {dtype}"));
    let wide = dtype == DType::F64;
    let mut p = Params { n: n as i64, total: (n * nkeys) as i64, ..Params::default() };
    let unit = if wide { "ct_unit_f64(k0, k1, i)" } else { "ct_unit_f32(k0, k1, i)" };
    let erfinv = if wide { "ct_erfinv" } else { "ct_erfinv_fast" };
    let (kind, expr): (&str, String) = match dist {
        Dist::Bits => ("bits", "ct_bits32(k0, k1, i)".into()),
        Dist::Split(_) => ("split", "ct_pick(k0, k1, i / 2, (int)(i % 2))".into()),
        Dist::FoldIn(d) => {
            p.fold = d;
            ("foldin", "ct_pick(k0, k1, (u64)p.fold, (int)i)".into())
        }
        Dist::Randint { lo, hi } => {
            if !dtype.is_int() {
                return Err(bad());
            }
            p.ilo = lo;
            p.span = (hi as i128 - lo as i128).max(1) as u64;
            ("randint", format!("({})(i64)((u64)p.ilo + ct_bits64(k0, k1, i) % p.span)", codegen::storage(dtype)))
        }
        Dist::Uniform { lo, hi } => {
            if !dtype.is_float() {
                return Err(bad());
            }
            (p.lo, p.hi) = (lo, hi);
            ("uniform", format!("ct_in_range(p.lo + (p.hi - p.lo) * {unit}, p.lo, p.hi)"))
        }
        Dist::Normal => {
            if !dtype.is_float() {
                return Err(bad());
            }
            p.lo = -1.0 + if wide { f64::EPSILON / 2.0 } else { f32::EPSILON as f64 / 2.0 };
            ("normal", format!("FROM_F64(SQRT_2 * {erfinv}(p.lo + (1.0 - p.lo) * {unit}))"))
        }
        Dist::TruncatedNormal { lo, hi } => {
            if !dtype.is_float() {
                return Err(bad());
            }
            let s2 = std::f64::consts::SQRT_2;
            (p.lo, p.hi) = (lo, hi);
            (p.a, p.b) = (crate::backend::cpu::math::erf(lo / s2), crate::backend::cpu::math::erf(hi / s2));
            ("truncnormal", format!("ct_clamp(SQRT_2 * {erfinv}(p.a + (p.b - p.a) * {unit}), p.lo, p.hi)"))
        }
        Dist::Gumbel => {
            if !dtype.is_float() {
                return Err(bad());
            }
            p.lo = if wide { f64::MIN_POSITIVE } else { f32::MIN_POSITIVE as f64 };
            ("gumbel", format!("FROM_F64(-log(-log(fmax({unit}, p.lo))))"))
        }
        Dist::Permutation(_) => return Err(dev.error("random permutation is not supported on CUDA (needs a sort)")),
    };
    if matches!(dist, Dist::Bits | Dist::Split(_) | Dist::FoldIn(_)) && dtype != DType::U32 {
        return Err(bad());
    }
    let out = CudaData::empty(dev, dtype, &out_shape)?;
    if n * nkeys == 0 {
        return Ok(out);
    }
    let st = codegen::storage(dtype);
    let name = format!("ct_random_{kind}_{}", codegen::tag(dtype));
    let k = dev.kernel(&name, &name, || {
        let from = codegen::cast_expr(DType::F64, dtype, "v");
        let to = format!("(double)({})", codegen::load(dtype, "t"));
        format!(
            r#"{PRELUDE}
#define FRAC_2_SQRT_PI {frac:?}
#define SQRT_2 {sqrt2:?}
{THREEFRY}
{sat}
__device__ __forceinline__ {st} FROM_F64(double v) {{ return {from}; }}
__device__ __forceinline__ double TO_F64({st} t) {{ return {to}; }}
__device__ __forceinline__ {st} ct_in_range(double v, double lo, double hi) {{
    {st} t = FROM_F64(fmax(v, lo));
    if (TO_F64(t) >= hi && hi > lo) {{
        {st} x = FROM_F64(hi);
        double step = (hi - lo) * 1e-9;
        while (TO_F64(x) >= hi) {{ x = FROM_F64(hi - step); step *= 2.0; }}
        return x;
    }}
    return t;
}}
__device__ __forceinline__ {st} ct_clamp(double z, double lo, double hi) {{ return FROM_F64(z < lo ? lo : (z > hi ? hi : z)); }}
__device__ __forceinline__ u32 ct_pick(u32 k0, u32 k1, u64 c, int w) {{ u32 a, b; ct_threefry(k0, k1, (u32)(c >> 32), (u32)c, &a, &b); return w ? b : a; }}
extern "C" __global__ void {name}({st}* __restrict__ out, const u32* __restrict__ keys, ct_rand p) {{
    CT_LOOP(e, p.total) {{
        i64 kb = e / p.n;
        u64 i = (u64)(e - kb * p.n);
        u32 k0 = keys[2 * kb], k1 = keys[2 * kb + 1];
        out[e] = {expr};
    }}
}}
"#,
            frac = std::f64::consts::FRAC_2_SQRT_PI,
            sqrt2 = std::f64::consts::SQRT_2,
            sat = codegen::saturating_casts(),
        )
    })?;
    let (mut po, mut pk, mut pp) = (out.ptr(), keys.ptr(), p);
    let mut params: Vec<*mut c_void> = vec![
        &mut po as *mut u64 as *mut c_void,
        &mut pk as *mut u64 as *mut c_void,
        &mut pp as *mut Params as *mut c_void,
    ];
    // SAFETY: the random kernel takes (out, keys, Params); `out` holds `n * nkeys` elements
    // and `keys` `nkeys` keys, both live here.
    unsafe { dev.launch(k, dev.grid_for((n * nkeys) as u64, BLOCK), BLOCK, 0, &mut params) }?;
    Ok(out)
}
