//! Loss functions.
use crate::activations::softplus;
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
pub fn cross_entropy(logits: &Array, targets: &Array, label_smoothing: f64, reduction: Reduction) -> Array {
    assert!(
        logits.ndim() >= 1 && &logits.shape()[..logits.ndim() - 1] == targets.shape(),
        "cotangent_nn::cross_entropy: logits {:?} need shape targets {:?} + [classes]",
        logits.shape(),
        targets.shape()
    );
    assert!(targets.dtype().is_int(), "cotangent_nn::cross_entropy: targets must be integers, got {}", targets.dtype());
    let smoothing = Array::scalar(label_smoothing).astype(logits.dtype());
    let out = fused_cross_entropy()(&[logits.clone(), targets.clone(), smoothing]).expect("cross_entropy forward");
    reduce(out[0].clone(), reduction)
}

/// Mean-squared error `(pred - target)²`.
pub fn mse(pred: &Array, target: &Array, reduction: Reduction) -> Array {
    reduce((pred - target).square(), reduction)
}

/// Binary cross-entropy on logits: `-(y log σ(z) + (1 - y) log(1 - σ(z)))`, computed stably as
/// `softplus(z) - y z`. `targets` are probabilities in `[0, 1]` (any float or bool dtype).
pub fn binary_cross_entropy_with_logits(logits: &Array, targets: &Array, reduction: Reduction) -> Array {
    let y = targets.astype(logits.dtype());
    reduce(softplus(logits) - y * logits, reduction)
}
