//! Parameter initialisers. Each takes an explicit random key (see `cotangent::random`).
//!
//! Fans follow the `[out, in, ...]` layout of [`Linear`](crate::Linear) weights:
//! `fan_in = shape[1] * receptive`, `fan_out = shape[0] * receptive`, where `receptive` is
//! the product of the axes after the second (1 for matrices). A vector has
//! `fan_in = fan_out = len`.
use cotangent::{self as ct, Array, DType};

/// `(fan_in, fan_out)` of a weight of `shape` (see the module docs).
pub fn fans(shape: &[usize]) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [n] => (*n, *n),
        [o, i, rest @ ..] => {
            let r: usize = rest.iter().product();
            (i * r, o * r)
        }
    }
}

/// Normal samples with mean `mean` and standard deviation `std`.
pub fn normal(key: &Array, shape: &[usize], mean: f64, std: f64, dtype: DType) -> Array {
    ct::random::normal(key, shape, dtype) * std + mean
}

/// Uniform samples on `[lo, hi)`.
pub fn uniform(key: &Array, shape: &[usize], lo: f64, hi: f64, dtype: DType) -> Array {
    ct::random::uniform(key, shape, lo, hi, dtype)
}

/// Glorot (Xavier) uniform: `U(-a, a)`, `a = gain * sqrt(6 / (fan_in + fan_out))`.
pub fn glorot_uniform(key: &Array, shape: &[usize], gain: f64, dtype: DType) -> Array {
    let (fi, fo) = fans(shape);
    let a = gain * (6.0 / (fi + fo).max(1) as f64).sqrt();
    uniform(key, shape, -a, a, dtype)
}

/// Glorot (Xavier) normal: `N(0, std²)`, `std = gain * sqrt(2 / (fan_in + fan_out))`.
pub fn glorot_normal(key: &Array, shape: &[usize], gain: f64, dtype: DType) -> Array {
    let (fi, fo) = fans(shape);
    normal(key, shape, 0.0, gain * (2.0 / (fi + fo).max(1) as f64).sqrt(), dtype)
}

/// He (Kaiming) uniform: `U(-a, a)`, `a = sqrt(6 / fan_in)` (for ReLU networks).
pub fn he_uniform(key: &Array, shape: &[usize], dtype: DType) -> Array {
    let (fi, _) = fans(shape);
    let a = (6.0 / fi.max(1) as f64).sqrt();
    uniform(key, shape, -a, a, dtype)
}

/// He (Kaiming) normal: `N(0, 2 / fan_in)`.
pub fn he_normal(key: &Array, shape: &[usize], dtype: DType) -> Array {
    let (fi, _) = fans(shape);
    normal(key, shape, 0.0, (2.0 / fi.max(1) as f64).sqrt(), dtype)
}
