//! CUDA graph capture of compiled replays.
//!
//! A compiled function's replay launches one kernel (or cuBLAS call) per step, and on a GPU each
//! launch costs the host 3–5 µs, so a replay of small kernels is bound by the host: the GPU
//! finishes each kernel before the next one is queued. `compile` therefore records a program's
//! replay once as a CUDA graph ([`CapturedGraph`]) and relaunches that graph, one driver call,
//! on later calls with the same signature.
//!
//! What keeps a relaunch correct:
//! * **Fixed addresses.** A graph replays the pointers it was captured with. The captured run
//!   reads its inputs from static buffers the graph owns; each launch first copies the caller's
//!   arrays into them and afterwards copies the graph's outputs into new buffers for the caller,
//!   all on the device's stream.
//! * **Graph-owned memory.** Every buffer allocated while capturing belongs to the capture's
//!   [`Arena`]: when it drops (during the capture) its block may be handed to a later allocation
//!   of the same capture, whose kernels the graph orders after it, and to nothing else. The
//!   arena returns its blocks to the device's cache when the graph and its buffers are gone.
//! * **A private stream, this thread only.** The capture records its own stream: launches,
//!   memsets and cuBLAS calls of the capturing thread go there (`CudaDevice::cu_stream` answers
//!   per thread), while other threads keep queueing on the device's stream, so their work is
//!   never swallowed by the capture. Allocation misses are served on the device's stream.
//! * **What a graph cannot hold fails the capture.** Reading device memory back to the host (an
//!   index check, a host fallback) or copying host memory to the device is an `Err` while
//!   capturing, and the caller replays the program plainly instead.
//! * **Index ranges.** A gather or scatter whose indices are known in range (uploaded from the
//!   host, `CudaBuffer::int_range`) runs without a device-side check. The capture records which
//!   static inputs it relied on and for which extent; a launch whose arrays do not carry such a
//!   range inside that extent is refused ([`CapturedGraph::launch`] returns `None`) and the
//!   caller replays plainly, with the checks.
//!
//! `COTANGENT_CUDA_GRAPHS=0` turns capture off (every call replays step by step).
use super::alloc::CudaBuffer;
use super::device::CudaDevice;
use super::storage::CudaData;
use crate::{DType, Result};
use cudarc::driver::{result as dr, sys, CudaGraph, CudaStream};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Launches of captured graphs since the process started (a compiled call that ran as one
/// graph adds one). Benchmarks and tests read it to see whether calls took the graph path.
pub static GRAPH_LAUNCHES: AtomicUsize = AtomicUsize::new(0);

/// Whether compiled replays on CUDA may be captured as graphs: unless the environment sets
/// `COTANGENT_CUDA_GRAPHS=0`.
pub fn graphs_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("COTANGENT_CUDA_GRAPHS").map_or(true, |v| v.trim() != "0"))
}

/// The device memory of one captured graph: blocks of buffers allocated while capturing, kept
/// for the graph after their buffers drop.
pub(crate) struct Arena {
    dev: Arc<CudaDevice>,
    /// `(bucket, pointer)` of blocks whose buffers have dropped.
    blocks: Mutex<Vec<(usize, sys::CUdeviceptr)>>,
}

impl Arena {
    /// A block of `bucket` bytes dropped earlier in this capture, if any.
    pub(crate) fn pop(&self, bucket: usize) -> Option<sys::CUdeviceptr> {
        let mut blocks = self.blocks.lock().ok()?;
        let at = blocks.iter().position(|b| b.0 == bucket)?;
        Some(blocks.swap_remove(at).1)
    }

    /// Keep the block of a dropped buffer for the graph.
    pub(crate) fn keep(&self, bucket: usize, ptr: sys::CUdeviceptr) {
        if let Ok(mut blocks) = self.blocks.lock() {
            blocks.push((bucket, ptr));
        }
        // A poisoned lock leaks the block rather than panicking in a destructor.
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let blocks = std::mem::take(self.blocks.get_mut().unwrap_or_else(|e| e.into_inner()));
        for (bucket, ptr) in blocks {
            self.dev.alloc.release(bucket, ptr);
        }
    }
}

/// `(buffer, dtype, extent)`: a captured kernel trusted the indices in `buffer` to lie in
/// `-extent..extent`.
type IndexBound = (sys::CUdeviceptr, DType, i64);

/// The capture running on this thread.
struct Active {
    ordinal: usize,
    arena: Arc<Arena>,
    index_bounds: Vec<IndexBound>,
}

thread_local! {
    static ACTIVE: RefCell<Option<Active>> = const { RefCell::new(None) };
    /// The capture stream of this thread: `(device ordinal, stream)`, or `usize::MAX` for none.
    /// Kept apart from `ACTIVE` so the launch path reads one `Cell`.
    static STREAM: Cell<(usize, sys::CUstream)> = const { Cell::new((usize::MAX, std::ptr::null_mut())) };
}

/// The stream this thread's work for device `ordinal` is recorded on while it captures.
pub(crate) fn stream_override(ordinal: usize) -> Option<sys::CUstream> {
    let (o, stream) = STREAM.with(Cell::get);
    (o == ordinal).then_some(stream)
}

/// Whether this thread is capturing work of device `ordinal`.
pub(crate) fn capturing(ordinal: usize) -> bool {
    stream_override(ordinal).is_some()
}

/// Whether this thread is capturing work of any device.
pub(crate) fn capturing_any() -> bool {
    STREAM.with(Cell::get).0 != usize::MAX
}

/// The arena of the capture of device `ordinal` this thread runs, if any.
pub(crate) fn arena(ordinal: usize) -> Option<Arc<Arena>> {
    if !capturing(ordinal) {
        return None;
    }
    ACTIVE.with(|a| a.borrow().as_ref().filter(|a| a.ordinal == ordinal).map(|a| a.arena.clone()))
}

/// Record that a kernel being captured trusted the indices in `buf` (read as `dtype`) to lie
/// in `-extent..extent` without checking them.
pub(crate) fn note_index_bound(ordinal: usize, buf: sys::CUdeviceptr, dtype: DType, extent: i64) {
    if capturing(ordinal) {
        ACTIVE.with(|a| {
            if let Some(a) = a.borrow_mut().as_mut() {
                a.index_bounds.push((buf, dtype, extent));
            }
        });
    }
}

/// Ends this thread's capture however the capturing code leaves (error or panic): the stream
/// leaves capture mode and the thread's launches go to the device's stream again.
struct CaptureGuard {
    stream: Arc<CudaStream>,
    ended: bool,
}

impl CaptureGuard {
    fn begin(dev: &Arc<CudaDevice>, stream: Arc<CudaStream>, arena: Arc<Arena>) -> Result<CaptureGuard> {
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(|e| dev.error(format!("beginning a graph capture: {e}")))?;
        ACTIVE.with(|a| *a.borrow_mut() = Some(Active { ordinal: dev.ordinal(), arena, index_bounds: Vec::new() }));
        STREAM.with(|s| s.set((dev.ordinal(), stream.cu_stream())));
        Ok(CaptureGuard { stream, ended: false })
    }

    /// Stop capturing; the graph (instantiated) and the index bounds the kernels trusted.
    fn end(mut self, dev: &CudaDevice) -> Result<(CudaGraph, Vec<IndexBound>)> {
        let bounds = self.leave();
        let graph = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(|e| dev.error(format!("ending a graph capture: {e}")))?
            .ok_or_else(|| dev.error("a graph capture recorded nothing"))?;
        Ok((graph, bounds))
    }

    fn leave(&mut self) -> Vec<IndexBound> {
        self.ended = true;
        STREAM.with(|s| s.set((usize::MAX, std::ptr::null_mut())));
        ACTIVE.with(|a| a.borrow_mut().take()).map(|a| a.index_bounds).unwrap_or_default()
    }
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        if !self.ended {
            self.leave();
            // an invalidated or unfinished capture: end it and discard what it recorded
            let _ = self.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        }
    }
}

/// An instantiated graph. cudarc's `CudaGraph` is not `Send`: its handles are raw pointers.
struct Exec(CudaGraph);
// SAFETY: the graph's handles are driver objects usable from any thread whose current context is
// the graph's (every use binds the device's context first); the driver requires calls on one
// graph to be serialised, which the `Mutex` around `Exec` in `CapturedGraph` does.
unsafe impl Send for Exec {}

/// A compiled replay captured as a CUDA graph, with the static buffers it reads and writes.
pub(crate) struct CapturedGraph {
    dev: Arc<CudaDevice>,
    exec: Mutex<Exec>,
    /// Static input buffers (dense) and their shapes.
    inputs: Vec<(CudaData, Vec<usize>)>,
    /// The graph's outputs, rewritten by every launch.
    outputs: Vec<CudaData>,
    /// `(input, dtype, extent)`: input `input` was trusted to hold indices in `-extent..extent`.
    index_bounds: Vec<(usize, DType, i64)>,
}

/// The byte length of a dense array of `shape` and `dtype`.
fn dense_bytes(shape: &[usize], dtype: DType) -> usize {
    crate::shape::numel(shape) * dtype.size_of()
}

impl CapturedGraph {
    /// Capture `run` on static copies of `args` (computed, dense, on `dev`). `run` builds and
    /// evaluates the program on the arrays it is given and returns its outputs. Nothing runs on
    /// the GPU during the capture: launch the result to compute this call's values.
    pub(crate) fn capture(
        dev: &Arc<CudaDevice>,
        args: &[(CudaData, Vec<usize>)],
        run: impl FnOnce(&[crate::Array]) -> Result<Vec<crate::Array>>,
    ) -> Result<CapturedGraph> {
        if capturing_any() {
            return Err(dev.error("a graph capture inside another one"));
        }
        let mut inputs = Vec::with_capacity(args.len());
        let mut copies = Vec::with_capacity(args.len());
        for (a, shape) in args {
            let s = CudaData::empty(dev, a.dtype, shape)?;
            if let Some((lo, hi)) = a.buf.int_range(a.dtype) {
                s.buf.set_int_range(a.dtype, lo, hi);
            }
            copies.push((s.ptr(), a.ptr(), dense_bytes(shape, a.dtype)));
            inputs.push((s, shape.clone()));
        }
        // the same batched copy as every launch's (the arguments are dense, checked by the caller)
        copy_many(dev, &copies)?;
        let stream = dev.new_stream()?;
        let arena = Arc::new(Arena { dev: dev.clone(), blocks: Mutex::new(Vec::new()) });
        let guard = CaptureGuard::begin(dev, stream, arena)?;
        let leaves: Vec<crate::Array> = inputs
            .iter()
            .map(|(s, shape)| crate::Array::from_storage(crate::backend::Storage::Cuda(s.clone()), shape, s.dtype))
            .collect();
        let outs = run(&leaves);
        drop(leaves);
        let (graph, bounds) = guard.end(dev)?;
        let outputs = outs?
            .iter()
            .map(|o| match o.computed_storage()? {
                crate::backend::Storage::Cuda(d) if Arc::ptr_eq(d.device(), dev) => Ok(d.clone()),
                _ => Err(dev.error("a captured program returned an array of another device")),
            })
            .collect::<Result<Vec<CudaData>>>()?;
        let mut index_bounds = Vec::new();
        for (ptr, dtype, extent) in bounds {
            // buffers other than the static inputs whose range was known are constants
            if let Some(k) = inputs.iter().position(|(s, _)| s.buf.ptr() == ptr) {
                index_bounds.push((k, dtype, extent));
            }
        }
        dev.bind()?;
        // SAFETY: the graph was instantiated on this device's context, bound just above.
        unsafe { dr::graph::upload(graph.cu_graph_exec(), dev.main_stream()) }
            .map_err(|e| dev.error(format!("uploading a graph: {e}")))?;
        Ok(CapturedGraph { dev: dev.clone(), exec: Mutex::new(Exec(graph)), inputs, outputs, index_bounds })
    }

    /// Run the graph on `args` (computed arrays with their shapes) and return new arrays with
    /// its outputs, or `None` when the graph cannot take these arrays (a view that is not
    /// dense, another device, or indices not known to lie in the range the capture trusted):
    /// the caller then replays the program step by step.
    pub(crate) fn launch(&self, args: &[(CudaData, Vec<usize>)]) -> Result<Option<Vec<CudaData>>> {
        let fits = args.len() == self.inputs.len()
            && args.iter().zip(&self.inputs).all(|((a, shape), (s, static_shape))| {
                a.dtype == s.dtype
                    && shape == static_shape
                    && a.is_contiguous(shape)
                    && Arc::ptr_eq(a.device(), &self.dev)
            })
            && self.index_bounds.iter().all(|&(k, dtype, n)| {
                let a = &args[k].0;
                a.dtype == dtype && a.buf.int_range(dtype).is_some_and(|(lo, hi)| lo >= -n && hi < n)
            });
        if !fits {
            return Ok(None);
        }
        let exec = self.exec.lock().map_err(|_| self.dev.error("a captured graph's lock is poisoned"))?;
        self.dev.bind()?;
        let copies_in: Vec<(u64, u64, usize)> = args
            .iter()
            .zip(&self.inputs)
            .map(|((a, shape), (s, _))| (s.ptr(), a.ptr(), dense_bytes(shape, a.dtype)))
            .collect();
        copy_many(&self.dev, &copies_in)?;
        // SAFETY: the graph was instantiated on this device's context (bound above) and is
        // launched under its lock. Every address it holds stays valid: the static inputs and
        // outputs are owned by `self`, every other buffer it wrote during the capture by its
        // arena (kept alive by those buffers and `self`), constants by the compiled program,
        // which owns `self`.
        unsafe { dr::graph::launch(exec.0.cu_graph_exec(), self.dev.main_stream()) }
            .map_err(|e| self.dev.error(format!("launching a captured graph: {e}")))?;
        let mut outs = Vec::with_capacity(self.outputs.len());
        let mut copies_out = Vec::with_capacity(self.outputs.len());
        for o in &self.outputs {
            let buf = CudaBuffer::alloc(&self.dev, o.buf.len())?;
            copies_out.push((buf.ptr(), o.buf.ptr(), o.buf.len()));
            outs.push(CudaData { buf: Arc::new(buf), dtype: o.dtype, strides: o.strides.clone(), offset: o.offset });
        }
        // queued after the graph that writes the outputs, into buffers just allocated for them
        copy_many(&self.dev, &copies_out)?;
        drop(exec);
        GRAPH_LAUNCHES.fetch_add(1, Ordering::Relaxed);
        Ok(Some(outs))
    }
}

/// The most copies one [`copy_many`] launch carries (its parameter block: 4 + 24 per copy bytes).
const COPIES_PER_LAUNCH: usize = 64;

/// The source of `ct_copy_many`: block `b` copies piece `b / per_piece` in a loop over the
/// piece's blocks, 16 bytes per thread and step where both ends are 16-byte aligned (8 where
/// they are 8-byte aligned), the tail byte by byte.
fn copy_many_source() -> String {
    format!(
        r#"
struct ct_copies {{ unsigned int n; unsigned int per_piece; unsigned long long dst[{k}]; unsigned long long src[{k}]; unsigned long long bytes[{k}]; }};
extern "C" __global__ void ct_copy_many(ct_copies c) {{
  unsigned int p = blockIdx.x / c.per_piece;
  if (p >= c.n) return;
  unsigned long long first = (unsigned long long)(blockIdx.x % c.per_piece) * blockDim.x + threadIdx.x;
  unsigned long long step = (unsigned long long)c.per_piece * blockDim.x;
  unsigned long long n = c.bytes[p], done = 0;
  unsigned char* d = (unsigned char*)c.dst[p];
  const unsigned char* s = (const unsigned char*)c.src[p];
  unsigned long long align = c.dst[p] | c.src[p];
  if ((align & 15) == 0) {{
    unsigned long long units = n / 16;
    for (unsigned long long i = first; i < units; i += step) ((uint4*)d)[i] = ((const uint4*)s)[i];
    done = units * 16;
  }} else if ((align & 7) == 0) {{
    unsigned long long units = n / 8;
    for (unsigned long long i = first; i < units; i += step) ((unsigned long long*)d)[i] = ((const unsigned long long*)s)[i];
    done = units * 8;
  }}
  for (unsigned long long i = done + first; i < n; i += step) d[i] = s[i];
}}
"#,
        k = COPIES_PER_LAUNCH
    )
}

/// The copy kernel's source, for compile checks: `(name, source)`.
pub fn all_sources() -> Vec<(String, String)> {
    vec![("ct_copy_many".to_string(), copy_many_source())]
}

/// The parameter block of `ct_copy_many` (laid out as its C struct).
#[repr(C)]
struct Copies {
    n: u32,
    per_piece: u32,
    dst: [u64; COPIES_PER_LAUNCH],
    src: [u64; COPIES_PER_LAUNCH],
    bytes: [u64; COPIES_PER_LAUNCH],
}

/// Queue the copies `(dst, src, bytes)` between live device buffers of `dev` on its stream, in
/// one kernel launch per [`COPIES_PER_LAUNCH`] copies (a graph launch copies its arguments in
/// and its outputs out: one launch each instead of one driver call per array).
fn copy_many(dev: &CudaDevice, copies: &[(u64, u64, usize)]) -> Result<()> {
    let k = dev.kernel("ct_copy_many", "ct_copy_many", copy_many_source)?;
    for chunk in copies.chunks(COPIES_PER_LAUNCH) {
        let mut c = Copies {
            n: 0,
            per_piece: 1,
            dst: [0; COPIES_PER_LAUNCH],
            src: [0; COPIES_PER_LAUNCH],
            bytes: [0; COPIES_PER_LAUNCH],
        };
        let mut largest = 0usize;
        for &(dst, src, bytes) in chunk.iter().filter(|c| c.2 > 0) {
            let i = c.n as usize;
            (c.dst[i], c.src[i], c.bytes[i]) = (dst, src, bytes as u64);
            c.n += 1;
            largest = largest.max(bytes);
        }
        if c.n == 0 {
            continue;
        }
        // blocks enough for the largest piece at about four 16-byte steps a thread
        c.per_piece = (largest.div_ceil(4 * 16 * 256)).clamp(1, 1024) as u32;
        let mut params = [&mut c as *mut Copies as *mut std::ffi::c_void];
        // SAFETY: `ct_copy_many` takes one `ct_copies`, laid out as `Copies` (`#[repr(C)]`,
        // same field order and types, no padding: 4 + 4 bytes, then 8-byte arrays). Each of the
        // `n` pieces copies `bytes` bytes between live buffers of this device that hold them
        // (the callers' guarantee), queued on the device's stream after the work that wrote them.
        unsafe { dev.launch(k, c.n * c.per_piece, 256, 0, &mut params) }?;
    }
    Ok(())
}
