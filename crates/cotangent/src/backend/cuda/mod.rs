//! The CUDA backend (cargo feature `cuda`): device memory, NVRTC-compiled kernels and cuBLAS.
//!
//! Everything here is reached through plain functions that take a `CudaDevice` (or
//! `CudaData` operands, which know their device) and return new `CudaData` values; the
//! evaluation seam maps op descriptors onto them. Nothing panics on a run-time failure: a missing
//! library, a failed allocation, a kernel that does not compile or a bad index all come back as
//! [`crate::Error::Eval`] values naming the op, the sizes and the device.
//!
//! # Design choices
//!
//! * **Libraries are loaded at run time** (cudarc's `dynamic-loading`): the crate builds and runs
//!   on machines without CUDA. cudarc panics when a library is missing, so `cuda_available`
//!   probes `libcuda` and `libnvrtc` first (with cudarc's own candidate names) and wraps the first
//!   driver calls in `catch_unwind`; the answer is cached.
//! * **One context, one stream per device** (`CudaDevice`), created lazily in a global
//!   registry. cudarc's event tracking is disabled right after the context is created, before any
//!   stream or allocation: with a single stream, stream order is all the synchronisation needed,
//!   and the per-allocation events would only cost time.
//! * **Kernels are generated from tables and compiled by NVRTC to CUBIN** for the device's exact
//!   architecture (`sm_XY`), never to PTX: PTX produced by an NVRTC newer than the driver fails to
//!   load, a CUBIN does not. Modules are cached in memory (by kernel key) and on disk (by a hash of
//!   source, architecture and NVRTC version), see `nvrtc`. No CUDA header is included (NVRTC
//!   cannot find them without a toolkit): f16/bf16 are `unsigned short` bit patterns converted in
//!   a prelude (`codegen`) that reproduces the `half` crate's rounding bit for bit.
//! * **Shapes and strides travel by value** as a kernel parameter laid out like a C struct (up
//!   to `MAX_DIMS` axes after merging dense axes, any number of operands:
//!   `codegen::Layout`), so a launch needs no host→device copy of metadata; element indices
//!   are 64-bit (no wrap at 2³² elements).
//! * **Element-wise groups fuse under [`crate::compile`]**: one generated kernel per group
//!   structure (`fused.rs`), bit-identical to the separate kernels.
//! * **Compiled replays run as CUDA graphs** (`capture`): captured once on a private stream
//!   with graph-owned memory, relaunched with one driver call; inputs and outputs are copied
//!   through static buffers.
//! * **A caching allocator** (`alloc`) over stream-ordered `cuMemAllocAsync`: with one stream a
//!   freed block can be handed to the next kernel at once. See its docs for the buckets.
//! * **Determinism**: reductions combine in a fixed tree order that does not depend on the grid
//!   size; scatters walk each lane's indices in order (the CPU's sums, bit for bit) unless `COTANGENT_DETERMINISTIC=0` opts into atomics.
pub mod alloc;
pub mod capture;
pub mod codegen;
pub mod device;
pub mod elementwise;
pub(crate) mod eval;
pub(crate) mod fused;
pub mod index;
pub mod matmul;
pub mod nvrtc;
pub mod random;
pub mod reduce;
pub mod storage;

pub use alloc::CudaBuffer;
pub use capture::{graphs_enabled, GRAPH_LAUNCHES};
pub use device::{cuda_available, device, device_count, CudaDevice};
pub use elementwise::{binary, cast, copy_into, select, to_contiguous, unary};
pub(crate) use eval::eval;
pub use eval::HOST_FALLBACKS;
pub use index::{deterministic, gather, scatter, INDEX_CHECK_WAITS};
pub use matmul::{matmul, set_tf32};
pub use random::random;
pub use reduce::{arg_reduce, logsumexp, reduce, scan, softmax};
pub use storage::CudaData;

/// The largest number of axes a kernel takes after dense axes are merged.
pub const MAX_DIMS: usize = 8;

/// An [`crate::Error::Eval`] with a `cuda:` prefix.
pub(crate) fn err(msg: impl std::fmt::Display) -> crate::Error {
    crate::Error::Eval(format!("cuda: {msg}"))
}
