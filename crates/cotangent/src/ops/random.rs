//! Random numbers with explicit keys (`ct::random::*`), as in JAX: no hidden global state.
//!
//! A key is a `u32` array of shape `[2]`. The generator is counter-based
//! **Threefry-2x32 with 20 rounds** (the one JAX uses), in JAX's "partitionable" stream layout:
//! see the CPU backend's `random` module for the exact recipe. The same key always gives the same
//! numbers, on any thread and with any number of threads; a key should be used once — derive
//! fresh keys with [`split`], [`split2`], [`split_keys`] or [`fold_in`].
//!
//! Every sampler is lazy (a graph node whose input is the key) and not differentiable (its
//! gradients are zero). Under `vmap` over a batch of keys each key gives its own sample.
//!
//! ```
//! use cotangent::{self as ct, DType};
//! let key = ct::random::key(0);
//! let (k1, k2) = ct::random::split2(&key);
//! let x = ct::random::normal(&k1, &[3, 4], DType::F32);
//! let u = ct::random::uniform(&k2, &[5], 0.0, 1.0, DType::F64);
//! assert_eq!(x.shape(), &[3, 4]);
//! assert!(u.to_vec::<f64>().unwrap().iter().all(|&v| (0.0..1.0).contains(&v)));
//! ```
use crate::primitives::random::{Dist, RandomSample};
use crate::shape::Shape;
use crate::{Array, DType};

#[track_caller]
fn check_key(op: &str, key: &Array) {
    assert!(
        key.dtype() == DType::U32 && key.shape() == [2],
        "cotangent::random::{op}: a key is a uint32 array of shape [2] (from random::key / split), got {:?} ({})",
        key.shape(),
        key.dtype()
    );
}

fn draw(key: &Array, dist: Dist, shape: &[usize], dtype: DType) -> Array {
    Array::from_primitive(
        RandomSample { dist, shape: Shape::from_slice(shape), dtype },
        vec![key.clone()],
        shape,
        dtype,
    )
}

/// A key from a 64-bit seed: `[seed >> 32, seed & 0xffffffff]` (JAX's `PRNGKey`).
pub fn key(seed: u64) -> Array {
    Array::from_vec(vec![(seed >> 32) as u32, seed as u32], &[2])
}

/// `n` new keys, shape `[n, 2]`. Row `i` equals [`fold_in`]`(key, i)`.
#[track_caller]
pub fn split(key: &Array, n: usize) -> Array {
    let _op = crate::array::OpScope::enter("random::split");
    check_key("split", key);
    draw(key, Dist::Split(n), &[n, 2], DType::U32)
}

/// Two new keys (rows 0 and 1 of [`split`]`(key, 2)`).
#[track_caller]
pub fn split2(key: &Array) -> (Array, Array) {
    let _op = crate::array::OpScope::enter("random::split2");
    check_key("split2", key);
    (fold_in(key, 0), fold_in(key, 1))
}

/// `n` new keys as separate arrays (the rows of [`split`]`(key, n)`).
#[track_caller]
pub fn split_keys(key: &Array, n: usize) -> Vec<Array> {
    let _op = crate::array::OpScope::enter("random::split_keys");
    check_key("split_keys", key);
    let mut keys = Vec::with_capacity(n);
    for i in 0..n as u32 {
        keys.push(fold_in(key, i));
    }
    keys
}

/// A new key derived from `key` and the integer `data` (e.g. a step counter).
#[track_caller]
pub fn fold_in(key: &Array, data: u32) -> Array {
    let _op = crate::array::OpScope::enter("random::fold_in");
    check_key("fold_in", key);
    draw(key, Dist::FoldIn(data), &[2], DType::U32)
}

/// Uniformly random `u32` bits of `shape`.
#[track_caller]
pub fn bits(key: &Array, shape: &[usize]) -> Array {
    let _op = crate::array::OpScope::enter("random::bits");
    check_key("bits", key);
    draw(key, Dist::Bits, shape, DType::U32)
}

#[track_caller]
fn check_float(op: &str, dtype: DType) {
    assert!(dtype.is_float(), "cotangent::random::{op}: dtype must be a float type, got {dtype}");
}

/// Floats uniform on `[lo, hi)` of `shape` and float `dtype`. `f64` samples have 52 random
/// mantissa bits, the other float types 23 (then rounded to the dtype, kept below `hi`).
///
/// # Panics
/// If `dtype` is not a float type or `lo > hi`.
#[track_caller]
pub fn uniform(key: &Array, shape: &[usize], lo: f64, hi: f64, dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("random::uniform");
    check_key("uniform", key);
    check_float("uniform", dtype);
    assert!(lo <= hi, "cotangent::random::uniform: lo {lo} > hi {hi}");
    draw(key, Dist::Uniform { lo, hi }, shape, dtype)
}

/// Standard normal samples (`sqrt(2) * erfinv(u)`, `u` uniform on `(-1, 1)`, as JAX).
#[track_caller]
pub fn normal(key: &Array, shape: &[usize], dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("random::normal");
    check_key("normal", key);
    check_float("normal", dtype);
    draw(key, Dist::Normal, shape, dtype)
}

/// Standard normal samples conditioned on `[lo, hi]` (inverse-CDF method, as JAX).
///
/// # Panics
/// If `dtype` is not a float type or `lo >= hi`.
#[track_caller]
pub fn truncated_normal(key: &Array, lo: f64, hi: f64, shape: &[usize], dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("random::truncated_normal");
    check_key("truncated_normal", key);
    check_float("truncated_normal", dtype);
    assert!(lo < hi, "cotangent::random::truncated_normal: need lo < hi, got {lo} and {hi}");
    draw(key, Dist::TruncatedNormal { lo, hi }, shape, dtype)
}

/// Integers uniform on `[lo, hi)` of integer `dtype`.
///
/// # Panics
/// If `dtype` is not an integer type or `lo >= hi`.
#[track_caller]
pub fn randint(key: &Array, lo: i64, hi: i64, shape: &[usize], dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("random::randint");
    check_key("randint", key);
    assert!(dtype.is_int(), "cotangent::random::randint: dtype must be an integer type, got {dtype}");
    assert!(lo < hi, "cotangent::random::randint: need lo < hi, got {lo} and {hi}");
    draw(key, Dist::Randint { lo, hi }, shape, dtype)
}

/// Standard Gumbel samples (`-log(-log(u))`).
#[track_caller]
pub fn gumbel(key: &Array, shape: &[usize], dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("random::gumbel");
    check_key("gumbel", key);
    check_float("gumbel", dtype);
    draw(key, Dist::Gumbel, shape, dtype)
}

/// Booleans that are `true` with probability `p` (`uniform(key, shape) < p`). `p` may be a
/// number or an array broadcastable to `shape`.
#[track_caller]
pub fn bernoulli(key: &Array, p: impl crate::ops::IntoOperand, shape: &[usize]) -> Array {
    let _op = crate::array::OpScope::enter("random::bernoulli");
    check_key("bernoulli", key);
    let u = uniform(key, shape, 0.0, 1.0, DType::F32);
    u.less(p)
}

/// Indices drawn from the categorical distribution with unnormalised log-probabilities `logits`
/// along `axis` (Gumbel-max: `argmax(logits + gumbel)`), as `i32`; the result has `logits`'
/// shape without `axis`.
#[track_caller]
pub fn categorical(key: &Array, logits: &Array, axis: isize) -> Array {
    let _op = crate::array::OpScope::enter("random::categorical");
    check_key("categorical", key);
    assert!(logits.ndim() >= 1, "cotangent::random::categorical: logits must have at least one axis");
    let ax = crate::ops::shape::axis_for("random::categorical", axis, logits.shape(), logits.ndim());
    let l = logits.astype(logits.dtype().to_float());
    let z = &l + gumbel(key, l.shape(), l.dtype());
    z.argmax(ax as isize, false).astype(DType::I32)
}

/// A random permutation of `0..n` as `i32`.
#[track_caller]
pub fn permutation(key: &Array, n: usize) -> Array {
    let _op = crate::array::OpScope::enter("random::permutation");
    check_key("permutation", key);
    draw(key, Dist::Permutation(n), &[n], DType::I32)
}
