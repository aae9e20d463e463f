//! Random primitives. Every sampler is one [`RandomSample`] node whose only input is the key
//! (so sampling stays lazy and is recomputed identically), computed with Threefry-2x32 (see
//! [`crate::backend::cpu::random`] for the algorithm and the stream layout).
//!
//! The key input has shape `[kb..., 2]` (`u32`): the ops layer passes a single key (`[2]`), and
//! the vmap rule passes a batch of keys, giving one independent sample per key
//! (`[kb..., shape...]`). Samples are not differentiable: the rules give zero cotangents and
//! tangents.
use crate::backend::cpu::buffer::BufferElement;
use crate::backend::cpu::math::{erf, erfinv, erfinv_fast};
use crate::backend::cpu::random::{bits32, bits64, block, fill, unit_f32, unit_f64};
use crate::backend::cpu::Data;
use crate::dtype::Element;
use crate::primitive::{Primitive, Spec};
use crate::shape::Shape;
use crate::{Array, DType, Error, Result};

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

fn sample<T: BufferElement>(n: usize, f: impl Fn(u64) -> T + Sync + Send) -> Vec<T> {
    let mut v = vec![T::default(); n];
    fill(&mut v, f);
    v
}

/// Convert `v` to `T` and keep it in `[lo, hi)` (the conversion may round up to `hi`).
#[inline]
fn in_range<T: Element>(v: f64, lo: f64, hi: f64) -> T {
    let t = T::from_f64(v.max(lo));
    if t.to_f64() >= hi && hi > lo {
        // the largest T below hi
        let mut x = T::from_f64(hi);
        let mut step = (hi - lo) * 1e-9;
        while x.to_f64() >= hi {
            x = T::from_f64(hi - step);
            step *= 2.0;
        }
        x
    } else {
        t
    }
}

impl RandomSample {
    fn draw_one(&self, key: [u32; 2], n: usize) -> Result<Data> {
        let shape = &self.shape[..];
        let dt = self.dtype;
        let wide = dt == DType::F64;
        let unit = move |i: u64| if wide { unit_f64(key, i) } else { unit_f32(key, i) };
        let bad = || Error::Eval(format!("random: {:?} cannot produce {}", self.dist, dt));
        Ok(match self.dist {
            Dist::Bits => Data::from_vec(sample::<u32>(n, |i| bits32(key, i)), shape),
            Dist::Split(_) => Data::from_vec(sample::<u32>(n, |e| block(key, e / 2)[(e % 2) as usize]), shape),
            Dist::FoldIn(d) => Data::from_vec(block(key, d as u64).to_vec(), shape),
            Dist::Permutation(len) => {
                let mut idx: Vec<(u64, usize)> = (0..len).map(|i| (bits64(key, i as u64), i)).collect();
                idx.sort_unstable();
                crate::dispatch_dtype!(dt, T => Data::from_vec(
                    idx.into_iter().map(|(_, i)| T::from_i64(i as i64)).collect::<Vec<T>>(), shape))
            }
            Dist::Randint { lo, hi } => {
                if !dt.is_int() {
                    return Err(bad());
                }
                let span = (hi as i128 - lo as i128).max(1) as u128;
                crate::dispatch_dtype!(dt, T => Data::from_vec(sample::<T>(n, |i| {
                    T::from_i64((lo as i128 + (bits64(key, i) as u128 % span) as i128) as i64)
                }), shape))
            }
            Dist::Uniform { lo, hi } => {
                if !dt.is_float() {
                    return Err(bad());
                }
                crate::dispatch_dtype!(dt, T => Data::from_vec(
                    sample::<T>(n, |i| in_range::<T>(lo + (hi - lo) * unit(i), lo, hi)), shape))
            }
            Dist::Normal => {
                if !dt.is_float() {
                    return Err(bad());
                }
                let lo = -1.0 + if wide { f64::EPSILON / 2.0 } else { f32::EPSILON as f64 / 2.0 };
                crate::dispatch_dtype!(dt, T => Data::from_vec(sample::<T>(n, |i| {
                    let u = lo + (1.0 - lo) * unit(i);
                    let z = if wide { erfinv(u) } else { erfinv_fast(u) };
                    T::from_f64(std::f64::consts::SQRT_2 * z)
                }), shape))
            }
            Dist::TruncatedNormal { lo, hi } => {
                if !dt.is_float() {
                    return Err(bad());
                }
                let s2 = std::f64::consts::SQRT_2;
                let (a, b) = (erf(lo / s2), erf(hi / s2));
                crate::dispatch_dtype!(dt, T => Data::from_vec(sample::<T>(n, |i| {
                    let u = a + (b - a) * unit(i);
                    let z = s2 * if wide { erfinv(u) } else { erfinv_fast(u) };
                    T::from_f64(z.clamp(lo, hi))
                }), shape))
            }
            Dist::Gumbel => {
                if !dt.is_float() {
                    return Err(bad());
                }
                let tiny = if wide { f64::MIN_POSITIVE } else { f32::MIN_POSITIVE as f64 };
                crate::dispatch_dtype!(dt, T => Data::from_vec(
                    sample::<T>(n, |i| T::from_f64(-(-(unit(i).max(tiny)).ln()).ln())), shape))
            }
        })
    }
}

impl Primitive for RandomSample {
    fn name(&self) -> String {
        format!("random::{:?}{:?}", self.dist, self.shape.as_slice())
    }

    fn eval_cpu(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let k = &inputs[0];
        if k.dtype() != DType::U32 || k.shape().last() != Some(&2) {
            return Err(Error::Eval(format!("random: key must be u32 [..., 2], got {:?} {}", k.shape(), k.dtype())));
        }
        let keys = k.computed_data()?.to_contiguous::<u32>(k.shape()).into_owned();
        let n = crate::shape::numel(&self.shape);
        if keys.len() == 2 {
            return Ok(vec![self.draw_one([keys[0], keys[1]], n)?]);
        }
        // a batch of keys (vmap): one sample per key, concatenated
        let out = &outputs[0];
        let parts: Vec<Data> = keys.chunks(2).map(|kw| self.draw_one([kw[0], kw[1]], n)).collect::<Result<_>>()?;
        Ok(vec![crate::dispatch_dtype!(out.dtype, T => {
            let mut v: Vec<T> = Vec::with_capacity(crate::shape::numel(&out.shape));
            for p in &parts {
                v.extend_from_slice(p.buf.as_slice::<T>());
            }
            Data::from_vec(v, &out.shape)
        })])
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
