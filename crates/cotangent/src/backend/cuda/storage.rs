//! Device arrays: a shared [`CudaBuffer`] plus the dtype, strides and offset of one view, the
//! device twin of the CPU's [`Data`] (views such as transposes, stride-0 broadcasts and slices
//! share the buffer), and host↔device transfers.
use super::alloc::CudaBuffer;
use super::device::CudaDevice;
use crate::backend::cpu::buffer::BufferElement;
use crate::backend::cpu::Data;
use crate::shape::{contiguous_strides, numel, Strides};
use crate::{DType, Result};
use cudarc::driver::result as dr;
use std::sync::Arc;

/// The computed value of one array on a CUDA device.
///
/// Invariant, as for the CPU's [`Data`]: for the shape it is used with, every element the view
/// addresses lies inside `buf`. The fields are private to the crate; from outside, views are made
/// only by [`CudaData::checked_view`].
#[derive(Debug, Clone)]
pub struct CudaData {
    /// The shared device buffer.
    pub(crate) buf: Arc<CudaBuffer>,
    /// Element type.
    pub(crate) dtype: DType,
    /// Strides in elements, one per axis.
    pub(crate) strides: Strides,
    /// Offset of element `[0, 0, ..]` in elements.
    pub(crate) offset: usize,
}

/// `Err` naming `what` unless every operand view lies inside its buffer for its shape (the
/// kernels' entry points check their operands, so that a view paired with the wrong shape is an
/// error instead of device accesses out of bounds).
pub(crate) fn check_views(what: &str, views: &[(&CudaData, &[usize])]) -> Result<()> {
    match views.iter().find(|(v, shape)| !v.lies_inside(shape)) {
        None => Ok(()),
        Some((v, shape)) => Err(v.device().error(format!(
            "{what}: internal error: a view of shape {shape:?}, strides {:?}, offset {} reaches outside its buffer of {} bytes",
            v.strides, v.offset, v.buf.len()
        ))),
    }
}

impl CudaData {
    /// The shared device buffer.
    pub fn buf(&self) -> &Arc<CudaBuffer> {
        &self.buf
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Strides in elements, one per axis.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    /// Offset of element `[0, 0, ..]`, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// The same buffer viewed with this shape, strides and offset, or `None` unless every
    /// element the view addresses lies inside the buffer.
    pub fn checked_view(&self, shape: &[usize], strides: &[isize], offset: usize) -> Option<CudaData> {
        let v = self.view(strides, offset);
        v.lies_inside(shape).then_some(v)
    }
    /// Whether every element this view addresses for `shape` (one stride per axis) lies inside
    /// its buffer. An empty shape addresses nothing.
    pub fn lies_inside(&self, shape: &[usize]) -> bool {
        let len = self.buf.len() / self.dtype.size_of();
        crate::shape::view_lies_inside(shape, &self.strides, self.offset, len)
    }
    /// A dense row-major view of a whole buffer.
    pub fn contiguous(buf: CudaBuffer, dtype: DType, shape: &[usize]) -> CudaData {
        CudaData { buf: Arc::new(buf), dtype, strides: contiguous_strides(shape), offset: 0 }
    }
    /// A new dense array with uninitialised contents.
    pub fn empty(dev: &Arc<CudaDevice>, dtype: DType, shape: &[usize]) -> Result<CudaData> {
        let bytes = numel(shape)
            .checked_mul(dtype.size_of())
            .ok_or_else(|| dev.error(format!("array of shape {shape:?} and dtype {dtype} is too large")))?;
        Ok(CudaData::contiguous(CudaBuffer::alloc(dev, bytes)?, dtype, shape))
    }
    /// A new dense array of zeros (all bits zero: `false`, `0`, `+0.0`).
    pub fn zeros(dev: &Arc<CudaDevice>, dtype: DType, shape: &[usize]) -> Result<CudaData> {
        let d = CudaData::empty(dev, dtype, shape)?;
        if !d.buf.is_empty() {
            dev.bind()?;
            // SAFETY: `ptr .. ptr + len` is the whole buffer just allocated on this device's
            // stream (at least `len` bytes), and the memset is queued on that stream.
            unsafe { dr::memset_d8_async(d.buf.ptr(), 0, d.buf.len(), dev.cu_stream()) }
                .map_err(|e| dev.error(format!("zeros {shape:?} {dtype}: {e}")))?;
        }
        Ok(d)
    }
    /// The device the data lives on.
    pub fn device(&self) -> &Arc<CudaDevice> {
        self.buf.device()
    }
    /// Whether the view is dense and row-major.
    pub fn is_contiguous(&self, shape: &[usize]) -> bool {
        crate::shape::is_contiguous(shape, &self.strides)
    }
    /// Device address of element `[0, 0, ..]`.
    pub fn ptr(&self) -> u64 {
        self.buf.ptr() + (self.offset * self.dtype.size_of()) as u64
    }
    /// The same buffer with other strides and offset (a view; no copy). The caller keeps the
    /// invariant (the shape ops check views when an op is built).
    pub(crate) fn view(&self, strides: &[isize], offset: usize) -> CudaData {
        CudaData { buf: self.buf.clone(), dtype: self.dtype, strides: strides.into(), offset }
    }

    /// Copy the elements of a host view (`data`, of `shape`) to a new dense array on `dev`.
    pub fn from_host(dev: &Arc<CudaDevice>, data: &Data, shape: &[usize]) -> Result<CudaData> {
        let dtype = data.buf.dtype();
        let out = CudaData::empty(dev, dtype, shape)?;
        if out.buf.is_empty() {
            return Ok(out);
        }
        dev.bind()?;
        let r = crate::dispatch_dtype!(dtype, T => upload::<T>(dev, &out, data, shape));
        r.map(|_| out)
    }

    /// [`from_host`](CudaData::from_host) for any host view, with one shortcut: single values
    /// (the 0-d arrays a Rust number becomes in `&x * 2.0`) are uploaded once per device, dtype
    /// and bit pattern and then shared, so an eager chain of ops on the GPU does not pay a
    /// host-to-device copy per constant. Sharing is safe because device arrays are never
    /// written in place.
    pub fn upload(dev: &Arc<CudaDevice>, data: &Data, shape: &[usize]) -> Result<CudaData> {
        use crate::dtype::Element;
        if numel(shape) != 1 {
            return CudaData::from_host(dev, data, shape);
        }
        let dtype = data.buf.dtype();
        let bits = crate::dispatch_dtype!(dtype, T => {
            let v = data.to_contiguous::<T>(shape)[0];
            if dtype.is_float() { v.to_f64().to_bits() } else { v.to_i64() as u64 }
        });
        type Key = (usize, DType, u64);
        static CACHE: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<Key, CudaData>>> =
            std::sync::OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        let key = (dev.ordinal(), dtype, bits);
        if let Some(d) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(CudaData { strides: contiguous_strides(shape), ..d });
        }
        let d = CudaData::from_host(dev, data, shape)?;
        if let Ok(mut c) = cache.lock() {
            if c.len() >= 4096 {
                c.clear(); // a bounded cache: constants of a program are few
            }
            c.insert(key, d.clone());
        }
        Ok(d)
    }

    /// Copy this array (of `shape`) to a dense host [`Data`], waiting for queued work first.
    /// Strided views are made contiguous on the device first.
    pub fn to_host(&self, shape: &[usize]) -> Result<Data> {
        let dense;
        let src = if self.is_contiguous(shape) {
            self
        } else {
            dense = super::elementwise::to_contiguous(self, shape)?;
            &dense
        };
        let dev = self.device();
        let n = numel(shape);
        dev.bind()?;
        crate::dispatch_dtype!(self.dtype, T => download::<T>(dev, src, n, shape))
    }
}

/// Host bytes one launch's parameter block carries (kernel parameters are limited to 4 KiB).
const PARAM_BYTES: usize = 4000;
/// Uploads up to this size travel in kernel parameters (see [`put_bytes`]).
const SMALL_UPLOAD_BYTES: usize = 64 << 10;

/// The by-value parameter of `ct_put_bytes`.
#[repr(C)]
struct ParamBytes {
    n: u32,
    bytes: [u8; PARAM_BYTES],
}

/// Write `bytes` to device memory at `dst` through the parameters of kernel launches, queued on
/// the device's stream like any kernel. A copy from pageable host memory may wait for the
/// stream to drain; a program that uploads small constants between kernels (masks, a chunk's
/// triangular matrices) would then stall the GPU at every upload. Launch parameters are copied
/// when the launch is queued, so this never waits.
fn put_bytes(dev: &Arc<CudaDevice>, dst: u64, bytes: &[u8]) -> Result<()> {
    let k = dev.kernel("ct_put_bytes", "ct_put_bytes", || {
        format!(
            "struct ct_bytes {{ unsigned int n; unsigned char b[{PARAM_BYTES}]; }};\n\
             extern \"C\" __global__ void ct_put_bytes(unsigned char* __restrict__ out, ct_bytes p) {{\n  \
             for (unsigned int i = threadIdx.x; i < p.n; i += blockDim.x) out[i] = p.b[i];\n}}\n"
        )
    })?;
    for (j, piece) in bytes.chunks(PARAM_BYTES).enumerate() {
        let mut block = ParamBytes { n: piece.len() as u32, bytes: [0; PARAM_BYTES] };
        block.bytes[..piece.len()].copy_from_slice(piece);
        let mut ptr = dst + (j * PARAM_BYTES) as u64;
        let mut params =
            [&mut ptr as *mut u64 as *mut std::ffi::c_void, &mut block as *mut ParamBytes as *mut std::ffi::c_void];
        // SAFETY: `ct_put_bytes` takes (unsigned char*, ct_bytes), the `#[repr(C)]` `ParamBytes`;
        // `dst` is a live buffer of at least `bytes.len()` bytes, so each piece's `n` bytes fit.
        unsafe { dev.launch(k, 1, 256, 0, &mut params) }?;
    }
    Ok(())
}

fn upload<T: BufferElement>(dev: &Arc<CudaDevice>, out: &CudaData, data: &Data, shape: &[usize]) -> Result<()> {
    let host = data.to_contiguous::<T>(shape);
    if T::DTYPE.is_int() {
        // indices from the host (labels, token ids) are then known to be in range without a
        // device-side check whose result the host would have to wait for
        let (lo, hi) = host.iter().fold((i64::MAX, i64::MIN), |(lo, hi), v| {
            let v = v.to_i64();
            (lo.min(v), hi.max(v))
        });
        out.buf.set_int_range(T::DTYPE, lo, hi);
    }
    let size = std::mem::size_of_val(&host[..]);
    if size <= SMALL_UPLOAD_BYTES {
        // the bytes travel as a kernel parameter: a graph capture records them by value
        // SAFETY: buffer elements are plain numbers (bool is one byte of 0 or 1) without padding:
        // `size` bytes from the start of `host` are initialised and live for the call.
        let bytes = unsafe { std::slice::from_raw_parts(host.as_ptr() as *const u8, size) };
        return put_bytes(dev, out.buf.ptr(), bytes);
    }
    if super::capture::capturing(dev.ordinal()) {
        return Err(dev.error(format!("copying {shape:?} {} from the host inside a graph capture", T::DTYPE)));
    }
    // SAFETY: the destination is the dense buffer just made for `numel(shape)` elements of this
    // dtype, and `host` holds exactly `numel(shape)` `T`s of that size. `host` is pageable memory
    // (a Rust vector or slice), and a copy from pageable memory returns only once the source has
    // been read into the driver's staging buffer, so `host` may drop afterwards.
    unsafe { dr::memcpy_htod_async(out.buf.ptr(), &host[..], dev.cu_stream()) }
        .map_err(|e| dev.error(format!("host to device copy of {shape:?} {}: {e}", T::DTYPE)))
}

fn download<T: BufferElement>(dev: &Arc<CudaDevice>, src: &CudaData, n: usize, shape: &[usize]) -> Result<Data> {
    if T::DTYPE == DType::Bool {
        // read bytes, then make bools (never transmute device bytes into `bool`)
        let mut bytes = vec![0u8; n];
        copy_down(dev, src, &mut bytes, shape)?;
        return Ok(Data::from_vec(bytes.into_iter().map(|b| b != 0).collect::<Vec<bool>>(), shape));
    }
    let mut v = vec![T::default(); n];
    copy_down(dev, src, &mut v, shape)?;
    Ok(Data::from_vec(v, shape))
}

fn copy_down<U: Copy>(dev: &Arc<CudaDevice>, src: &CudaData, dst: &mut [U], shape: &[usize]) -> Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    if super::capture::capturing(dev.ordinal()) {
        // nothing has run yet inside a capture: there is nothing to read
        return Err(dev.error(format!("reading {shape:?} {} back to the host inside a graph capture", src.dtype)));
    }
    // SAFETY: `src` is a dense view of `dst.len()` elements of `U`'s size (bools are read as
    // `u8`, never as `bool`), inside its buffer. `dst` is pageable memory (a Rust vector), and a
    // device-to-pageable copy returns only when the data has landed, so `dst` is never written
    // after this call (the synchronise after it reports errors of earlier kernels).
    unsafe { dr::memcpy_dtoh_async(dst, src.ptr(), dev.cu_stream()) }
        .map_err(|e| dev.error(format!("device to host copy of {shape:?} {}: {e}", src.dtype)))?;
    dev.synchronize()
}
