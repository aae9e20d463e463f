//! Activation functions, written with ops (so they differentiate to any order).
use cotangent::{self as ct, Array};

/// `max(x, 0)`.
pub fn relu(x: &Array) -> Array {
    x.maximum(0.0)
}

/// Gaussian error linear unit, exact form `x * Φ(x) = x/2 * (1 + erf(x / √2))`.
pub fn gelu(x: &Array) -> Array {
    x * ((x * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5
}

/// GELU's tanh approximation `x/2 * (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
pub fn gelu_tanh(x: &Array) -> Array {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    x * ((x + x.power(3.0) * 0.044715) * c).tanh().add(1.0) * 0.5
}

/// `x * sigmoid(x)` (also called swish).
pub fn silu(x: &Array) -> Array {
    x * x.sigmoid()
}

/// `log(1 + e^x)`, computed stably as `max(x, 0) + log1p(e^{-|x|})`.
pub fn softplus(x: &Array) -> Array {
    x.maximum(0.0) + (-x.abs()).exp().log1p()
}

/// `log(sigmoid(x)) = -softplus(-x)`.
pub fn log_sigmoid(x: &Array) -> Array {
    -softplus(&-x)
}

/// `x / max(‖x‖₂, eps)` along the last axis.
pub fn l2_normalize(x: &Array, eps: f64) -> Array {
    x * x.square().sum(&[-1], true).maximum(eps * eps).rsqrt()
}

/// Softmax along `axis` (`exp(x - max) / sum`), with ops only.
pub fn softmax(x: &Array, axis: isize) -> Array {
    let e = (x - ct::stop_gradient(&x.max(&[axis], true))).exp();
    &e / e.sum(&[axis], true)
}
