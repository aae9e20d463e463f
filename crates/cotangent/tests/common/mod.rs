//! Scaffolding shared by the integration tests (`mod common;`): a small deterministic generator
//! for inputs, closeness checks, central finite differences, and the first-order VJP/JVP check.
// Each test file is its own crate and uses only part of this module.
#![allow(dead_code)]

use cotangent::{self as ct, Array, DType};

/// A small deterministic generator for test inputs (64-bit LCG, Knuth's MMIX constants).
pub struct Lcg(pub u64);

impl Lcg {
    fn step(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0
    }
    /// Uniform on `[0, 1)` (53 bits).
    pub fn next(&mut self) -> f64 {
        ((self.step() >> 11) as f64) / ((1u64 << 53) as f64)
    }
    /// The top 32 bits of the next state.
    pub fn next_u32(&mut self) -> u32 {
        (self.step() >> 33) as u32
    }
    /// Uniform on `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.next_u32() as usize % n
    }
    /// Uniform on `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next()
    }
    /// `n` values uniform on `[lo, hi)`.
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    /// An `f64` array of `shape` with values uniform on `[lo, hi)`.
    pub fn array(&mut self, shape: &[usize], lo: f64, hi: f64) -> Array {
        let n: usize = shape.iter().product();
        Array::from_vec(self.vec(n, lo, hi), shape)
    }
    /// An `f64` array of `shape` with values uniform on `[-1, 1)`.
    pub fn signed(&mut self, shape: &[usize]) -> Array {
        self.array(shape, -1.0, 1.0)
    }
    /// An `f64` array of `shape` whose magnitudes are uniform on `[lo, hi)`, with random signs
    /// (inputs kept away from zero).
    pub fn away(&mut self, shape: &[usize], lo: f64, hi: f64) -> Array {
        let n: usize = shape.iter().product();
        let v: Vec<f64> =
            (0..n).map(|_| if self.next() < 0.5 { -self.uniform(lo, hi) } else { self.uniform(lo, hi) }).collect();
        Array::from_vec(v, shape)
    }
}

/// The elements of `a` as `f64`.
pub fn vals(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

/// `got` equals `want` elementwise within `tol * (1 + |want|)` (equal infinities and NaN
/// against NaN also match).
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length {} vs {}", got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}");
    }
}

/// Central differences with step `eps` of the vector-valued `f` along each element of input `i`
/// of `xs` (an `f64` array): entry `k` is `(f(x + eps e_k) - f(x - eps e_k)) / (2 eps)`.
pub fn central_diff_columns(f: impl Fn(&[Array]) -> Vec<f64>, xs: &[Array], i: usize, eps: f64) -> Vec<Vec<f64>> {
    let x = &xs[i];
    let base = vals(x);
    (0..base.len())
        .map(|k| {
            let at = |s: f64| {
                let mut p = base.clone();
                p[k] += s;
                let mut a = xs.to_vec();
                a[i] = Array::from_vec(p, x.shape());
                f(&a)
            };
            let (p, m) = (at(eps), at(-eps));
            p.iter().zip(&m).map(|(p, m)| (p - m) / (2.0 * eps)).collect()
        })
        .collect()
}

/// Central differences with step `eps` of the scalar function `scalar` with respect to every
/// element of input `i` of `xs` (an `f64` array).
pub fn central_diff(scalar: impl Fn(&[Array]) -> f64, xs: &[Array], i: usize, eps: f64) -> Vec<f64> {
    central_diff_columns(|a| vec![scalar(a)], xs, i, eps).into_iter().map(|c| c[0]).collect()
}

/// The VJP and JVP of `f` at `xs` against central differences (step 1e-6) of the scalar
/// `sum(f(xs) * w)` for a random weighting `w`, within 1e-6 relative; the cotangent shapes
/// must equal the input shapes. Inputs that are not `f64` (indices) are constants.
#[track_caller]
pub fn check_grads(name: &str, f: impl Fn(&[Array]) -> Array + Send + Sync + Clone + 'static, xs: &[Array]) {
    let tol = 1e-6;
    let mut rng = Lcg(7);
    let out = f(xs);
    let w = rng.signed(out.shape());
    let (_, vjps) = ct::vjp(f.clone(), xs, std::slice::from_ref(&w)).unwrap();
    let scalar = |xs: &[Array]| (&f(xs) * &w).sum_all().item::<f64>().unwrap();
    for (i, x) in xs.iter().enumerate() {
        if x.dtype() != DType::F64 {
            continue;
        }
        assert_eq!(vjps[i].shape(), x.shape(), "{name}: vjp shape of input {i}");
        let fd = central_diff(scalar, xs, i, 1e-6);
        assert_close(&vals(&vjps[i]), &fd, tol, &format!("{name}: vjp of input {i}"));
        // the jvp with a random tangent on input i equals fd · tangent
        let t = rng.signed(x.shape());
        let tangents: Vec<Array> =
            xs.iter().enumerate().map(|(j, y)| if j == i { t.clone() } else { ct::zeros_like(y) }).collect();
        let (_, jv) = ct::jvp(f.clone(), xs, &tangents).unwrap();
        assert_eq!(jv[0].shape(), out.shape(), "{name}: jvp shape");
        let lhs = (&jv[0] * &w).sum_all().item::<f64>().unwrap();
        let rhs: f64 = fd.iter().zip(vals(&t)).map(|(a, b)| a * b).sum();
        assert!((lhs - rhs).abs() <= tol * (1.0 + rhs.abs()), "{name}: jvp of input {i}: {lhs} vs {rhs}");
    }
}
