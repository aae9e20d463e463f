//! Vectorised single-precision transcendental kernels: `exp`, `expm1`, `ln`, `ln_1p`, `tanh`
//! and `sigmoid` over `f32` slices, written as branch-free scalar code that LLVM vectorises, with
//! runtime CPU dispatch (AVX-512F, AVX2 + FMA, portable).
//!
//! # Algorithms
//!
//! Every function takes an `f32`, widens it to `f64` (exact), evaluates in `f64` with an error
//! far below one `f32` ulp (relative error below about 1e-13), and rounds once to `f32`. So the
//! result is the correctly rounded one except when the exact value lies within ~1e-13 relative
//! of a rounding boundary (none was found in the tests, which sample a million inputs per
//! function and all hard regions); in particular the kernels agree with glibc's correctly
//! rounded `expf`/`logf`. Evaluating the reduced argument in `f64` also removes every
//! overflow/underflow case from the inner computation: results outside the `f32` range, and
//! `f32` subnormal results, come out of the final `f64 → f32` rounding (IEEE: overflow to ±inf,
//! gradual underflow to subnormals and 0). `f32` subnormal inputs are normal `f64` numbers.
//!
//! - `exp`, `expm1`: `x = n·ln2 + r`, `n = round(x/ln2)` (by adding and subtracting 1.5·2^52),
//!   `r` by a Cody–Waite two-constant reduction (`ln2_hi` has 32 significant bits, so `n·ln2_hi`
//!   is exact), `|r| ≤ ln2/2`. `expm1(r) = r + r²·P(r)` with the Taylor polynomial `P` up to
//!   `r^11/11!` (truncation below 2e-14 relative), evaluated by Horner's rule. `2^n` is built
//!   from its exponent bits. `exp(x) = 2^n + 2^n·expm1(r)` and
//!   `expm1(x) = 2^n·expm1(r) + (2^n − 1)`; for `n = 0` the latter is `expm1(r)` with `r = x`
//!   exactly, so tiny arguments keep full relative accuracy. Arguments are clamped to ±120
//!   first (the results are already ±inf / 0 / −1 in `f32` there).
//! - `ln`, `ln_1p`: `u = m·2^k` with `m ∈ [√½, √2)` from the bit pattern of `u` (exponent field
//!   → `k`, converted to a float through the 2^52 bit trick); `f = m − 1` (exact),
//!   `s = f/(2+f)`, `ln(1+f) = 2s + 2s·(s²/3 + s⁴/5 + … + s¹⁶/17)` (`|s| ≤ 0.1716`, truncation
//!   below 4e-14 relative), `ln(u) = k·ln2 + ln(1+f)`. `ln` uses `u = x`; `ln_1p` uses
//!   `u = 1 + x` (in `f64`) and, when `k = 0`, `f = x` itself, so that `ln_1p` of tiny `x` is
//!   exact to the last bit of `x`.
//! - `tanh(x) = sign(x)·e/(e + 2)` with `e = expm1(2|x|)` (`|x|` clamped to 10, where `tanh`
//!   already rounds to ±1), which has no cancellation anywhere.
//! - `sigmoid(x) = 1/(1 + exp(−x))`, which has no cancellation in `f64` for any `x`.
//!
//! Special values follow the standard library: `exp(±inf) = inf/0`, `expm1(−inf) = −1`,
//! `expm1(±0) = ±0`, `ln(±0) = −inf`, `ln(x<0) = NaN`, `ln(inf) = inf`, `ln_1p(−1) = −inf`,
//! `ln_1p(x<−1) = NaN`, `ln_1p(±0) = ±0`, `tanh(±0) = ±0`, `tanh(±inf) = ±1`,
//! `sigmoid(±inf) = 1/0`, NaN in → NaN out. These are applied with selects, never branches.
//!
//! # Measured error (`tests/vmath.rs`)
//!
//! Against the `f64` standard library on every 4097th `f32` bit pattern (1,048,321 inputs) plus
//! ~600,000 dense samples near zero (subnormals included), ±1 and the overflow/underflow
//! thresholds, for each of the AVX-512, AVX2 and portable variants: the largest error of every
//! function is 0.500 ulp, i.e. every sampled result is the correctly rounded one (the tests
//! assert the contract, ≤ 2 ulp for `exp`/`expm1`/`ln`/`ln_1p` and ≤ 3 ulp for
//! `tanh`/`sigmoid`, counting subnormal results in units of the smallest subnormal).
//!
//! # Speed
//!
//! Single thread, ns per element on an AMD EPYC (AVX-512), 1M elements: exp 0.37 (glibc
//! `expf` loop 1.80), expm1 0.43 (6.56), ln 0.77 (1.79), ln_1p 0.62 (5.10), tanh 0.57 (8.53),
//! sigmoid 0.47 (2.36); the AVX2 variant takes about 1.8× the AVX-512 time. The portable
//! variant (SSE2, no FMA; only for x86 CPUs without AVX2, and non-x86) takes 2.2–2.9 ns: up to
//! 1.5× slower than glibc for exp/ln, 2–3× faster for expm1/ln_1p/tanh
//! (`bench/src/bin/vmath.rs`).
//!
//! # Dispatch
//!
//! One generic `#[inline(always)]` body per function (trait `Kernel`) and one generic slice loop
//! are instantiated three times: inside an `#[target_feature(enable = "avx512f")]` function,
//! an `"avx2,fma"` one (both with `f64::mul_add`, compiled to FMA instructions there) and a
//! portable one (separate multiply and add, except on aarch64 where FMA is baseline). The
//! instruction set is detected once and cached in an atomic.
use std::sync::atomic::{AtomicU8, Ordering};

/// The functions with vectorised kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    /// `e^x`.
    Exp,
    /// `e^x − 1`.
    Expm1,
    /// Natural logarithm.
    Ln,
    /// `ln(1 + x)`.
    Ln1p,
    /// Hyperbolic tangent.
    Tanh,
    /// Logistic function `1/(1 + e^−x)`.
    Sigmoid,
}

impl Func {
    /// All functions.
    pub const ALL: [Func; 6] = [Func::Exp, Func::Expm1, Func::Ln, Func::Ln1p, Func::Tanh, Func::Sigmoid];
}

/// The instruction set variants of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// AVX-512F (512-bit vectors, FMA).
    Avx512,
    /// AVX2 with FMA (256-bit vectors).
    Avx2,
    /// Baseline code for the target (SSE2 on x86-64).
    Portable,
}

impl Isa {
    /// Whether this CPU can run the variant.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The variants this CPU can run, best first.
    pub fn available() -> Vec<Isa> {
        [Isa::Avx512, Isa::Avx2, Isa::Portable].into_iter().filter(|i| i.is_available()).collect()
    }

    /// The best variant for this CPU (detected once, then cached).
    pub fn detected() -> Isa {
        static CACHE: AtomicU8 = AtomicU8::new(0);
        match CACHE.load(Ordering::Relaxed) {
            1 => Isa::Avx512,
            2 => Isa::Avx2,
            3 => Isa::Portable,
            _ => {
                let isa = Isa::available()[0];
                CACHE.store(
                    match isa {
                        Isa::Avx512 => 1,
                        Isa::Avx2 => 2,
                        Isa::Portable => 3,
                    },
                    Ordering::Relaxed,
                );
                isa
            }
        }
    }
}

// ----- multiply-add flavours ------------------------------------------------------------------

/// How `a·b + c` is computed: fused where the instruction set has FMA, else multiply then add
/// (`f64::mul_add` without hardware FMA is a slow libm call).
trait MulAdd {
    fn madd(a: f64, b: f64, c: f64) -> f64;
}

/// Fused multiply-add (one rounding).
struct Fused;
/// Separate multiply and add.
#[cfg_attr(target_arch = "aarch64", allow(dead_code))]
struct Separate;

impl MulAdd for Fused {
    #[inline(always)]
    fn madd(a: f64, b: f64, c: f64) -> f64 {
        a.mul_add(b, c)
    }
}

impl MulAdd for Separate {
    #[inline(always)]
    fn madd(a: f64, b: f64, c: f64) -> f64 {
        a * b + c
    }
}

#[cfg(target_arch = "aarch64")]
type PortableMulAdd = Fused;
#[cfg(not(target_arch = "aarch64"))]
type PortableMulAdd = Separate;

// ----- the shared bodies ----------------------------------------------------------------------

/// Select without a branch (compiles to a blend / masked move when vectorised).
#[inline(always)]
fn sel(c: bool, a: f64, b: f64) -> f64 {
    if c {
        a
    } else {
        b
    }
}

/// Select on `f32`.
#[inline(always)]
fn self32(c: bool, a: f32, b: f32) -> f32 {
    if c {
        a
    } else {
        b
    }
}

/// `1.5·2^52`: adding and subtracting it rounds an `f64` of magnitude below 2^51 to an integer.
const ROUND_MAGIC: f64 = 6755399441055744.0;
const LOG2E: f64 = std::f64::consts::LOG2_E;
/// `ln 2` split for Cody–Waite reduction: `LN2_HI` has 32 significant bits.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = std::f64::consts::LN_2 - LN2_HI;

/// `(2^n, expm1(r))` with `x = n·ln2 + r`, `|r| ≤ ln2/2`, for `x` in [−120, 120] (or NaN).
#[inline(always)]
fn exp_reduced<M: MulAdd>(x: f64) -> (f64, f64) {
    let k = M::madd(x, LOG2E, ROUND_MAGIC);
    let n = k - ROUND_MAGIC;
    // the low bits of `k` hold n (two's complement); 2^n from its biased exponent
    let ni = k.to_bits().wrapping_sub(ROUND_MAGIC.to_bits());
    let scale = f64::from_bits(ni.wrapping_add(1023) << 52);
    let r = M::madd(-n, LN2_HI, x);
    let r = M::madd(-n, LN2_LO, r);
    // expm1(r) = r + r²·(1/2! + r/3! + … + r^9/11!)
    const C: [f64; 10] = [
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
        1.0 / 40320.0,
        1.0 / 362880.0,
        1.0 / 3628800.0,
        1.0 / 39916800.0,
    ];
    let mut p = C[9];
    for &c in C[..9].iter().rev() {
        p = M::madd(p, r, c);
    }
    (scale, M::madd(r * r, p, r))
}

/// `x` clamped to `[lo, hi]`, NaN kept.
#[inline(always)]
fn clamp(x: f64, lo: f64, hi: f64) -> f64 {
    let x = sel(x < lo, lo, x);
    sel(x > hi, hi, x)
}

#[inline(always)]
fn exp64<M: MulAdd>(x: f64) -> f64 {
    let (s, em) = exp_reduced::<M>(clamp(x, -120.0, 120.0));
    M::madd(s, em, s)
}

#[inline(always)]
fn expm1_64<M: MulAdd>(x: f64) -> f64 {
    let (s, em) = exp_reduced::<M>(clamp(x, -120.0, 120.0));
    M::madd(s, em, s - 1.0)
}

/// `(k, f)` with `u = 2^k·(1 + f)`, `1 + f ∈ [√½, √2)`, for positive normal `u`.
#[inline(always)]
fn log_split(u: f64) -> (f64, f64) {
    const SQRT_HALF_BITS: u64 = 0x3fe6_a09e_667f_3bcd;
    let ix = u.to_bits().wrapping_add(0x3ff0_0000_0000_0000 - SQRT_HALF_BITS);
    // biased exponent of ix as a float: put it in the mantissa of 2^52
    let k = f64::from_bits((ix >> 52) | 0x4330_0000_0000_0000) - (4503599627370496.0 + 1023.0);
    let m = f64::from_bits((ix & 0x000f_ffff_ffff_ffff).wrapping_add(SQRT_HALF_BITS));
    (k, m - 1.0)
}

/// `k·ln2 + ln(1 + f)` for `1 + f ∈ [√½, √2)` (or `f` below `√2 − 1` in magnitude).
#[inline(always)]
fn log_combine<M: MulAdd>(k: f64, f: f64) -> f64 {
    let s = f / (2.0 + f);
    let z = s * s;
    const C: [f64; 8] = [1.0 / 3.0, 1.0 / 5.0, 1.0 / 7.0, 1.0 / 9.0, 1.0 / 11.0, 1.0 / 13.0, 1.0 / 15.0, 1.0 / 17.0];
    let mut p = C[7];
    for &c in C[..7].iter().rev() {
        p = M::madd(p, z, c);
    }
    let s2 = s + s;
    let l = M::madd(s2, z * p, s2);
    M::madd(k, std::f64::consts::LN_2, l)
}

/// One function's scalar body, generic over the multiply-add flavour. Must inline into the slice
/// loops and contain no branches, so that LLVM vectorises the loops.
trait Kernel {
    fn eval<M: MulAdd>(x: f32) -> f32;
}

struct KExp;
struct KExpm1;
struct KLn;
struct KLn1p;
struct KTanh;
struct KSigmoid;

impl Kernel for KExp {
    #[inline(always)]
    fn eval<M: MulAdd>(x: f32) -> f32 {
        exp64::<M>(x as f64) as f32
    }
}

impl Kernel for KExpm1 {
    #[inline(always)]
    fn eval<M: MulAdd>(x: f32) -> f32 {
        // keeps the sign of ±0
        self32(x == 0.0, x, expm1_64::<M>(x as f64) as f32)
    }
}

impl Kernel for KLn {
    #[inline(always)]
    fn eval<M: MulAdd>(x: f32) -> f32 {
        let (k, f) = log_split(x as f64);
        let r = log_combine::<M>(k, f) as f32;
        let r = self32(x == f32::INFINITY, x, r);
        let r = self32(x == 0.0, f32::NEG_INFINITY, r);
        self32(x >= 0.0, r, f32::NAN)
    }
}

impl Kernel for KLn1p {
    #[inline(always)]
    fn eval<M: MulAdd>(x: f32) -> f32 {
        let xd = x as f64;
        let (k, f) = log_split(1.0 + xd);
        // for k = 0, 1 + f = 1 + x exactly
        let f = sel(k == 0.0, xd, f);
        let r = log_combine::<M>(k, f) as f32;
        let r = self32(x == f32::INFINITY || x == 0.0, x, r);
        let r = self32(x == -1.0, f32::NEG_INFINITY, r);
        self32(x >= -1.0, r, f32::NAN)
    }
}

impl Kernel for KTanh {
    #[inline(always)]
    fn eval<M: MulAdd>(x: f32) -> f32 {
        let a = clamp((x as f64).abs(), 0.0, 10.0);
        let e = expm1_64::<M>(a + a);
        let t = (e / (e + 2.0)) as f32;
        // the sign of x (also for ±0); NaN stays NaN
        f32::from_bits(t.to_bits() | (x.to_bits() & 0x8000_0000))
    }
}

impl Kernel for KSigmoid {
    #[inline(always)]
    fn eval<M: MulAdd>(x: f32) -> f32 {
        (1.0 / (1.0 + exp64::<M>(-(x as f64)))) as f32
    }
}

// ----- slice loops and their instruction-set variants ------------------------------------------

#[inline(always)]
fn map_generic<K: Kernel, M: MulAdd>(src: &[f32], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = K::eval::<M>(s);
    }
}

#[inline(always)]
fn map_in_place_generic<K: Kernel, M: MulAdd>(v: &mut [f32]) {
    for x in v.iter_mut() {
        *x = K::eval::<M>(*x);
    }
}

/// `(src → dst, in place)` instantiations of the loops for one instruction set.
macro_rules! variant {
    ($name:ident, $name_in_place:ident, $madd:ty $(, $feature:literal)?) => {
        /// `dst[i] = K(src[i])` compiled for this variant's instruction set.
        ///
        /// # Safety
        /// The CPU must support every target feature the variant enables (none for the portable
        /// one), or the call may execute instructions it lacks. The slices are safe references;
        /// nothing else is required.
        $(#[target_feature(enable = $feature)])?
        #[allow(unused_unsafe)]
        unsafe fn $name<K: Kernel>(src: &[f32], dst: &mut [f32]) {
            map_generic::<K, $madd>(src, dst)
        }
        /// `v[i] = K(v[i])` compiled for this variant's instruction set.
        ///
        /// # Safety
        /// As for the out-of-place variant: the CPU must support the enabled target features.
        $(#[target_feature(enable = $feature)])?
        #[allow(unused_unsafe)]
        unsafe fn $name_in_place<K: Kernel>(v: &mut [f32]) {
            map_in_place_generic::<K, $madd>(v)
        }
    };
}

#[cfg(target_arch = "x86_64")]
variant!(map_avx512, map_in_place_avx512, Fused, "avx512f,avx2,fma");
#[cfg(target_arch = "x86_64")]
variant!(map_avx2, map_in_place_avx2, Fused, "avx2,fma");
variant!(map_portable, map_in_place_portable, PortableMulAdd);

fn run<K: Kernel>(isa: Isa, src: &[f32], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "cotangent::vmath: source and destination lengths differ");
    assert!(isa.is_available(), "cotangent::vmath: {isa:?} is not supported by this CPU");
    // SAFETY: the CPU supports the chosen variant's target features (asserted above): AVX2 and
    // FMA are both detected for `Avx2`; for `Avx512` only AVX-512F is detected, and the AVX2 and
    // FMA the variant also enables come with it (every CPU with AVX-512F has them, and rustc's
    // `avx512f` feature implies both). The portable variant needs nothing.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => map_avx512::<K>(src, dst),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => map_avx2::<K>(src, dst),
            _ => map_portable::<K>(src, dst),
        }
    }
}

fn run_in_place<K: Kernel>(isa: Isa, v: &mut [f32]) {
    assert!(isa.is_available(), "cotangent::vmath: {isa:?} is not supported by this CPU");
    // SAFETY: as in `run`: the chosen variant's target features are available (asserted above).
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => map_in_place_avx512::<K>(v),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => map_in_place_avx2::<K>(v),
            _ => map_in_place_portable::<K>(v),
        }
    }
}

macro_rules! by_func {
    ($f:expr, $run:ident ( $($arg:expr),* )) => {
        match $f {
            Func::Exp => $run::<KExp>($($arg),*),
            Func::Expm1 => $run::<KExpm1>($($arg),*),
            Func::Ln => $run::<KLn>($($arg),*),
            Func::Ln1p => $run::<KLn1p>($($arg),*),
            Func::Tanh => $run::<KTanh>($($arg),*),
            Func::Sigmoid => $run::<KSigmoid>($($arg),*),
        }
    };
}

/// `dst[i] = f(src[i])` with the variant `isa` (panics if this CPU lacks it, or if the lengths
/// differ).
pub fn apply_with(isa: Isa, f: Func, src: &[f32], dst: &mut [f32]) {
    by_func!(f, run(isa, src, dst))
}

/// `v[i] = f(v[i])` with the variant `isa` (panics if this CPU lacks it).
pub fn apply_in_place_with(isa: Isa, f: Func, v: &mut [f32]) {
    by_func!(f, run_in_place(isa, v))
}

/// `dst[i] = f(src[i])` with the best variant for this CPU (panics if the lengths differ).
pub fn apply(f: Func, src: &[f32], dst: &mut [f32]) {
    apply_with(Isa::detected(), f, src, dst)
}

/// `v[i] = f(v[i])` with the best variant for this CPU.
pub fn apply_in_place(f: Func, v: &mut [f32]) {
    apply_in_place_with(Isa::detected(), f, v)
}

macro_rules! named {
    ($($(#[$doc:meta])* $name:ident, $name_in_place:ident, $f:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(src: &[f32], dst: &mut [f32]) {
            apply(Func::$f, src, dst)
        }
        $(#[$doc])*
        /// In place.
        pub fn $name_in_place(v: &mut [f32]) {
            apply_in_place(Func::$f, v)
        }
    )*};
}

named! {
    /// `e^x` element-wise.
    exp, exp_in_place, Exp;
    /// `e^x − 1` element-wise.
    expm1, expm1_in_place, Expm1;
    /// Natural logarithm element-wise.
    ln, ln_in_place, Ln;
    /// `ln(1 + x)` element-wise.
    ln_1p, ln_1p_in_place, Ln1p;
    /// Hyperbolic tangent element-wise.
    tanh, tanh_in_place, Tanh;
    /// Logistic sigmoid element-wise.
    sigmoid, sigmoid_in_place, Sigmoid;
}
