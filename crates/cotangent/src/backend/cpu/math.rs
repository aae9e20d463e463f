//! Scalar math shared by the kernels: a `Float` trait over `f32`/`f64` and the special
//! functions the standard library lacks (`erf`, `erfinv`, and the single-precision `erf_single`
//! and `erfinv_fast`, the latter also seeding `erfinv`).
use super::buffer::BufferElement;

/// Floating point element types computed natively (`f16`/`bf16` compute through `f32`).
pub trait Float:
    BufferElement
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + std::ops::Rem<Output = Self>
{
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// Positive infinity.
    const INFINITY: Self;
    /// Negative infinity.
    const NEG_INFINITY: Self;
    /// Conversion from `f64`.
    fn of(v: f64) -> Self;
    /// Conversion to `f64`.
    fn f64(self) -> f64;
    /// `e^x`.
    fn exp(self) -> Self;
    /// `e^x - 1`.
    fn exp_m1(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// `ln(1 + x)`.
    fn ln_1p(self) -> Self;
    /// Base-2 logarithm.
    fn log2(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Tangent.
    fn tan(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Hyperbolic sine.
    fn sinh(self) -> Self;
    /// Hyperbolic cosine.
    fn cosh(self) -> Self;
    /// Arcsine.
    fn asin(self) -> Self;
    /// Arccosine.
    fn acos(self) -> Self;
    /// Arctangent.
    fn atan(self) -> Self;
    /// Four-quadrant arctangent of `self / other`.
    fn atan2(self, other: Self) -> Self;
    /// Largest integer not above.
    fn floor(self) -> Self;
    /// Smallest integer not below.
    fn ceil(self) -> Self;
    /// Round half to even (numpy's `round`).
    fn round_even(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// `self^e`.
    fn powf(self, e: Self) -> Self;
    /// NaN test.
    fn is_nan(self) -> bool;
    /// Infinity test.
    fn is_infinite(self) -> bool;
    /// Maximum propagating NaN.
    fn max_nan(self, o: Self) -> Self;
    /// Minimum propagating NaN.
    fn min_nan(self, o: Self) -> Self;
    /// `dst[i] = f(src[i])` with the vectorised kernel of [`vmath`](super::vmath) where this
    /// type has one (`f32`); `false` (nothing written) otherwise.
    fn vector_apply(f: super::vmath::Func, src: &[Self], dst: &mut [Self]) -> bool;
}

macro_rules! impl_float {
    ($($t:ty => $vector_apply:expr),*) => {$(
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline(always)] fn of(v: f64) -> Self { v as $t }
            #[inline(always)] fn f64(self) -> f64 { self as f64 }
            #[inline(always)] fn exp(self) -> Self { <$t>::exp(self) }
            #[inline(always)] fn exp_m1(self) -> Self { <$t>::exp_m1(self) }
            #[inline(always)] fn ln(self) -> Self { <$t>::ln(self) }
            #[inline(always)] fn ln_1p(self) -> Self { <$t>::ln_1p(self) }
            #[inline(always)] fn log2(self) -> Self { <$t>::log2(self) }
            #[inline(always)] fn sqrt(self) -> Self { <$t>::sqrt(self) }
            #[inline(always)] fn sin(self) -> Self { <$t>::sin(self) }
            #[inline(always)] fn cos(self) -> Self { <$t>::cos(self) }
            #[inline(always)] fn tan(self) -> Self { <$t>::tan(self) }
            #[inline(always)] fn tanh(self) -> Self { <$t>::tanh(self) }
            #[inline(always)] fn sinh(self) -> Self { <$t>::sinh(self) }
            #[inline(always)] fn cosh(self) -> Self { <$t>::cosh(self) }
            #[inline(always)] fn asin(self) -> Self { <$t>::asin(self) }
            #[inline(always)] fn acos(self) -> Self { <$t>::acos(self) }
            #[inline(always)] fn atan(self) -> Self { <$t>::atan(self) }
            #[inline(always)] fn atan2(self, o: Self) -> Self { <$t>::atan2(self, o) }
            #[inline(always)] fn floor(self) -> Self { <$t>::floor(self) }
            #[inline(always)] fn ceil(self) -> Self { <$t>::ceil(self) }
            #[inline(always)] fn round_even(self) -> Self { <$t>::round_ties_even(self) }
            #[inline(always)] fn abs(self) -> Self { <$t>::abs(self) }
            #[inline(always)] fn powf(self, e: Self) -> Self { <$t>::powf(self, e) }
            #[inline(always)] fn is_nan(self) -> bool { <$t>::is_nan(self) }
            #[inline(always)] fn is_infinite(self) -> bool { <$t>::is_infinite(self) }
            #[inline(always)] fn max_nan(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() { <$t>::NAN } else if self >= o { self } else { o }
            }
            #[inline(always)] fn min_nan(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() { <$t>::NAN } else if self <= o { self } else { o }
            }
            #[inline(always)] fn vector_apply(f: super::vmath::Func, src: &[Self], dst: &mut [Self]) -> bool {
                $vector_apply(f, src, dst)
            }
        }
    )*};
}
impl_float!(
    f32 => |f, src: &[f32], dst: &mut [f32]| {
        super::vmath::apply(f, src, dst);
        true
    },
    f64 => |_, _: &[f64], _: &mut [f64]| false
);

/// The error function, accurate to about 1e-15 in `f64`.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x == 0.0 {
        return x;
    }
    let ax = x.abs();
    if ax < 2.5 {
        // Maclaurin series: 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let x2 = x * x;
        let mut term = x;
        let mut sum = x;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else if ax > 6.0 {
        x.signum()
    } else {
        // erfc by its continued fraction (Lentz), converges quickly for x >= 2.5
        let tiny = 1e-300;
        let mut f = ax;
        let mut c = ax;
        let mut d = 0.0;
        let mut k = 1;
        loop {
            let a = k as f64 / 2.0;
            d = ax + a * d;
            d = if d.abs() < tiny { tiny } else { d };
            c = ax + a / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 || k > 500 {
                break;
            }
            k += 1;
        }
        let erfc = (-ax * ax).exp() / f / std::f64::consts::PI.sqrt();
        x.signum() * (1.0 - erfc)
    }
}

/// `erf(x)` to single-precision accuracy in fixed time, for `f32` (and `f16`/`bf16`, which
/// compute through `f32`): [`erf`]'s series loops up to ~40 times near |x| = 2.5, and was a fifth
/// of the main training example's time (through GELU).
///
/// |x| < 1: the Maclaurin series `2/√π Σ (-1)ⁿ x²ⁿ⁺¹ / (n! (2n+1))` cut after 13 terms (the first
/// omitted term is below 1e-11 of the result). |x| ≥ 1: `1 − erfc(|x|)` with the Chebyshev fit of
/// `erfc` from Numerical Recipes (`erfcc`, fractional error below 1.2e-7 of `erfc`, which is at
/// most 0.16 here, so below 2e-8 of `erf`). Evaluated in f64; within one f32 rounding of [`erf`]
/// (tested over [-6, 6]).
pub fn erf_single(x: f64) -> f64 {
    const TERMS: usize = 13;
    /// `(-1)ⁿ 2/√π / (n! (2n+1))`
    const SERIES: [f64; TERMS] = {
        let mut c = [0.0; TERMS];
        let mut factorial = 1.0;
        let mut n = 0;
        while n < TERMS {
            if n > 0 {
                factorial *= n as f64;
            }
            let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
            c[n] = sign * std::f64::consts::FRAC_2_SQRT_PI / (factorial * (2 * n + 1) as f64);
            n += 1;
        }
        c
    };
    /// Numerical Recipes' `erfcc` coefficients, lowest power of t first.
    const ERFC: [f64; 10] = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ];
    let ax = x.abs();
    if ax < 1.0 {
        let x2 = x * x;
        x * SERIES.iter().rev().fold(0.0, |acc, &c| acc * x2 + c)
    } else if ax >= 1.0 {
        let t = 1.0 / (1.0 + 0.5 * ax);
        let erfc = t * (-ax * ax + ERFC.iter().rev().fold(0.0, |acc, &c| acc * t + c)).exp();
        (1.0 - erfc).copysign(x)
    } else {
        f64::NAN
    }
}

/// The inverse error function on (-1, 1) (±inf at ±1, NaN outside).
pub fn erfinv(y: f64) -> f64 {
    if y.is_nan() || !(-1.0..=1.0).contains(&y) {
        return f64::NAN;
    }
    if y == 1.0 {
        return f64::INFINITY;
    }
    if y == -1.0 {
        return f64::NEG_INFINITY;
    }
    // Giles' single-precision approximation, then Newton steps on erf.
    let mut x = erfinv_fast(y);
    for _ in 0..3 {
        let err = erf(x) - y;
        x -= err / (std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp());
    }
    x
}

/// Inverse error function for single-precision use (Giles 2010, "Approximating the erfinv
/// function"; relative error below ~4e-7 on (-1, 1)), evaluated in `f64`.
pub fn erfinv_fast(y: f64) -> f64 {
    if y <= -1.0 {
        return f64::NEG_INFINITY;
    }
    if y >= 1.0 {
        return f64::INFINITY;
    }
    let w = -((1.0 - y) * (1.0 + y)).ln();
    let p = if w < 5.0 {
        let w = w - 2.5;
        let mut p = 2.810_226_36e-08;
        for c in [
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ] {
            p = c + p * w;
        }
        p
    } else {
        let w = w.sqrt() - 3.0;
        let mut p = -0.000_200_214_257;
        for c in [
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ] {
            p = c + p * w;
        }
        p
    };
    p * y
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn erf_values() {
        // reference values from mpmath
        assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
        assert!((erf(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
        assert!((erf(3.0) - 0.999_977_909_503_001_4).abs() < 1e-15);
        assert!((erf(-2.0) + 0.995_322_265_018_952_7).abs() < 1e-15);
        // the fixed-time single-precision erf: within one f32 rounding of the series
        for i in -6000..=6000 {
            let x = i as f64 * 1e-3 + 1.7e-5;
            let (fast, exact) = (erf_single(x), erf(x));
            assert!((fast - exact).abs() <= 6e-8 * exact.abs(), "erf_single({x}) = {fast}, erf = {exact}");
        }
        assert_eq!(erf_single(f64::INFINITY), 1.0);
        assert_eq!(erf_single(f64::NEG_INFINITY), -1.0);
        assert!(erf_single(f64::NAN).is_nan());
        assert_eq!(erf_single(-0.0).to_bits(), (-0.0f64).to_bits());
        for y in [-0.999, -0.5, 0.0, 0.1, 0.9, 0.999_999] {
            assert!((erf(erfinv(y)) - y).abs() < 1e-14);
            // the single-precision approximation (which seeds the Newton steps) is within 4e-7
            assert!((erfinv_fast(y) - erfinv(y)).abs() <= 4e-7 * erfinv(y).abs());
        }
    }
}
