//! Activation functions, written with ops (so they differentiate to any order).
//!
//! Misuse (an axis the input does not have) panics at the caller's line, naming the function.
//!
//! ```should_panic
//! use cotangent::Array;
//! use cotangent_nn::activations::softmax;
//! // panics: "softmax expects an axis in -1..1, but got axis 1 for an input of shape [3]"
//! softmax(&Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]), 1);
//! ```
use crate::checks::{self, INPUT};
use cotangent::{self as ct, Array};

/// `max(x, 0)`.
#[track_caller]
pub fn relu(x: &Array) -> Array {
    x.maximum(0.0)
}

/// Gaussian error linear unit, exact form `x * Φ(x) = x/2 * (1 + erf(x / √2))`.
#[track_caller]
pub fn gelu(x: &Array) -> Array {
    x * ((x * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5
}

/// GELU's tanh approximation `x/2 * (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
#[track_caller]
pub fn gelu_tanh(x: &Array) -> Array {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    x * ((x + x.power(3.0) * 0.044715) * c).tanh().add(1.0) * 0.5
}

/// `x * sigmoid(x)` (also called swish).
#[track_caller]
pub fn silu(x: &Array) -> Array {
    x * x.sigmoid()
}

/// `log(1 + e^x)`, computed stably as `max(x, 0) + log1p(e^{-|x|})`.
#[track_caller]
pub fn softplus(x: &Array) -> Array {
    x.maximum(0.0) + (-x.abs()).exp().log1p()
}

/// `log(sigmoid(x)) = -softplus(-x)`.
#[track_caller]
pub fn log_sigmoid(x: &Array) -> Array {
    -softplus(&-x)
}

/// `x / max(‖x‖₂, eps)` along the last axis.
#[track_caller]
pub fn l2_normalize(x: &Array, eps: f64) -> Array {
    checks::rank_at_least("l2_normalize", INPUT, x, 1);
    x * x.square().sum(&[-1], true).maximum(eps * eps).rsqrt()
}

/// Softmax along `axis` (`exp(x - max) / sum`), with ops only.
#[track_caller]
pub fn softmax(x: &Array, axis: isize) -> Array {
    checks::axis("softmax", INPUT, x, axis);
    let e = (x - ct::stop_gradient(&x.max(&[axis], true))).exp();
    &e / e.sum(&[axis], true)
}
