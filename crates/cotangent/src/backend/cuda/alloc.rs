//! The caching allocator and device buffers.
//!
//! Requests are rounded up to a bucket: 8 bytes for anything up to 8 (scalars), the next power of
//! two below 16 KiB, and whole 16 KiB pages above. A dropped [`CudaBuffer`] goes back to its
//! bucket's free list and is handed to the next request of that bucket without a driver call.
//! With one stream per device this is safe as soon as the buffer drops: every kernel queued
//! earlier that reads it runs before any kernel queued later that writes it.
//!
//! Misses go to stream-ordered `cuMemAllocAsync` on the device's default memory pool, whose
//! release threshold the device raises so freed memory is not returned to the OS at every
//! synchronise. On out-of-memory the cache is flushed (all cached blocks freed, the stream
//! synchronised so the pool can reuse them) and the allocation retried once; a second failure is
//! an `Err` naming the size. Buckets are multiples of 4 bytes, so kernels may update a sub-word
//! element with a 32-bit compare-and-swap on its aligned word.
use super::capture::Arena;
use super::device::CudaDevice;
use crate::{DType, Result};
use cudarc::driver::{result as dr, sys};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Page size of the large buckets.
const PAGE: usize = 16 << 10;

/// The bucket (allocated size) of a request of `n` bytes.
pub fn bucket(n: usize) -> usize {
    if n <= 8 {
        8
    } else if n < PAGE {
        n.next_power_of_two()
    } else {
        n.div_ceil(PAGE).saturating_mul(PAGE)
    }
}

/// Free lists per bucket size.
#[derive(Default)]
pub(crate) struct Allocator {
    free: Mutex<HashMap<usize, Vec<sys::CUdeviceptr>>>,
    cached: AtomicUsize,
    /// Bytes (whole buckets) of live buffers.
    in_use: AtomicUsize,
    /// The largest `in_use` since the last reset.
    peak: AtomicUsize,
}

impl Allocator {
    /// Bytes held in free lists.
    pub(crate) fn cached_bytes(&self) -> usize {
        self.cached.load(Ordering::Relaxed)
    }

    /// Bytes of live buffers (whole buckets) and the most held at once since the last reset.
    pub(crate) fn usage(&self) -> (usize, usize) {
        (self.in_use.load(Ordering::Relaxed), self.peak.load(Ordering::Relaxed))
    }

    /// Start measuring the peak again from the bytes in use now.
    pub(crate) fn reset_peak(&self) {
        self.peak.store(self.in_use.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn taken(&self, b: usize) {
        let now = self.in_use.fetch_add(b, Ordering::Relaxed) + b;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    fn pop(&self, b: usize) -> Option<sys::CUdeviceptr> {
        let mut free = self.free.lock().ok()?;
        let p = free.get_mut(&b)?.pop()?;
        self.cached.fetch_sub(b, Ordering::Relaxed);
        Some(p)
    }

    /// Return a block that was counted as in use (a graph's arena giving its blocks back).
    pub(crate) fn release(&self, b: usize, p: sys::CUdeviceptr) {
        self.in_use.fetch_sub(b, Ordering::Relaxed);
        self.push(b, p);
    }

    fn push(&self, b: usize, p: sys::CUdeviceptr) {
        if let Ok(mut free) = self.free.lock() {
            free.entry(b).or_default().push(p);
            self.cached.fetch_add(b, Ordering::Relaxed);
        }
        // A poisoned lock leaks the block rather than panicking in a destructor.
    }

    /// Free every cached block and synchronise the stream.
    pub(crate) fn flush(&self, dev: &CudaDevice) -> Result<()> {
        let blocks: Vec<(usize, Vec<sys::CUdeviceptr>)> = match self.free.lock() {
            Ok(mut f) => f.drain().collect(),
            Err(_) => return Err(dev.error("allocator cache poisoned")),
        };
        let mut first_err = None;
        for (b, ptrs) in blocks {
            for p in ptrs {
                self.cached.fetch_sub(b, Ordering::Relaxed);
                // SAFETY: `p` came from `malloc_async` on this device's stream and is not in use:
                // it was in the free list (its `CudaBuffer` dropped), and the free is ordered on
                // the same stream after every kernel or copy queued earlier that used it. It was
                // drained from the list above, so it is freed once.
                if let Err(e) = unsafe { dr::free_async(p, dev.main_stream()) } {
                    first_err.get_or_insert(e);
                }
            }
        }
        dev.synchronize()?;
        match first_err {
            Some(e) => Err(dev.error(format!("freeing cached blocks: {e}"))),
            None => Ok(()),
        }
    }
}

/// A block of device memory of at least `len` bytes, returned to its device's cache on drop.
pub struct CudaBuffer {
    dev: Arc<CudaDevice>,
    ptr: sys::CUdeviceptr,
    len: usize,
    bucket: usize,
    /// The smallest and largest element, as `i64`, of a buffer of integers whose values the
    /// host has seen (uploaded from host data): indexing ops then know every index is in range
    /// without checking on the device and reading the result back (a wait for the GPU).
    int_range: OnceLock<(DType, i64, i64)>,
    /// The graph capture this buffer was allocated in: its block stays with that graph.
    arena: Option<Arc<Arena>>,
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuffer({} bytes on cuda:{})", self.len, self.dev.ordinal())
    }
}

impl CudaBuffer {
    /// Allocate `len` bytes (uninitialised) on `dev`. A zero-byte buffer allocates nothing.
    pub fn alloc(dev: &Arc<CudaDevice>, len: usize) -> Result<CudaBuffer> {
        if len == 0 {
            return Ok(CudaBuffer {
                dev: dev.clone(),
                ptr: 0,
                len: 0,
                bucket: 0,
                int_range: OnceLock::new(),
                arena: None,
            });
        }
        let b = bucket(len);
        // Out of memory is `Error::OutOfMemory`, as on the CPU: the node running the kernel names
        // its op, result shape and dtype (`Error::in_op`); the dtype here is a placeholder.
        if b >= isize::MAX as usize {
            return Err(crate::Error::alloc_failed(len, crate::DType::U8));
        }
        let arena = super::capture::arena(dev.ordinal());
        let made = |ptr| CudaBuffer {
            dev: dev.clone(),
            ptr,
            len,
            bucket: b,
            int_range: OnceLock::new(),
            arena: arena.clone(),
        };
        // a block the capture running on this thread freed is still counted as in use
        if let Some(ptr) = arena.as_ref().and_then(|a| a.pop(b)) {
            return Ok(made(ptr));
        }
        if let Some(ptr) = dev.alloc.pop(b) {
            dev.alloc.taken(b);
            return Ok(made(ptr));
        }
        dev.bind()?;
        // SAFETY: the stream belongs to the device's context, bound to this thread just above;
        // `b` is non-zero and below `isize::MAX`. The memory is only ever used on this stream.
        let first = unsafe { dr::malloc_async(dev.main_stream(), b) };
        let ptr = match first {
            Ok(p) => p,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                dev.alloc.flush(dev)?;
                // SAFETY: as above.
                match unsafe { dr::malloc_async(dev.main_stream(), b) } {
                    Ok(p) => p,
                    Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                        return Err(crate::Error::alloc_failed(len, crate::DType::U8))
                    }
                    Err(e) => return Err(dev.error(format!("allocating {len} bytes after freeing the cache: {e}"))),
                }
            }
            Err(e) => return Err(dev.error(format!("allocating {len} bytes: {e}"))),
        };
        dev.alloc.taken(b);
        Ok(made(ptr))
    }

    /// The device pointer (0 for an empty buffer).
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }
    /// The requested size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The device the buffer lives on.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.dev
    }
    /// Record that every element of this buffer, read as `dtype` (an integer dtype), lies in
    /// `lo..=hi`. Only for values the host has seen: device buffers are never written after
    /// the kernel or copy that fills them, so the range stays true while the buffer lives.
    pub(crate) fn set_int_range(&self, dtype: DType, lo: i64, hi: i64) {
        let _ = self.int_range.set((dtype, lo, hi));
    }
    /// The range recorded by [`set_int_range`](Self::set_int_range) for elements read as
    /// `dtype`, if any.
    pub(crate) fn int_range(&self, dtype: DType) -> Option<(i64, i64)> {
        self.int_range.get().filter(|r| r.0 == dtype).map(|r| (r.1, r.2))
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        match self.arena.take() {
            // a captured graph writes this block at every launch: it stays with the graph
            Some(arena) => arena.keep(self.bucket, self.ptr),
            None => self.dev.alloc.release(self.bucket, self.ptr),
        }
    }
}
