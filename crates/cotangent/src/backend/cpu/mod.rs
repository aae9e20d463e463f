//! The CPU backend: buffers, strided iteration and the kernels.
pub mod buffer;
pub mod copy;
pub mod elementwise;
pub mod gather;
pub(crate) mod host_cache;
pub(crate) mod kernels;
pub mod math;
pub mod matmul;
pub(crate) mod pool;
pub mod random;
pub mod reduce;
pub mod strided;
pub mod sum;
pub mod transpose;
// the whole vector library is exercised by its tests and benchmark; the element-wise kernels use a part
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
pub mod vmath;

#[cfg(feature = "test-hooks")]
pub use buffer::Buffer;
pub use buffer::Data;
