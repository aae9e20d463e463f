//! Devices: availability probing, the per-ordinal registry, and what a device owns (context,
//! stream, cuBLAS handle, compiled kernels, allocator).
use super::alloc::Allocator;
use super::err;
use crate::Result;
use cudarc::driver::{result as dr, sys, CudaContext, CudaStream};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

/// Number of CUDA devices, probed once: 0 when libcuda or libnvrtc cannot be loaded, the driver
/// fails to initialise, or there is no device. Never panics.
pub fn device_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        // SAFETY: these only `dlopen` libcuda and libnvrtc under cudarc's candidate names (running
        // their initialisers, which ask nothing of the caller) and call nothing through them yet.
        let present = unsafe { sys::is_culib_present() && cudarc::nvrtc::sys::is_culib_present() };
        if !present {
            return 0;
        }
        // cudarc panics when a symbol is missing (e.g. a driver older than the CUDA version
        // feature): treat that like an absent device.
        let probe = std::panic::catch_unwind(|| -> std::result::Result<usize, dr::DriverError> {
            dr::init()?;
            Ok(dr::device::get_count()?.max(0) as usize)
        });
        match probe {
            Ok(Ok(n)) => n,
            _ => 0,
        }
    })
}

/// Whether at least one CUDA device can run kernels (driver and NVRTC present, a device found).
pub fn cuda_available() -> bool {
    device_count() > 0
}

/// The device of `ordinal`, created on first use and shared afterwards.
pub fn device(ordinal: usize) -> Result<Arc<CudaDevice>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<CudaDevice>>>> = OnceLock::new();
    let n = device_count();
    if ordinal >= n {
        return Err(err(format!("device cuda:{ordinal} does not exist ({n} CUDA device(s) found)")));
    }
    let map = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().map_err(|_| err("device registry poisoned"))?;
    if let Some(d) = map.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Arc::new(CudaDevice::new(ordinal)?);
    map.insert(ordinal, d.clone());
    Ok(d)
}

/// A compiled kernel: a function handle of a loaded module (kept loaded for the process).
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    func: sys::CUfunction,
}
// SAFETY: a `CUfunction` is an opaque driver handle, not a pointer Rust dereferences; the driver
// API is thread-safe and accepts it from any thread whose current context is the one that loaded
// it (`launch` binds the device's context first). Modules are never unloaded, so the handle stays
// valid for the life of the process.
unsafe impl Send for Kernel {}
// SAFETY: as for `Send`: a shared `Kernel` is only copied and passed to `cuLaunchKernel`, which
// does not mutate it.
unsafe impl Sync for Kernel {}

/// One CUDA device: its primary context (event tracking off), one stream on which everything is
/// ordered, a lazily created cuBLAS handle, the compiled-kernel cache and the caching allocator.
pub struct CudaDevice {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: (i32, i32),
    sm_count: usize,
    /// The cuBLAS handle and its workspace (address, bytes), made on first use.
    blas: Mutex<Option<(cudarc::cublas::CudaBlas, sys::CUdeviceptr, usize)>>,
    kernels: Mutex<HashMap<String, Kernel>>,
    pub(crate) alloc: Allocator,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice(cuda:{}, sm_{}{})", self.ordinal, self.arch.0, self.arch.1)
    }
}

impl CudaDevice {
    fn new(ordinal: usize) -> Result<CudaDevice> {
        let e = |what: &str, x: dr::DriverError| err(format!("cuda:{ordinal}: {what}: {x}"));
        let ctx = CudaContext::new(ordinal).map_err(|x| e("creating the context", x))?;
        // Before any stream or allocation (cudarc's advice; disabling later can hang).
        // SAFETY: nothing has been allocated or launched in this context yet.
        unsafe { ctx.disable_event_tracking() };
        let arch = ctx.compute_capability().map_err(|x| e("compute capability", x))?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|x| e("multiprocessor count", x))? as usize;
        let stream = ctx.new_stream().map_err(|x| e("creating the stream", x))?;
        // Keep freed memory in the driver's pool instead of returning it at every synchronise.
        // SAFETY: the device handle comes from the context; the attribute takes a u64.
        unsafe {
            let pool = dr::device::get_default_mem_pool(ctx.cu_device()).map_err(|x| e("memory pool", x))?;
            let mut threshold: u64 = u64::MAX;
            dr::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut c_void,
            )
            .map_err(|x| e("memory pool release threshold", x))?;
        }
        Ok(CudaDevice {
            ordinal,
            ctx,
            stream,
            arch,
            sm_count: sm_count.max(1),
            blas: Mutex::new(None),
            kernels: Mutex::new(HashMap::new()),
            alloc: Allocator::default(),
        })
    }

    /// The device ordinal (`cuda:N`).
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    /// Compute capability `(major, minor)`.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.arch
    }
    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> usize {
        self.sm_count
    }
    /// The raw stream the calling thread queues this device's work on: the device's one stream,
    /// or, while the thread captures a graph of this device (`capture`), the capture's stream.
    pub(crate) fn cu_stream(&self) -> sys::CUstream {
        super::capture::stream_override(self.ordinal).unwrap_or_else(|| self.stream.cu_stream())
    }

    /// The device's one stream, whatever the calling thread captures: allocations, copies into
    /// and out of captured graphs, and their launches.
    pub(crate) fn main_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// A new stream on this device's context (a graph capture records one).
    pub(crate) fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx.new_stream().map_err(|x| self.error(format!("creating a stream: {x}")))
    }

    /// Make this device's context current on the calling thread (cheap when it already is).
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|x| err(format!("cuda:{}: binding the context: {x}", self.ordinal)))
    }

    /// An error naming this device.
    pub(crate) fn error(&self, msg: impl std::fmt::Display) -> crate::Error {
        err(format!("cuda:{}: {msg}", self.ordinal))
    }

    /// Wait until all queued work is done; reports asynchronous kernel errors.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.stream.synchronize().map_err(|x| self.error(format!("synchronize: {x}")))
    }

    /// Free every cached (unused) block back to the driver and synchronise.
    pub fn trim_cache(&self) -> Result<()> {
        self.bind()?;
        self.alloc.flush(self)
    }

    /// Bytes of live device arrays (rounded up to the allocator's buckets) and the most held at
    /// once since the last [`reset_peak_memory`](CudaDevice::reset_peak_memory).
    pub fn memory_usage(&self) -> (usize, usize) {
        self.alloc.usage()
    }

    /// Start measuring peak memory from now.
    pub fn reset_peak_memory(&self) {
        self.alloc.reset_peak()
    }

    /// Bytes held in the allocator's cache (freed by arrays, kept for reuse).
    pub fn cached_bytes(&self) -> usize {
        self.alloc.cached_bytes()
    }

    /// The kernel `name` of the module built from the source `make()` returns, cached under
    /// `key` (the key must determine the source). Compiles with NVRTC on a miss.
    pub(crate) fn kernel(&self, key: &str, name: &str, make: impl FnOnce() -> String) -> Result<Kernel> {
        let mut cache = self.kernels.lock().map_err(|_| self.error("kernel cache poisoned"))?;
        if let Some(k) = cache.get(key) {
            return Ok(*k);
        }
        let src = make();
        let cubin = super::nvrtc::compile(&src, name, self.arch)?;
        self.bind()?;
        // SAFETY: `cuModuleLoadData` takes no length: the driver finds the image's extent from
        // its ELF headers, so `cubin` must be a whole CUBIN image. It is one made by NVRTC for
        // this architecture, now or by an earlier run and read back from the disk cache, where it
        // was written to a temporary file and renamed (never half a file) under a name hashing
        // the source, architecture and NVRTC version. `nvrtc::compile` returns only images that
        // are whole 64-bit ELF files (headers, segments and sections inside the slice), and a
        // cache file only when its length and hash match its header. The image is copied during
        // the call; the context is bound just above.
        let module = unsafe { dr::module::load_data(cubin.as_ptr() as *const c_void) }
            .map_err(|x| self.error(format!("loading kernel {name}: {x}")))?;
        let cname = std::ffi::CString::new(name).map_err(|_| self.error("kernel name contains NUL"))?;
        // SAFETY: the module was just loaded and is never unloaded.
        let func = unsafe { dr::module::get_function(module, cname) }
            .map_err(|x| self.error(format!("kernel {name} not found in its module: {x}")))?;
        let k = Kernel { func };
        cache.insert(key.to_string(), k);
        Ok(k)
    }

    /// Grid size for a grid-stride loop over `n` items with blocks of `block` threads.
    pub(crate) fn grid_for(&self, n: u64, block: u32) -> u32 {
        let want = n.div_ceil(block as u64).max(1);
        want.min((self.sm_count * 32) as u64) as u32
    }

    /// Launch `k` on this device's stream. `params` holds one pointer per kernel argument,
    /// each pointing at a value of the argument's exact C type.
    ///
    /// # Safety
    ///
    /// `params` must have exactly one entry per parameter of `k`, each pointing at a live value
    /// of exactly that parameter's C type (the values are copied while the launch is queued, so
    /// they need only live for this call). Every device address among them must be of a live
    /// buffer of this device, with room for every element the kernel reads or writes for the
    /// sizes passed beside it, and the caller must hold those buffers until the launch is queued
    /// (a buffer dropped later returns to the cache and is reused only by work queued after this
    /// kernel on the same stream).
    pub(crate) unsafe fn launch(
        &self,
        k: Kernel,
        grid: u32,
        block: u32,
        shared: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: the caller guarantees the parameters (see `# Safety`); the kernel belongs to a
        // module loaded on this device's context, which `bind` made current.
        unsafe { dr::launch_kernel(k.func, (grid.max(1), 1, 1), (block, 1, 1), shared, self.cu_stream(), params) }
            .map_err(|x| self.error(format!("kernel launch: {x}")))
    }

    /// Run `f` with the cuBLAS handle (created on first use).
    pub(crate) fn with_blas<R>(&self, f: impl FnOnce(&cudarc::cublas::CudaBlas) -> Result<R>) -> Result<R> {
        let mut blas = self.blas.lock().map_err(|_| self.error("cuBLAS handle poisoned"))?;
        if blas.is_none() {
            // SAFETY: only `dlopen`s libcublas under cudarc's candidate names; nothing is called
            // through it here.
            if !unsafe { cudarc::cublas::sys::is_culib_present() } {
                return Err(self.error("libcublas could not be loaded (matmul needs cuBLAS)"));
            }
            self.bind()?;
            let b = cudarc::cublas::CudaBlas::new(self.stream.clone())
                .map_err(|x| self.error(format!("creating the cuBLAS handle: {x:?}")))?;
            // the workspace NVIDIA recommends for Hopper (4 MiB suffices before it); with a
            // smaller one the heuristics skip the fastest bf16/f16 kernels. Allocated once per
            // device and kept for the life of the process, as the handle itself.
            let bytes = if self.arch.0 >= 9 { 32 << 20 } else { 4 << 20 };
            // SAFETY: a plain device allocation of `bytes` on this device's (bound) context.
            let ws = unsafe { dr::malloc_sync(bytes) }
                .map_err(|x| self.error(format!("allocating the cuBLAS workspace ({bytes} bytes): {x}")))?;
            // SAFETY: `ws` is a live allocation of `bytes` bytes that is never freed, and the
            // handle is only used on this device's stream.
            let st = unsafe { cudarc::cublas::sys::cublasSetWorkspace_v2(*b.handle(), ws as *mut c_void, bytes) };
            if st != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(self.error(format!("setting the cuBLAS workspace: {st:?}")));
            }
            *blas = Some((b, ws, bytes));
        }
        self.bind()?;
        let &(ref handle, ws, bytes) = blas.as_ref().expect("set above");
        // while this thread captures a graph, the handle queues on the capture's stream (the
        // handle's lock is held meanwhile, so no other thread's call goes there)
        let Some(capture) = super::capture::stream_override(self.ordinal) else { return f(handle) };
        let set_stream = |stream: sys::CUstream| {
            use cudarc::cublas::sys::{cublasSetStream_v2, cublasSetWorkspace_v2, cublasStatus_t};
            // SAFETY: the handle is live and locked; both streams belong to this device's
            // context. Setting the stream resets the handle's workspace to cuBLAS's default
            // pool, so the device's workspace (live for the process) is set again: a captured
            // graph uses it too, which is safe because graphs are launched on the device's
            // stream, ordered with every other use of the handle.
            let st = unsafe { cublasSetStream_v2(*handle.handle(), stream as _) };
            let st = match st {
                cublasStatus_t::CUBLAS_STATUS_SUCCESS => unsafe {
                    cublasSetWorkspace_v2(*handle.handle(), ws as *mut c_void, bytes)
                },
                st => st,
            };
            match st {
                cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
                st => Err(self.error(format!("setting the cuBLAS stream and workspace: {st:?}"))),
            }
        };
        set_stream(capture)?;
        // back to the device's stream whatever `f` does (a panic is resumed afterwards)
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(handle)));
        set_stream(self.stream.cu_stream())?;
        result.unwrap_or_else(|payload| std::panic::resume_unwind(payload))
    }
}
