//! Backends: where arrays live and how the op descriptors of the primitives are computed.
//!
//! A primitive states *what* it computes as an [`Op`] descriptor; a backend, one per device,
//! evaluates descriptors on its own storage. `Storage` is the data of one computed array on
//! its device. The evaluator (`graph.rs`) only orders nodes and hands each to `eval`, which
//! picks the backend of the node's [`Device`]. Everything that only makes sense on one device
//! (the CPU's thread pool and buffer donation; a GPU's streams and allocator) lives in that
//! device's folder. Adding a device means a folder here, a `Storage` variant and an arm in
//! `eval` and `transfer`; nothing under `primitives/`, `ops/` or `transforms/` changes.
use crate::primitive::{Op, Spec};
use crate::{Array, DType, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// The CPU backend. Its kernels are public only with the `test-hooks` feature, for the crate's
/// own tests and benchmarks (they are not API).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod cpu;
#[cfg(not(feature = "test-hooks"))]
pub(crate) mod cpu;
/// A host vector with room for `len` elements, or `Err` when the memory cannot be had (ops
/// that build their values on the host, such as `arange`, use it before any device sees them).
pub(crate) use cpu::buffer::try_with_capacity as try_host_vec;
/// The CUDA backend. Public only with the `test-hooks` feature, as [`cpu`]'s kernels.
#[cfg(all(feature = "cuda", feature = "test-hooks"))]
#[doc(hidden)]
pub mod cuda;
// (its exports and accessors exist for the test hooks; without them some go unused)
#[cfg(all(feature = "cuda", not(feature = "test-hooks")))]
#[allow(unused_imports, dead_code)]
pub(crate) mod cuda;

/// Where an array lives.
///
/// ```
/// use cotangent::{Array, Device};
/// let x = Array::from_slice(&[1.0f32, 2.0], &[2]).to_device(Device::Cpu);
/// assert_eq!(x.device(), Device::Cpu);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory, computed by the CPU backend.
    Cpu,
    /// The NVIDIA GPU of this ordinal (needs the `cuda` cargo feature and a driver at run time).
    Cuda(usize),
}

/// Memory held on a device by cotangent (see [`Device::memory_stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MemoryStats {
    /// Bytes of live arrays (rounded up to the allocator's block sizes).
    pub in_use: usize,
    /// The most bytes of live arrays held at once since the last [`Device::reset_peak_memory`].
    pub peak: usize,
    /// Bytes freed by arrays and kept by the caching allocator for reuse.
    pub cached: usize,
}

impl Device {
    /// Wait until all work queued on the device is done: a no-op on the CPU (evaluation there
    /// returns when the values are computed); on a GPU, evaluation only queues kernels, so time a
    /// GPU computation with `eval` followed by `synchronize`. Reading values (`to_vec`, `item`)
    /// synchronises by itself. Asynchronous kernel faults surface here as `Err`.
    ///
    /// ```
    /// use cotangent::{Array, Device};
    /// let y = Array::from_slice(&[1.0f32, 2.0], &[2]).exp();
    /// y.eval().unwrap();
    /// y.device().synchronize().unwrap();
    /// ```
    pub fn synchronize(self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => cuda::device(n)?.synchronize(),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(n) => Err(no_cuda(n)),
        }
    }

    /// Device memory held by cotangent's allocator: `None` on the CPU (host memory comes from
    /// the global allocator) and on a GPU that cannot be used.
    ///
    /// ```
    /// assert_eq!(cotangent::Device::Cpu.memory_stats(), None);
    /// ```
    pub fn memory_stats(self) -> Option<MemoryStats> {
        match self {
            Device::Cpu => None,
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => {
                let d = cuda::device(n).ok()?;
                let (in_use, peak) = d.memory_usage();
                Some(MemoryStats { in_use, peak, cached: d.cached_bytes() })
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => None,
        }
    }

    /// Bytes of freed buffers that cotangent keeps on this device for reuse: the host buffer
    /// cache on the CPU (buffers of 4 KiB to 1 MiB, reused by the next buffer of the same size;
    /// at most [`set_host_cache_limit`]'s limit), the caching allocator's free blocks on a GPU
    /// (0 for a GPU that cannot be used).
    ///
    /// ```
    /// use cotangent::{DType, Device};
    /// Device::Cpu.clear_cache().unwrap();
    /// let x = cotangent::zeros(&[4096], DType::F32) + 1.0;
    /// x.eval().unwrap();
    /// drop(x); // its 16 KiB buffer goes to the cache
    /// assert_eq!(Device::Cpu.cached_bytes(), 16384);
    /// ```
    pub fn cached_bytes(self) -> usize {
        match self {
            Device::Cpu => cpu::host_cache::cached_bytes(),
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => cuda::device(n).map_or(0, |d| d.cached_bytes()),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => 0,
        }
    }

    /// Frees the memory of freed buffers that cotangent keeps on this device for reuse (see
    /// [`Device::cached_bytes`]); live arrays are untouched. Cotangent also does this by itself
    /// before retrying an allocation that failed.
    ///
    /// ```
    /// use cotangent::Device;
    /// Device::Cpu.clear_cache().unwrap();
    /// assert_eq!(Device::Cpu.cached_bytes(), 0);
    /// ```
    pub fn clear_cache(self) -> Result<()> {
        match self {
            Device::Cpu => {
                cpu::host_cache::clear();
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => cuda::device(n)?.trim_cache(),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(n) => Err(no_cuda(n)),
        }
    }

    /// Start measuring [`MemoryStats::peak`] again from the bytes in use now (no-op on the CPU).
    pub fn reset_peak_memory(self) {
        #[cfg(feature = "cuda")]
        if let Device::Cuda(n) = self {
            if let Ok(d) = cuda::device(n) {
                d.reset_peak_memory();
            }
        }
    }

    /// Whether a CUDA GPU can be used: the crate was built with the `cuda` feature, the driver
    /// and NVRTC libraries load, and at least one device is present. Never panics.
    ///
    /// ```
    /// let _ = cotangent::Device::cuda_available(); // false without the `cuda` feature
    /// ```
    pub fn cuda_available() -> bool {
        #[cfg(feature = "cuda")]
        {
            cuda::cuda_available()
        }
        #[cfg(not(feature = "cuda"))]
        {
            false
        }
    }

    /// Parses `cpu`, `cuda` (ordinal 0) or `cuda:N`.
    ///
    /// ```
    /// use cotangent::Device;
    /// assert_eq!(Device::parse("cuda:1"), Some(Device::Cuda(1)));
    /// assert_eq!(Device::parse("gpu"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Device> {
        match s.trim() {
            "cpu" => Some(Device::Cpu),
            "cuda" => Some(Device::Cuda(0)),
            s => s.strip_prefix("cuda:").and_then(|n| n.parse().ok()).map(Device::Cuda),
        }
    }

    fn encode(self) -> u64 {
        match self {
            Device::Cpu => 0,
            Device::Cuda(n) => n as u64 + 1,
        }
    }

    fn decode(v: u64) -> Device {
        match v {
            0 => Device::Cpu,
            n => Device::Cuda(n as usize - 1),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// The default device, encoded (see `Device::encode`); `u64::MAX` until first read.
static DEFAULT_DEVICE: AtomicU64 = AtomicU64::new(u64::MAX);

/// The device new arrays are created on: the CPU unless [`set_default_device`] chose another or
/// the environment variable `COTANGENT_DEVICE` (`cpu`, `cuda`, `cuda:N`) names one, so a whole
/// program or test suite runs on a GPU unchanged.
///
/// # Panics
/// If `COTANGENT_DEVICE` holds something else.
pub fn default_device() -> Device {
    let v = DEFAULT_DEVICE.load(Ordering::Relaxed);
    if v != u64::MAX {
        return Device::decode(v);
    }
    let d = match std::env::var("COTANGENT_DEVICE") {
        Ok(s) => Device::parse(&s).unwrap_or_else(|| {
            panic!("cotangent: COTANGENT_DEVICE={s:?} is not a device (expected cpu, cuda or cuda:N)")
        }),
        Err(_) => Device::Cpu,
    };
    let _ = DEFAULT_DEVICE.compare_exchange(u64::MAX, d.encode(), Ordering::Relaxed, Ordering::Relaxed);
    Device::decode(DEFAULT_DEVICE.load(Ordering::Relaxed))
}

/// Makes `device` the default for arrays created from now on, on every thread.
///
/// ```
/// use cotangent::{self as ct, Device};
/// ct::set_default_device(Device::Cpu);
/// assert_eq!(ct::Array::scalar(1.0f32).device(), Device::Cpu);
/// ```
pub fn set_default_device(device: Device) {
    DEFAULT_DEVICE.store(device.encode(), Ordering::Relaxed);
}

/// Sets the most bytes the CPU's host buffer cache keeps (see [`Device::cached_bytes`]) and
/// returns the previous limit; cached buffers beyond the new limit are freed now, and 0 turns the
/// cache off. The default is an eighth of the machine's memory, at most 1 GiB. A freed buffer
/// that does not fit frees the least recently used sizes first.
///
/// ```
/// let previous = cotangent::set_host_cache_limit(64 << 20);
/// assert!(cotangent::Device::Cpu.cached_bytes() <= 64 << 20);
/// cotangent::set_host_cache_limit(previous);
/// ```
pub fn set_host_cache_limit(bytes: usize) -> usize {
    cpu::host_cache::set_cache_limit(bytes)
}

/// The data of one computed array, on its device.
#[derive(Clone, Debug)]
pub(crate) enum Storage {
    /// Host memory.
    Cpu(cpu::Data),
    /// GPU memory.
    #[cfg(feature = "cuda")]
    Cuda(cuda::CudaData),
}

impl Storage {
    /// The device the data is on.
    pub(crate) fn device(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            Storage::Cuda(d) => Device::Cuda(d.device().ordinal()),
        }
    }

    /// The data on the host: borrowed for CPU storage, copied (synchronising) otherwise.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    pub(crate) fn to_host(&self, spec: &Spec) -> Result<std::borrow::Cow<'_, cpu::Data>> {
        match self {
            Storage::Cpu(d) => Ok(std::borrow::Cow::Borrowed(d)),
            #[cfg(feature = "cuda")]
            Storage::Cuda(d) => Ok(std::borrow::Cow::Owned(d.to_host(&spec.shape)?)),
        }
    }
}

/// Whether ops built eagerly on `device` fold their single-use element-wise operands into one
/// fused node (`primitives::fused::fuse_producers`): on CUDA devices, where each folded op is a
/// kernel launch (several µs of host and GPU time) and an intermediate buffer saved. Not on the
/// CPU, where a group of two steps over a few elements costs more than the two plain nodes it
/// replaces. `COTANGENT_EAGER_FUSION=0` turns it off (every op its own kernel, as to measure
/// per-op costs); results are bit-identical either way.
pub(crate) fn fuses_eagerly(device: Device) -> bool {
    #[cfg(feature = "test-hooks")]
    if let Some(on) = eager_fusion::OVERRIDE.with(|o| o.get()) {
        return on;
    }
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let enabled = || *ENABLED.get_or_init(|| std::env::var("COTANGENT_EAGER_FUSION").map_or(true, |v| v != "0"));
    match device {
        Device::Cuda(_) => enabled(),
        Device::Cpu => false,
    }
}

/// Eager fusion switched on or off for ops built on one thread, on any device: tests of its
/// graph rewriting on the CPU, and CUDA baselines of separate kernels. Behind the `test-hooks`
/// feature; not part of the API.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod eager_fusion {
    thread_local! {
        pub(super) static OVERRIDE: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
    }

    /// Run `f` with ops built on this thread fusing eagerly (`on`) or not, whatever the device.
    pub fn with<R>(on: bool, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<bool>);
        impl Drop for Restore {
            fn drop(&mut self) {
                OVERRIDE.with(|o| o.set(self.0));
            }
        }
        let _restore = Restore(OVERRIDE.with(|o| o.replace(Some(on))));
        f()
    }
}

/// Whether `device`'s backend evaluates `op` on operands of `operand` dtype inside a fused
/// element-wise group (see [`crate::compile`]): the CPU fuses every element-wise op, CUDA those
/// its code generator has snippets for.
#[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
pub(crate) fn fusable(device: Device, op: Op<'_>, operand: DType) -> bool {
    let element_wise = matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Cast(_) | Op::Select);
    match device {
        Device::Cpu => element_wise,
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => element_wise && cuda::fused::fusable(op, operand),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => false,
    }
}

/// A node's computed outputs (most nodes have one: it is kept inline, without an allocation).
pub(crate) type Outputs = smallvec::SmallVec<[Storage; 1]>;

/// Evaluate `op` on the device `device`; `inputs` are computed and on that device.
pub(crate) fn eval(device: Device, op: Op<'_>, inputs: &[Array], outputs: &[Spec]) -> Result<Outputs> {
    #[cfg(feature = "test-hooks")]
    recording::note(device, &op);
    match device {
        Device::Cpu => Ok(cpu::kernels::eval(op, inputs, outputs)?.into_iter().map(Storage::Cpu).collect()),
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => cuda::eval(n, op, inputs, outputs).map(Outputs::from_vec),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(n) => Err(no_cuda(n)),
    }
}

/// [`eval`] with the inputs handed over by a node that gave them up: a backend may reuse their
/// buffers for the outputs when nothing else references them (buffer donation).
pub(crate) fn eval_owned(device: Device, op: Op<'_>, inputs: Vec<Array>, outputs: &[Spec]) -> Result<Outputs> {
    match device {
        Device::Cpu => Ok({
            #[cfg(feature = "test-hooks")]
            recording::note(device, &op);
            cpu::kernels::eval_owned(op, inputs, outputs)?.into_iter().map(Storage::Cpu).collect()
        }),
        _ => eval(device, op, &inputs, outputs),
    }
}

/// Copy computed `data` of `spec` to `device`.
pub(crate) fn transfer(data: &Storage, spec: &Spec, device: Device) -> Result<Storage> {
    if data.device() == device {
        return Ok(data.clone());
    }
    match device {
        Device::Cpu => Ok(Storage::Cpu(data.to_host(spec)?.into_owned())),
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => {
            let host = data.to_host(spec)?;
            Ok(Storage::Cuda(cuda::CudaData::upload(&cuda::device(n)?, &host, &spec.shape)?))
        }
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(n) => Err(no_cuda(n)),
    }
}

#[cfg(not(feature = "cuda"))]
fn no_cuda(n: usize) -> crate::Error {
    crate::Error::Eval(format!("device cuda:{n}: cotangent was built without the `cuda` cargo feature"))
}

/// A recording of the descriptors that reach the backends, for tests that check the seam: every
/// computation a primitive asks for arrives at the backends' `eval` as an [`Op`] for a device. Behind the
/// `test-hooks` feature; not part of the API.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod recording {
    use super::Device;
    use crate::primitive::Op;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    /// Whether a recording runs (kernels check it without locking).
    static ACTIVE: AtomicBool = AtomicBool::new(false);
    /// The descriptors seen while a recording runs: the device and the variant's name.
    static LOG: Mutex<Option<Vec<(Device, String)>>> = Mutex::new(None);
    /// Serialises recordings (tests run on several threads).
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    pub(crate) fn note(device: Device, op: &Op<'_>) {
        if !ACTIVE.load(Ordering::Acquire) {
            return;
        }
        let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(log) = log.as_mut() {
            let described = format!("{op:?}");
            let end = described.find(|c: char| !c.is_alphanumeric()).unwrap_or(described.len());
            log.push((device, described[..end].to_string()));
        }
    }

    /// Run `f`, returning its result and the descriptors (device, variant name such as `"Matmul"`
    /// or `"Unary"`) that reached a backend meanwhile, from any thread.
    pub fn record<R>(f: impl FnOnce() -> R) -> (R, Vec<(Device, String)>) {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        *LOG.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
        ACTIVE.store(true, Ordering::Release);
        let r = f();
        ACTIVE.store(false, Ordering::Release);
        let log = LOG.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default();
        (r, log)
    }
}
