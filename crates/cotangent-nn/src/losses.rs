//! Loss functions.
//!
//! Misuse panics at the caller's line with a sentence naming the loss, the argument and the
//! expected and given shape or dtype:
//!
//! ```should_panic
//! use cotangent::Array;
//! use cotangent_nn::losses::{cross_entropy, Reduction};
//! let logits = Array::from_slice(&[0.0f32, 1.0], &[1, 2]);
//! let targets = Array::from_slice(&[1.0f32], &[1]);
//! // panics: "cross_entropy expects integer class targets, but got targets of dtype float32 ..."
//! cross_entropy(&logits, &targets, 0.0, Reduction::Mean);
//! ```
use crate::activations::softplus;
use crate::checks;
use cotangent::{self as ct, Array, DType};
use std::sync::{Arc, OnceLock};

/// How per-element losses are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// Keep one loss per element.
    None,
    /// Their mean.
    Mean,
    /// Their sum.
    Sum,
}

fn reduce(x: Array, r: Reduction) -> Array {
    match r {
        Reduction::None => x,
        Reduction::Mean => x.mean_all(),
        Reduction::Sum => x.sum_all(),
    }
}

type Fused = Arc<dyn Fn(&[Array]) -> cotangent::Result<Vec<Array>> + Send + Sync>;

/// Target distribution: `(1 - ε) one_hot(targets) + ε / V`.
fn smoothed_targets(targets: &Array, classes: usize, smoothing: &Array, dtype: DType) -> Array {
    let oh = ct::one_hot(targets, classes, dtype);
    let s = smoothing.astype(dtype);
    oh * (1.0 - &s) + s * (1.0 / classes as f64)
}

/// Per-position cross-entropy as a custom function: inputs `(logits, targets, smoothing)`,
/// forward `logsumexp(z) - Σ q z`, VJP `cot · (softmax(z) − q)` computed directly.
fn fused_cross_entropy() -> Fused {
    static F: OnceLock<Fused> = OnceLock::new();
    F.get_or_init(|| {
        let f = ct::custom_function(|x: &[Array]| {
            let (z, targets, smoothing) = (&x[0], &x[1], &x[2]);
            let v = z.shape()[z.ndim() - 1];
            let m = ct::stop_gradient(&z.max(&[-1], true));
            let lse = (z - &m).exp().sum(&[-1], false).log() + m.squeeze(&[-1]);
            let q = smoothed_targets(targets, v, smoothing, z.dtype());
            lse - (q * z).sum(&[-1], false)
        })
        .vjp(|primals, cotangents, _outputs| {
            let (z, targets, smoothing) = (&primals[0], &primals[1], &primals[2]);
            let v = z.shape()[z.ndim() - 1];
            let m = z.max(&[-1], true);
            let e = (z - &m).exp();
            let p = &e / e.sum(&[-1], true);
            let q = smoothed_targets(targets, v, smoothing, z.dtype());
            vec![(p - q) * cotangents[0].expand_dims(&[-1]), ct::zeros_like(targets), ct::zeros_like(smoothing)]
        })
        .name("cross_entropy")
        .build();
        Arc::new(f)
    })
    .clone()
}

/// Cross-entropy of `logits: [..., V]` against integer class `targets: [...]`, with label
/// smoothing `ε` (the target distribution is `(1 - ε) one_hot + ε / V`).
///
/// The gradient is fused: a custom VJP returns `softmax(logits) - target_distribution` times
/// the incoming cotangent, without differentiating through a log-softmax graph. Targets outside
/// `[0, V)` give an all-`ε/V` target row; mask such positions out with [`Reduction::None`].
///
/// ```
/// use cotangent::Array;
/// use cotangent_nn::losses::{cross_entropy, Reduction};
/// let z = Array::from_slice(&[0.0f64, 0.0], &[1, 2]);
/// let y = Array::from_slice(&[1i32], &[1]);
/// let l = cross_entropy(&z, &y, 0.0, Reduction::Mean).item::<f64>().unwrap();
/// assert!((l - 2f64.ln()).abs() < 1e-12);
/// ```
///
/// Panics unless `logits` is a float array of shape `targets.shape() + [V]`, `targets` has an
/// integer dtype and `0 <= label_smoothing <= 1`.
#[track_caller]
pub fn cross_entropy(logits: &Array, targets: &Array, label_smoothing: f64, reduction: Reduction) -> Array {
    const LOGITS: checks::Noun = ("logits", "logits");
    checks::float("cross_entropy", LOGITS, logits);
    checks::rank_at_least("cross_entropy", LOGITS, logits, 1);
    if !targets.dtype().is_int() {
        panic!(
            "cross_entropy expects integer class targets, but got targets of dtype {} (shape {:?}); for \
             probability targets use binary_cross_entropy_with_logits or a soft-label loss",
            targets.dtype(),
            targets.shape()
        );
    }
    let lead = &logits.shape()[..logits.ndim() - 1];
    if lead != targets.shape() {
        panic!(
            "cross_entropy expects targets of shape {lead:?} (the logits' shape without the class axis), but got \
             logits of shape {:?} and targets of shape {:?}",
            logits.shape(),
            targets.shape()
        );
    }
    if !(0.0..=1.0).contains(&label_smoothing) {
        panic!("cross_entropy expects label_smoothing in [0, 1], but got label_smoothing = {label_smoothing}");
    }
    let smoothing = Array::scalar(label_smoothing).astype(logits.dtype());
    let out = fused_cross_entropy()(&[logits.clone(), targets.clone(), smoothing]).expect("cross_entropy forward");
    reduce(out[0].clone(), reduction)
}

/// Mean-squared error `(pred - target)²`. Panics unless `pred` and `target` have the same
/// shape (no broadcasting: `[n, 1]` against `[n]` would silently give `[n, n]` losses).
///
/// ```
/// use cotangent::Array;
/// use cotangent_nn::losses::{mse, Reduction};
/// let p = Array::from_slice(&[1.0f32, 2.0], &[2]);
/// let t = Array::from_slice(&[1.0f32, 4.0], &[2]);
/// assert_eq!(mse(&p, &t, Reduction::Mean).item::<f32>().unwrap(), 2.0);
/// ```
#[track_caller]
pub fn mse(pred: &Array, target: &Array, reduction: Reduction) -> Array {
    checks::same_shape("mse", ("pred", pred), ("target", target));
    reduce((pred - target).square(), reduction)
}

/// Binary cross-entropy on logits: `-(y log σ(z) + (1 - y) log(1 - σ(z)))`, computed stably as
/// `softplus(z) - y z`. `targets` are probabilities in `[0, 1]` (any float or bool dtype).
/// Panics unless `logits` is a float array and `targets` has its shape.
///
/// ```
/// use cotangent::Array;
/// use cotangent_nn::losses::{binary_cross_entropy_with_logits, Reduction};
/// let z = Array::from_slice(&[0.0f64], &[1]);
/// let y = Array::from_slice(&[true], &[1]);
/// let l = binary_cross_entropy_with_logits(&z, &y, Reduction::Sum).item::<f64>().unwrap();
/// assert!((l - 2f64.ln()).abs() < 1e-12);
/// ```
#[track_caller]
pub fn binary_cross_entropy_with_logits(logits: &Array, targets: &Array, reduction: Reduction) -> Array {
    checks::float("binary_cross_entropy_with_logits", ("logits", "logits"), logits);
    checks::same_shape("binary_cross_entropy_with_logits", ("logits", logits), ("targets", targets));
    let y = targets.astype(logits.dtype());
    reduce(softplus(logits) - y * logits, reduction)
}
