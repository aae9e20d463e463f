//! CPU kernels of the random primitives (see `crate::primitives::random` for their rules).
use super::CpuKernel;
use crate::backend::cpu::buffer::BufferElement;
use crate::backend::cpu::math::{erf, erfinv, erfinv_fast};
use crate::backend::cpu::random::{bits32, bits64, block, fill, unit_f32, unit_f64};
use crate::backend::cpu::Data;
use crate::dtype::Element;
use crate::primitive::Spec;
#[allow(unused_imports)]
use crate::primitives::random::*;
use crate::{Array, DType, Error, Result};
fn sample<T: BufferElement>(n: usize, f: impl Fn(u64) -> T + Sync + Send) -> Result<Vec<T>> {
    let mut v = crate::backend::cpu::buffer::try_filled(T::default(), n)?;
    fill(&mut v, f);
    Ok(v)
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
            Dist::Bits => Data::from_vec(sample::<u32>(n, |i| bits32(key, i))?, shape),
            Dist::Split(_) => Data::from_vec(sample::<u32>(n, |e| block(key, e / 2)[(e % 2) as usize])?, shape),
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
                })?, shape))
            }
            Dist::Uniform { lo, hi } => {
                if !dt.is_float() {
                    return Err(bad());
                }
                crate::dispatch_dtype!(dt, T => Data::from_vec(
                    sample::<T>(n, |i| in_range::<T>(lo + (hi - lo) * unit(i), lo, hi))?, shape))
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
                })?, shape))
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
                })?, shape))
            }
            Dist::Gumbel => {
                if !dt.is_float() {
                    return Err(bad());
                }
                let tiny = if wide { f64::MIN_POSITIVE } else { f32::MIN_POSITIVE as f64 };
                crate::dispatch_dtype!(dt, T => Data::from_vec(
                    sample::<T>(n, |i| T::from_f64(-(-(unit(i).max(tiny)).ln()).ln()))?, shape))
            }
        })
    }
}

impl CpuKernel for RandomSample {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
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
            let mut v: Vec<T> = crate::backend::cpu::buffer::try_with_capacity(crate::shape::numel(&out.shape))?;
            for p in &parts {
                v.extend_from_slice(p.buf.as_slice::<T>());
            }
            Data::from_vec(v, &out.shape)
        })])
    }
}
