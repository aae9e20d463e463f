//! Random primitives. Every sampler is one [`RandomSample`] node whose only input is the key
//! (so sampling stays lazy and is recomputed identically), computed with Threefry-2x32 (see
//! the CPU backend's `random` module for the algorithm and the stream layout).
//!
//! The key input has shape `[kb..., 2]` (`u32`): the ops layer passes a single key (`[2]`), and
//! the vmap rule passes a batch of keys, giving one independent sample per key
//! (`[kb..., shape...]`). Samples are not differentiable: the rules give zero cotangents and
//! tangents.
use crate::primitive::{Op, Primitive};
use crate::shape::Shape;
use crate::{Array, DType, Result};

/// What a [`RandomSample`] draws. Bounds are given in `f64` (floats) or `i64` (integers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// 32 random bits per element (`u32`).
    Bits,
    /// Uniform on `[lo, hi)`.
    Uniform {
        /// Lower bound (inclusive).
        lo: f64,
        /// Upper bound (exclusive).
        hi: f64,
    },
    /// Standard normal: `sqrt(2) * erfinv(u)` with `u` uniform on `(-1, 1)`, as JAX.
    Normal,
    /// Standard normal conditioned on `[lo, hi]`, by inverting the CDF, as JAX.
    TruncatedNormal {
        /// Lower bound.
        lo: f64,
        /// Upper bound.
        hi: f64,
    },
    /// Integers uniform on `[lo, hi)`: `lo + bits64 % (hi - lo)` (bias below `(hi-lo) / 2^64`).
    Randint {
        /// Lower bound (inclusive).
        lo: i64,
        /// Upper bound (exclusive).
        hi: i64,
    },
    /// Standard Gumbel: `-log(-log(u))`, `u` uniform on `(tiny, 1)`.
    Gumbel,
    /// `n` new keys (`[n, 2]`, `u32`): key `i` is the Threefry block of counter `i`.
    Split(usize),
    /// One new key (`[2]`): the Threefry block of counter `(0, data)`.
    FoldIn(u32),
    /// A random permutation of `0..n`: indices sorted by 64 random bits each (ties by index).
    Permutation(usize),
}

/// Draw a sample of `shape` and `dtype` from `dist` with the key given as the single input.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomSample {
    /// What to draw.
    pub dist: Dist,
    /// The shape of one sample (per key).
    pub shape: Shape,
    /// The dtype of the sample.
    pub dtype: DType,
}

impl Primitive for RandomSample {
    fn op(&self) -> Op<'_> {
        Op::Random(self)
    }
    fn name(&self) -> &str {
        "random"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "random::{:?}{:?}", self.dist, self.shape.as_slice())
    }

    fn vjp(
        &self,
        primals: &[Array],
        _cotangents: &[Array],
        argnums: &[usize],
        _outputs: &[Array],
    ) -> Result<Vec<Array>> {
        Ok(argnums.iter().map(|&i| crate::ops::zeros_like(&primals[i])).collect())
    }

    fn jvp(
        &self,
        _primals: &[Array],
        _tangents: &[Array],
        _argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::zeros_like(&outputs[0])])
    }

    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let ax = axes[0].expect("batched key");
        let k = inputs[0].moveaxis(ax as isize, 0);
        let mut shape: Vec<usize> = k.shape()[..k.ndim() - 1].to_vec();
        shape.extend_from_slice(&self.shape);
        Ok((vec![Array::from_primitive(self.clone(), vec![k], &shape, self.dtype)], vec![Some(0)]))
    }
}
