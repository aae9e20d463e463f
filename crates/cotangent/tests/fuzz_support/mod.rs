//! Differential fuzzing of cotangent graphs, shared by the CI test (`tests/fuzz_graphs.rs`)
//! and the long-running example (`examples/fuzz.rs`), which include this module by path.
//!
//! A case is a random program (`program`): inputs of random shapes (0-size, 0-d, size-1
//! broadcasting edges; contiguous, transposed or strided in memory) and a random sequence of
//! ops over them — unary math, broadcasting binary ops, reductions over random (negative)
//! axes with and without keepdims, softmax, reshape, transpose, slicing with negative steps,
//! broadcast_to, concatenate, matmul (1-d operands, broadcast batches) and select — plus a
//! random plan of transforms around segments of it (checkpoint, custom functions with and
//! without rules, `depends`). `check` runs it through cotangent under grad, jvp, vjp, vmap
//! and their compositions and compares with an independent `f64` interpreter (`reference`)
//! and with central finite differences on that interpreter.
#![allow(dead_code, unused_imports)]

pub mod check;
pub mod program;
pub mod reference;

pub use check::{gen_case, minimise, run_case, Stats};
pub use program::GenLimits;

/// A small deterministic generator (SplitMix64), so that a seed names a case on every
/// platform and in every build.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform on `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Uniform on `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}
