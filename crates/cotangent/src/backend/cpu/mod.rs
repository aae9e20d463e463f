//! The CPU backend: buffers, strided iteration and the kernels.
pub mod buffer;
pub mod copy;
pub mod elementwise;
pub mod gather;
pub(crate) mod kernels;
pub mod math;
pub mod matmul;
pub(crate) mod pool;
pub mod random;
pub mod reduce;
pub mod strided;
pub mod sum;
pub mod transpose;
pub mod vmath;

pub use buffer::{Buffer, Data};
