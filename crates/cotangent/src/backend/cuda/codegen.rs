//! Kernel source generation: the prelude every kernel starts with, the dtype table (C storage
//! type, compute type, load and store expressions), the by-value layout struct and the
//! dimension-merging that fills it.
//!
//! f16 and bf16 are stored as `unsigned short` and converted by bit manipulation (no CUDA
//! header is included): the conversions are ports of the `half` crate's, so a value rounds to
//! the same bits on both devices (round to nearest even; f64→f16 goes through f32 as `half`
//! does on x86 with F16C; f64→bf16 is `half`'s direct conversion). Arithmetic on them happens
//! in f32, as on the CPU.
use super::{err, MAX_DIMS};
use crate::{DType, Result};
use smallvec::SmallVec;

/// Code every kernel source starts with.
pub const PRELUDE: &str = r#"
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
#define CT_NAN_F __uint_as_float(0x7fc00000u)
#define CT_INF_F __uint_as_float(0x7f800000u)
#define CT_NAN_D __longlong_as_double(0x7ff8000000000000LL)
#define CT_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define CT_LOOP(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

__device__ __forceinline__ float ct_f16_to_f32(u16 h) {
    u32 sign = (u32)(h & 0x8000u) << 16;
    u32 exp = (h >> 10) & 0x1fu;
    u32 man = h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0u) {
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}
__device__ __forceinline__ u16 ct_f32_to_f16(float f) {
    u32 x = __float_as_uint(f);
    u32 sign = x & 0x80000000u, exp = x & 0x7f800000u, man = x & 0x007fffffu;
    if (exp == 0x7f800000u) {
        u32 nan_bit = man == 0u ? 0u : 0x0200u;
        return (u16)((sign >> 16) | 0x7c00u | nan_bit | (man >> 13));
    }
    u32 half_sign = sign >> 16;
    int half_exp = (int)(exp >> 23) - 127 + 15;
    if (half_exp >= 0x1f) return (u16)(half_sign | 0x7c00u);
    if (half_exp <= 0) {
        if (14 - half_exp > 24) return (u16)half_sign;
        man |= 0x00800000u;
        u32 half_man = man >> (14 - half_exp);
        u32 round_bit = 1u << (13 - half_exp);
        if ((man & round_bit) != 0u && (man & (3u * round_bit - 1u)) != 0u) half_man += 1u;
        return (u16)(half_sign | half_man);
    }
    u32 he = (u32)half_exp << 10, half_man = man >> 13, round_bit = 0x1000u;
    if ((man & round_bit) != 0u && (man & (3u * round_bit - 1u)) != 0u) return (u16)((half_sign | he | half_man) + 1u);
    return (u16)(half_sign | he | half_man);
}
__device__ __forceinline__ float ct_bf16_to_f32(u16 h) { return __uint_as_float((u32)h << 16); }
__device__ __forceinline__ u16 ct_f32_to_bf16(float f) {
    u32 x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x0040u);
    u32 round_bit = 0x8000u;
    if ((x & round_bit) != 0u && (x & (3u * round_bit - 1u)) != 0u) return (u16)((x >> 16) + 1u);
    return (u16)(x >> 16);
}
__device__ __forceinline__ u16 ct_f64_to_f16(double d) { return ct_f32_to_f16((float)d); }
__device__ __forceinline__ u16 ct_f64_to_bf16(double d) {
    u64 val = (u64)__double_as_longlong(d);
    u32 x = (u32)(val >> 32);
    u32 sign = x & 0x80000000u, exp = x & 0x7ff00000u, man = x & 0x000fffffu;
    if (exp == 0x7ff00000u) {
        u32 nan_bit = (man == 0u && (u32)val == 0u) ? 0u : 0x0040u;
        return (u16)((sign >> 16) | 0x7f80u | nan_bit | (man >> 13));
    }
    u32 half_sign = sign >> 16;
    i64 half_exp = (i64)(exp >> 20) - 1023 + 127;
    if (half_exp >= 0xff) return (u16)(half_sign | 0x7f80u);
    if (half_exp <= 0) {
        if (7 - half_exp > 21) return (u16)half_sign;
        man |= 0x00100000u;
        u32 half_man = man >> (14 - half_exp);
        u32 round_bit = 1u << (13 - half_exp);
        if ((man & round_bit) != 0u && (man & (3u * round_bit - 1u)) != 0u) half_man += 1u;
        return (u16)(half_sign | half_man);
    }
    u32 he = (u32)half_exp << 7, half_man = man >> 13, round_bit = 0x1000u;
    if ((man & round_bit) != 0u && (man & (3u * round_bit - 1u)) != 0u) return (u16)((half_sign | he | half_man) + 1u);
    return (u16)(half_sign | he | half_man);
}

#define CT_MAX_DIMS 8
/* Shapes and strides (in elements) of K operands over a merged iteration space, by value. */
template <int K> struct ct_args {
    i64 n;
    i64 ndim;
    i64 contig;
    i64 shape[CT_MAX_DIMS];
    i64 st[K][CT_MAX_DIMS];
};
/* Offsets of element i (row-major over the shape) in each operand. The outermost axis needs no
   division; the others divide in 32 bits when the whole space fits (64-bit division is a long
   software sequence on GPUs and bounded the strided kernels at half the memory bandwidth). */
template <int K> __device__ __forceinline__ void ct_offsets(const ct_args<K>& a, i64 i, i64* o) {
    if (a.contig & 1) {
        for (int k = 0; k < K; k++) o[k] = (k < 62 && ((a.contig >> (k + 1)) & 1)) ? 0 : i;
        return;
    }
    for (int k = 0; k < K; k++) o[k] = 0;
    if (a.n <= 0xffffffffll) {
        u32 j = (u32)i;
        for (int d = (int)a.ndim - 1; d > 0; d--) {
            u32 s = (u32)a.shape[d];
            u32 q = j / s;
            u32 idx = j - q * s;
            j = q;
            for (int k = 0; k < K; k++) o[k] += (i64)idx * a.st[k][d];
        }
        for (int k = 0; k < K; k++) o[k] += (i64)j * a.st[k][0];
        return;
    }
    for (int d = (int)a.ndim - 1; d > 0; d--) {
        i64 s = a.shape[d];
        i64 q = i / s;
        i64 idx = i - q * s;
        i = q;
        for (int k = 0; k < K; k++) o[k] += idx * a.st[k][d];
    }
    for (int k = 0; k < K; k++) o[k] += i * a.st[k][0];
}
"#;

/// The by-value layout argument of a kernel over `K` operands (the C `ct_args<K>`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Args<const K: usize> {
    /// Number of elements of the iteration space.
    pub n: i64,
    /// Number of (merged) axes.
    pub ndim: i64,
    /// Bit 0: every operand is dense row-major over the whole space (offset = element number)
    /// or a broadcast scalar (offset 0); bit `k + 1`: operand `k` is such a scalar.
    pub contig: i64,
    /// Extents.
    pub shape: [i64; MAX_DIMS],
    /// Strides per operand.
    pub st: [[i64; MAX_DIMS]; K],
}

impl<const K: usize> Args<K> {
    /// The layout of `K` operands with strides `strides[k]` (in elements) over `shape` (see
    /// [`Layout::new`]).
    pub fn new(what: &str, shape: &[usize], strides: [&[isize]; K]) -> Result<Args<K>> {
        let l = Layout::new(what, shape, &strides)?;
        let mut a =
            Args { n: l.n(), ndim: l.words[1], contig: l.words[2], shape: [1; MAX_DIMS], st: [[0; MAX_DIMS]; K] };
        a.shape.copy_from_slice(&l.words[3..3 + MAX_DIMS]);
        for (k, st) in a.st.iter_mut().enumerate() {
            let at = 3 + MAX_DIMS * (k + 1);
            st.copy_from_slice(&l.words[at..at + MAX_DIMS]);
        }
        Ok(a)
    }
}

/// The by-value layout argument of a kernel over a number of operands known only at run time
/// (a fused group's inputs): the words of the C `ct_args<K>` in order — `n`, `ndim`,
/// `contig`, `shape[MAX_DIMS]`, then `st[k][MAX_DIMS]` per operand — as [`Args`] lays them out.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Inline for up to six operands: building a launch's layout allocates nothing.
    words: SmallVec<[i64; 59]>,
}

impl Layout {
    /// The layout of operands with strides `strides[k]` (in elements) over `shape`: axes of
    /// extent 1 are dropped and axes dense for every operand are merged; `Err` naming `what`
    /// when more than [`MAX_DIMS`] axes remain.
    pub fn new(what: &str, shape: &[usize], strides: &[&[isize]]) -> Result<Layout> {
        let k = strides.len();
        let mut dims: SmallVec<[usize; MAX_DIMS]> = SmallVec::new();
        let mut st: SmallVec<[SmallVec<[isize; 6]>; MAX_DIMS]> = SmallVec::new();
        for (ax, &d) in shape.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let s: SmallVec<[isize; 6]> = strides.iter().map(|x| x[ax]).collect();
            if let (Some(ld), Some(ls)) = (dims.last_mut(), st.last_mut()) {
                if (0..k).all(|j| ls[j] == s[j] * d as isize) {
                    *ld *= d;
                    *ls = s;
                    continue;
                }
            }
            dims.push(d);
            st.push(s);
        }
        if dims.len() > MAX_DIMS {
            return Err(err(format!(
                "{what}: {} axes remain after merging dense axes of shape {shape:?}; kernels take at most {MAX_DIMS}",
                dims.len()
            )));
        }
        let n: usize = shape.iter().product();
        // `contig` flags broadcast scalars in bits 1..=62: an operand past those that is a
        // broadcast scalar sends the launch down the strided path instead
        let flagged = k.min(62);
        let dense = dims.len() <= 1
            && st.iter().all(|s| s.iter().all(|&x| x == 1 || x == 0))
            && st.first().is_none_or(|s| s[flagged..].iter().all(|&x| x != 0));
        let scalars = st.first().map_or(0, |s| (0..flagged).filter(|&j| s[j] == 0).fold(0i64, |m, j| m | 2 << j));
        let contig = if dense { 1 | scalars } else { 0 };
        let mut words: SmallVec<[i64; 59]> = smallvec::smallvec![0i64; 3 + MAX_DIMS * (k + 1)];
        words[..3].copy_from_slice(&[n as i64, dims.len() as i64, contig]);
        words[3..3 + MAX_DIMS].fill(1);
        for (d, (&e, s)) in dims.iter().zip(&st).enumerate() {
            words[3 + d] = e as i64;
            for (j, &v) in s.iter().enumerate() {
                words[3 + MAX_DIMS * (j + 1) + d] = v as i64;
            }
        }
        Ok(Layout { words })
    }

    /// Number of elements of the iteration space.
    pub fn n(&self) -> i64 {
        self.words[0]
    }

    /// Whether every operand is dense over the whole space or a broadcast scalar.
    pub fn dense(&self) -> bool {
        self.words[2] & 1 != 0
    }

    /// A pointer to the words, as a kernel launch takes a by-value struct argument.
    pub fn as_param(&mut self) -> *mut std::ffi::c_void {
        self.words.as_mut_ptr() as *mut std::ffi::c_void
    }
}

/// The C type an element of `d` is stored as.
pub fn storage(d: DType) -> &'static str {
    match d {
        DType::Bool | DType::U8 => "u8",
        DType::U32 => "u32",
        DType::I32 => "int",
        DType::I64 => "i64",
        DType::F16 | DType::BF16 => "u16",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// The C type arithmetic on `d` happens in (f16/bf16 compute in f32, as on the CPU).
pub fn compute(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::F16 | DType::BF16 | DType::F32 => "float",
        other => storage(other),
    }
}

/// The unsigned type wrapping integer arithmetic of `d` is done in.
pub fn unsigned(d: DType) -> &'static str {
    match d {
        DType::I64 | DType::F64 => "u64",
        _ => "u32",
    }
}

/// A stored element `v` of `d` as its compute type.
pub fn load(d: DType, v: &str) -> String {
    match d {
        DType::Bool => format!("({v} != 0)"),
        DType::F16 => format!("ct_f16_to_f32({v})"),
        DType::BF16 => format!("ct_bf16_to_f32({v})"),
        _ => v.to_string(),
    }
}

/// A compute-type value `v` as the stored element of `d` (f16/bf16 round to nearest even).
pub fn store(d: DType, v: &str) -> String {
    match d {
        DType::Bool => format!("(u8)(({v}) ? 1 : 0)"),
        DType::F16 => format!("ct_f32_to_f16({v})"),
        DType::BF16 => format!("ct_f32_to_bf16({v})"),
        other => format!("({})({v})", storage(other)),
    }
}

/// `typedef`s and macros for code generic over a compute type: `T` (the compute type of `d`),
/// `U` (its unsigned type for wrapping), `IS_SIGNED`, `F(name)` (the float or double variant of
/// a math function), `CT_NAN`, `CT_INF`.
pub fn generic_header(d: DType) -> String {
    let f32ish = matches!(d, DType::F16 | DType::BF16 | DType::F32);
    format!(
        "typedef {t} T;\ntypedef {u} U;\n#define IS_SIGNED {s}\n#define F(name) {f}\n#define CT_NAN {nan}\n#define CT_INF {inf}\n",
        t = compute(d),
        u = unsigned(d),
        s = d.is_signed_int() as u8,
        f = if f32ish { "name##f" } else { "name" },
        nan = if f32ish { "CT_NAN_F" } else { "CT_NAN_D" },
        inf = if f32ish { "CT_INF_F" } else { "CT_INF_D" },
    )
}

/// Saturating conversion helpers from `double` to each integer type (Rust's `as` semantics:
/// NaN → 0, out of range → the nearest bound), generated from one table.
pub fn saturating_casts() -> String {
    let table = [
        ("u8", "0.0", "255.0", "0", "255"),
        ("u32", "0.0", "4294967295.0", "0u", "4294967295u"),
        ("int", "-2147483648.0", "2147483647.0", "(-2147483647 - 1)", "2147483647"),
        (
            "i64",
            "-9223372036854775808.0",
            "9223372036854775807.0",
            "(-9223372036854775807LL - 1)",
            "9223372036854775807LL",
        ),
    ];
    table
        .iter()
        .map(|(t, lo, hi, tlo, thi)| {
            format!(
                "__device__ __forceinline__ {t} ct_sat_{t}(double v) {{ if (v != v) return 0; if (v <= {lo}) return {tlo}; if (v >= {hi}) return {thi}; return ({t})v; }}\n"
            )
        })
        .collect()
}

/// A C expression converting `x` (a value of `from`'s compute type) to `to`'s stored element,
/// with the CPU's `astype` semantics: to bool is `x != 0`; when either side is a float the value
/// goes through `f64` (as `Element::from_f64(x.to_f64())`, so i64 → f32 rounds twice exactly
/// like the CPU); integer to integer wraps (`as`).
pub fn cast_expr(from: DType, to: DType, x: &str) -> String {
    if to == DType::Bool {
        return format!("(u8)(({x}) != 0 ? 1 : 0)");
    }
    if from.is_float() || to.is_float() {
        let d = format!("(double)({x})");
        return match to {
            DType::F64 => d,
            DType::F32 => format!("(float){d}"),
            DType::F16 => format!("ct_f64_to_f16({d})"),
            DType::BF16 => format!("ct_f64_to_bf16({d})"),
            DType::Bool => unreachable!("handled above"),
            int => format!("ct_sat_{}({d})", storage(int)),
        };
    }
    format!("({})(i64)({x})", storage(to))
}

/// Storage type of the same size as `d`, for bit-exact copies.
pub fn bits_type(d: DType) -> &'static str {
    match d.size_of() {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        _ => "u64",
    }
}

/// Short lower-case name of a dtype for kernel keys and names.
pub fn tag(d: DType) -> &'static str {
    match d {
        DType::Bool => "b1",
        DType::U8 => "u8",
        DType::U32 => "u32",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

#[cfg(test)]
mod tests {
    use super::Layout;

    fn dense(shape: &[usize], strides: &[&[isize]]) -> bool {
        Layout::new("test", shape, strides).unwrap().dense()
    }

    /// Which launches take the dense path (whose kernels read operand `k` at the element number,
    /// or at 0 for a flagged scalar): one merged axis of dense operands and scalars. Anything
    /// else — a repeated row (a bias over a batch), a transposed operand, a sliced row, a scalar
    /// past the 62 flagged operands — must take the strided path.
    #[test]
    fn dense_layouts() {
        // x * 1.01 over [8, 16] merges into one axis; axes of extent 1 are dropped
        assert!(dense(&[8, 16], &[&[16, 1], &[0, 0]]));
        assert!(dense(&[4, 1, 3], &[&[3, 3, 1], &[0, 0, 0]]));
        // h + bias: [4096, 512] + [512]
        assert!(!dense(&[4096, 512], &[&[512, 1], &[0, 1]]));
        // a transposed operand, a row of stride 2, a sliced row
        assert!(!dense(&[4, 3], &[&[3, 1], &[1, 4]]));
        assert!(!dense(&[4, 3], &[&[3, 1], &[0, 2]]));
        assert!(!dense(&[4, 3], &[&[4, 1], &[3, 1]]));
        // a scalar as operand 61 is flagged (bit 62); as operand 62 there is no bit left for it
        let mut ops: Vec<&[isize]> = vec![&[1]; 61];
        assert!(dense(&[5], &[&ops[..], &[&[0]]].concat()));
        ops.push(&[1]);
        assert!(!dense(&[5], &[&ops[..], &[&[0]]].concat()));
    }
}
