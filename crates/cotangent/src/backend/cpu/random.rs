//! Counter-based random numbers: Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random
//! numbers: as easy as 1, 2, 3", SC 2011 — the generator JAX uses), and the samplers built on it.
//!
//! # Streams
//! A key is two `u32` words. Element `i` (flat row-major index, a `u64`) of a sample drawn with
//! key `k` uses the counter `(i >> 32, i & 0xffff_ffff)` and the block `(x0, x1) =
//! threefry2x32(k, counter)`; this is JAX's "partitionable" layout:
//!
//! * 32 random bits: `x0 ^ x1`; 64 random bits: `(x0 << 32) | x1`;
//! * `split(k, n)[i]` is the block for counter `i` (both words); `fold_in(k, d) = split(k, ·)[d]`.
//!
//! Every element depends only on the key and its index, so samples are identical however many
//! threads compute them and in whatever order.
use rayon::prelude::*;

/// The rotation constants of Threefry-2x32.
const ROT: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];

/// Threefry-2x32 with 20 rounds: encrypt the counter `ctr` under `key`.
///
/// Known answers (Random123's `kat_vectors`): key `(0, 0)`, counter `(0, 0)` gives
/// `(0x6b200159, 0x99ba4efe)`; everything `0xffffffff` gives `(0x1cb996fc, 0xbb002be7)`.
#[inline]
pub fn threefry2x32(key: [u32; 2], ctr: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], 0x1BD1_1BDA ^ key[0] ^ key[1]];
    let mut x0 = ctr[0].wrapping_add(ks[0]);
    let mut x1 = ctr[1].wrapping_add(ks[1]);
    for r in 0..20 {
        x0 = x0.wrapping_add(x1);
        x1 = x1.rotate_left(ROT[r % 8]);
        x1 ^= x0;
        if r % 4 == 3 {
            let s = r / 4 + 1;
            x0 = x0.wrapping_add(ks[s % 3]);
            x1 = x1.wrapping_add(ks[(s + 1) % 3]).wrapping_add(s as u32);
        }
    }
    [x0, x1]
}

/// The Threefry block of element `i` of a stream.
#[inline(always)]
pub fn block(key: [u32; 2], i: u64) -> [u32; 2] {
    threefry2x32(key, [(i >> 32) as u32, i as u32])
}

/// 32 random bits for element `i`.
#[inline(always)]
pub fn bits32(key: [u32; 2], i: u64) -> u32 {
    let [a, b] = block(key, i);
    a ^ b
}

/// 64 random bits for element `i`.
#[inline(always)]
pub fn bits64(key: [u32; 2], i: u64) -> u64 {
    let [a, b] = block(key, i);
    ((a as u64) << 32) | b as u64
}

/// A uniform float in `[0, 1)` with 23 random mantissa bits (the `f32` recipe: the top 23 bits
/// of [`bits32`] under the exponent of 1.0, minus 1).
#[inline(always)]
pub fn unit_f32(key: [u32; 2], i: u64) -> f64 {
    (f32::from_bits((bits32(key, i) >> 9) | 0x3F80_0000) - 1.0) as f64
}

/// A uniform float in `[0, 1)` with 52 random mantissa bits (the `f64` recipe).
#[inline(always)]
pub fn unit_f64(key: [u32; 2], i: u64) -> f64 {
    f64::from_bits((bits64(key, i) >> 12) | 0x3FF0_0000_0000_0000) - 1.0
}

/// Element count above which samplers split work over rayon (fixed chunks: results never depend
/// on scheduling).
pub(crate) const PARALLEL: usize = 1 << 15;
const CHUNK: usize = 1 << 12;

/// Fill `out` with `f(i)` for every index, in parallel for large outputs.
pub fn fill<T: Send>(out: &mut [T], f: impl Fn(u64) -> T + Sync + Send) {
    if out.len() >= PARALLEL {
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
            let base = (c * CHUNK) as u64;
            for (j, o) in chunk.iter_mut().enumerate() {
                *o = f(base + j as u64);
            }
        });
    } else {
        for (j, o) in out.iter_mut().enumerate() {
            *o = f(j as u64);
        }
    }
}
