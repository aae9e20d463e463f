//! Typed host buffers and the strided view of one array over a buffer.
use super::host_cache;
use crate::dtype::{DType, Element};
use crate::shape::{contiguous_strides, Strides};
use crate::Result;
use half::{bf16, f16};
use std::sync::{Arc, OnceLock};

// ----- fallible allocation ------------------------------------------------------------------
//
// Every kernel output buffer is allocated here (or through `elementwise::new_vec_with`, which
// calls `try_with_capacity`), fallibly: a buffer that cannot be had becomes an
// `Error::OutOfMemory` returned by `eval`, instead of the process aborting in `vec!`.

/// Buffers at least this large are also checked against [`memory_limit`] (smaller ones only
/// by the allocator).
const LIMIT_CHECK_BYTES: usize = 1 << 30;

/// The size no single buffer may reach: the machine's RAM plus swap where the OS says (Linux,
/// `/proc/meminfo`), else unlimited.
///
/// A buffer that large can never be filled, but with memory overcommit (Linux's
/// `vm.overcommit_memory = 1`) the allocator hands it out anyway and the process is killed
/// when the kernel touches the pages. Checking first turns that into an `Err`.
pub fn memory_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let Ok(info) = std::fs::read_to_string("/proc/meminfo") else { return usize::MAX };
        let kib = |key: &str| -> Option<usize> {
            let line = info.lines().find(|l| l.starts_with(key))?;
            line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
        };
        match (kib("MemTotal:"), kib("SwapTotal:")) {
            (Some(m), s) => m.saturating_add(s.unwrap_or(0)).saturating_mul(1024),
            _ => usize::MAX,
        }
    })
}

/// An empty vector with room for exactly `len` elements, or
/// [`Error::OutOfMemory`](crate::Error::OutOfMemory) when the memory cannot be had: more than
/// [`memory_limit`], or refused by the allocator.
#[inline]
pub fn try_with_capacity<T: BufferElement>(len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    if bytes >= LIMIT_CHECK_BYTES && bytes > memory_limit() {
        return Err(crate::Error::alloc_failed(bytes, T::DTYPE));
    }
    // Cached sizes are allocated whole (see `host_cache`), so the buffer can be cached when it
    // drops; a refused allocation is retried once after the cache is freed.
    let cap = match host_cache::bucket(bytes) {
        Some(b) if std::mem::size_of::<T>() > 0 => {
            if let Some(v) = host_cache::take::<T>(b) {
                return Ok(v);
            }
            b / std::mem::size_of::<T>()
        }
        _ => len,
    };
    if v.try_reserve_exact(cap).is_err() {
        host_cache::clear();
        v.try_reserve_exact(cap).map_err(|_| crate::Error::alloc_failed(bytes, T::DTYPE))?;
    }
    Ok(v)
}

/// `len` copies of `x` (fallible `vec![x; len]`, see [`try_with_capacity`]).
#[inline]
pub fn try_filled<T: BufferElement>(x: T, len: usize) -> Result<Vec<T>> {
    let mut v = try_with_capacity(len)?;
    v.resize(len, x);
    Ok(v)
}

/// A copy of `src` (fallible `src.to_vec()`, see [`try_with_capacity`]).
#[inline]
pub fn try_to_vec<T: BufferElement>(src: &[T]) -> Result<Vec<T>> {
    let mut v = try_with_capacity(src.len())?;
    v.extend_from_slice(src);
    Ok(v)
}

/// A typed, contiguous host buffer.
#[derive(Debug, Clone)]
pub enum Buffer {
    /// `bool` elements.
    Bool(Vec<bool>),
    /// `u8` elements.
    U8(Vec<u8>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f16` elements.
    F16(Vec<f16>),
    /// `bf16` elements.
    BF16(Vec<bf16>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f64` elements.
    F64(Vec<f64>),
}

/// Conversion between typed vectors and `Buffer`s; implemented for every [`Element`].
pub trait BufferElement: Element {
    /// Wrap a vector.
    fn into_buffer(v: Vec<Self>) -> Buffer;
    /// Borrow the elements if the buffer holds this type.
    fn slice(b: &Buffer) -> Option<&[Self]>;
    /// Take the vector back if the buffer holds this type.
    fn take(b: Buffer) -> Option<Vec<Self>>;
    /// Borrow the elements mutably if the buffer holds this type.
    fn slice_mut(b: &mut Buffer) -> Option<&mut [Self]>;
    /// Borrow the vector itself if the buffer holds this type.
    fn vec_mut(b: &mut Buffer) -> Option<&mut Vec<Self>>;
}

macro_rules! impl_buffer_element {
    ($($t:ty => $v:ident),*) => {$(
        impl BufferElement for $t {
            #[inline] fn into_buffer(v: Vec<Self>) -> Buffer { Buffer::$v(v) }
            #[inline] fn slice(b: &Buffer) -> Option<&[Self]> {
                if let Buffer::$v(v) = b { Some(v) } else { None }
            }
            #[inline] fn take(mut b: Buffer) -> Option<Vec<Self>> {
                if let Buffer::$v(v) = &mut b { Some(std::mem::take(v)) } else { None }
            }
            #[inline] fn slice_mut(b: &mut Buffer) -> Option<&mut [Self]> {
                if let Buffer::$v(v) = b { Some(v) } else { None }
            }
            #[inline] fn vec_mut(b: &mut Buffer) -> Option<&mut Vec<Self>> {
                if let Buffer::$v(v) = b { Some(v) } else { None }
            }
        }
    )*};
}
impl_buffer_element!(bool => Bool, u8 => U8, u32 => U32, i32 => I32, i64 => I64,
    f16 => F16, bf16 => BF16, f32 => F32, f64 => F64);

/// A dropped buffer's memory goes to the host buffer cache (`host_cache`) when it has a cached
/// size, for the next buffer of that size.
impl Drop for Buffer {
    fn drop(&mut self) {
        crate::dispatch_dtype!(self.dtype(), T => {
            if let Some(v) = T::vec_mut(self) {
                host_cache::give(std::mem::take(v));
            }
        })
    }
}

impl Buffer {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::Bool(_) => DType::Bool,
            Buffer::U8(_) => DType::U8,
            Buffer::U32(_) => DType::U32,
            Buffer::I32(_) => DType::I32,
            Buffer::I64(_) => DType::I64,
            Buffer::F16(_) => DType::F16,
            Buffer::BF16(_) => DType::BF16,
            Buffer::F32(_) => DType::F32,
            Buffer::F64(_) => DType::F64,
        }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        crate::dispatch_dtype!(self.dtype(), T => T::slice(self).unwrap().len())
    }
    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Typed view of the elements; panics on a dtype mismatch (an internal error).
    #[inline]
    pub fn as_slice<T: BufferElement>(&self) -> &[T] {
        T::slice(self)
            .unwrap_or_else(|| panic!("cotangent internal error: buffer of {} read as {}", self.dtype(), T::DTYPE))
    }
    /// A buffer of `n` copies of `v`, or [`crate::Error::OutOfMemory`].
    pub fn filled<T: BufferElement>(v: T, n: usize) -> Result<Buffer> {
        Ok(T::into_buffer(try_filled(v, n)?))
    }
}

/// The computed value of one array: a shared buffer plus the strides and offset of the view.
///
/// Invariant: for the shape it is used with, every element the view addresses
/// (`offset + Σ index·stride`) lies inside `buf`. The fields are private to the crate, where
/// only the code that builds views (the shape ops, checked when an op is built) makes them;
/// [`Data::view`] builds one from outside only after checking it. Kernels index through checked
/// slices, and the `gemm` calls of [`super::matmul`], which read operands through raw pointers,
/// check [`Data::lies_inside`] first, so a view paired with the wrong shape panics instead of
/// reading out of bounds.
#[derive(Debug, Clone)]
pub struct Data {
    /// The shared buffer.
    pub(crate) buf: Arc<Buffer>,
    /// Strides in elements, one per axis of the array.
    pub(crate) strides: Strides,
    /// Offset of element `[0, 0, ..]` in the buffer.
    pub(crate) offset: usize,
}

/// Views and their parts for the test hooks (tests build views the kernels must handle).
#[cfg(feature = "test-hooks")]
impl Data {
    /// A strided view of `buf` with this shape, strides and offset, or `None` unless every
    /// element it addresses lies inside the buffer (see [`Data::lies_inside`]).
    pub fn view(buf: Arc<Buffer>, shape: &[usize], strides: &[isize], offset: usize) -> Option<Data> {
        let d = Data { buf, strides: strides.into(), offset };
        (strides.len() == shape.len() && d.lies_inside(shape)).then_some(d)
    }
    /// The shared buffer.
    pub fn buf(&self) -> &Arc<Buffer> {
        &self.buf
    }
    /// Strides in elements, one per axis.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    /// Offset of element `[0, 0, ..]` in the buffer, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

impl Data {
    /// Whether every element this view addresses for `shape` (`offset + Σ index·stride`, with
    /// one stride per axis) lies inside its buffer. An empty shape addresses nothing.
    pub fn lies_inside(&self, shape: &[usize]) -> bool {
        crate::shape::view_lies_inside(shape, &self.strides, self.offset, self.buf.len())
    }
    /// A dense row-major view of a whole buffer with the given shape.
    pub fn contiguous(buf: Buffer, shape: &[usize]) -> Data {
        Data { buf: Arc::new(buf), strides: contiguous_strides(shape), offset: 0 }
    }
    /// A dense view of a typed vector.
    pub fn from_vec<T: BufferElement>(v: Vec<T>, shape: &[usize]) -> Data {
        Data::contiguous(T::into_buffer(v), shape)
    }
    /// Whether the view is dense and row-major.
    pub fn is_contiguous(&self, shape: &[usize]) -> bool {
        crate::shape::is_contiguous(shape, &self.strides)
    }
    /// The elements of a contiguous view as a slice, or `None` when the view is strided.
    pub fn contiguous_slice<T: BufferElement>(&self, shape: &[usize]) -> Option<&[T]> {
        if self.is_contiguous(shape) {
            let n = crate::shape::numel(shape);
            Some(&self.buf.as_slice::<T>()[self.offset..self.offset + n])
        } else {
            None
        }
    }
    /// The elements in row-major order, copied only when the view is strided.
    ///
    /// # Panics
    /// If the copy cannot be allocated (reading data for the user; kernels use
    /// [`Data::try_to_contiguous`]).
    pub fn to_contiguous<T: BufferElement>(&self, shape: &[usize]) -> std::borrow::Cow<'_, [T]> {
        self.try_to_contiguous(shape).unwrap_or_else(|e| panic!("cotangent: {e}"))
    }
    /// The elements in row-major order as an owned vector, or [`crate::Error::OutOfMemory`].
    pub fn try_to_vec<T: BufferElement>(&self, shape: &[usize]) -> Result<Vec<T>> {
        match self.try_to_contiguous(shape)? {
            std::borrow::Cow::Borrowed(s) => try_to_vec(s),
            std::borrow::Cow::Owned(v) => Ok(v),
        }
    }
    /// [`Data::to_contiguous`] whose copy is allocated fallibly ([`crate::Error::OutOfMemory`]).
    pub fn try_to_contiguous<T: BufferElement>(&self, shape: &[usize]) -> Result<std::borrow::Cow<'_, [T]>> {
        if let Some(s) = self.contiguous_slice(shape) {
            return Ok(std::borrow::Cow::Borrowed(s));
        }
        let src = self.buf.as_slice::<T>();
        let nd = shape.len();
        if nd >= 2 && self.strides[nd - 2] == 1 && self.strides[nd - 1] > 1 && shape[nd - 2] > 1 && !shape.contains(&0)
        {
            return Ok(std::borrow::Cow::Owned(self.transposed_to_contiguous(shape)?));
        }
        let mut out = try_with_capacity(crate::shape::numel(shape))?;
        super::strided::for_each_row(shape, [&self.strides], [self.offset as isize], |[o], n, [s]| {
            if s == 1 {
                out.extend_from_slice(&src[o as usize..o as usize + n]);
            } else {
                for i in 0..n as isize {
                    out.push(src[(o + i * s) as usize]);
                }
            }
        });
        Ok(std::borrow::Cow::Owned(out))
    }
    /// [`Data::to_contiguous`] of a view whose last two axes are transposed (the second-to-last
    /// has stride 1, the last a larger positive one), copied by [`super::transpose`] (square
    /// tiles, in registers where the CPU allows). Bands of output rows are copied in parallel
    /// for large matrices.
    fn transposed_to_contiguous<T: BufferElement>(&self, shape: &[usize]) -> Result<Vec<T>> {
        use rayon::prelude::*;
        const TILE: usize = 16;
        let nd = shape.len();
        let (rows, cols) = (shape[nd - 2], shape[nd - 1]);
        let col_stride = self.strides[nd - 1] as usize;
        let src = self.buf.as_slice::<T>();
        let total = crate::shape::numel(shape);
        let mut out: Vec<T> = try_with_capacity(total)?;
        let dst = &mut out.spare_capacity_mut()[..total];
        let mut start = 0;
        let mut one_matrix = |base: isize| {
            let dst = &mut dst[start..start + rows * cols];
            // Every source index read below lies in `base ..= last` (both strides positive).
            let last = base + (rows - 1) as isize + ((cols - 1) * col_stride) as isize;
            assert!(base >= 0 && (last as usize) < src.len(), "view inside its buffer");
            let src = &src[base as usize..=last as usize];
            // Output rows `i0 .. i0 + band.len() / cols`: element (i, j) is source `i + j * col_stride`.
            let copy_band = |(b, band): (usize, &mut [std::mem::MaybeUninit<T>])| {
                let i0 = b * TILE;
                super::transpose::transpose_into(&src[i0..], col_stride, band.len() / cols, cols, band);
            };
            if rows * cols >= super::elementwise::PARALLEL_THRESHOLD {
                dst.par_chunks_mut(TILE * cols).enumerate().for_each(copy_band);
            } else {
                dst.chunks_mut(TILE * cols).enumerate().for_each(copy_band);
            }
            start += rows * cols;
        };
        super::strided::for_each_row(
            &shape[..nd - 2],
            [&self.strides[..nd - 2]],
            [self.offset as isize],
            |[o], n, [s]| {
                for b in 0..n as isize {
                    one_matrix(o + b * s);
                }
            },
        );
        assert_eq!(start, total, "every matrix of the batch is copied");
        // SAFETY: `out` has room for `total` elements. Each matrix of the batch takes the next
        // `rows * cols` slots of `dst`, split into bands of whole rows (`TILE * cols` elements,
        // the last band shorter), and `transpose_into` writes every element of the band it is
        // given (`band.len() / cols` rows of `cols`); the assertion above checks that the
        // matrices filled exactly `0..total`. So all `total` elements are initialised. (A panic
        // before this point leaves `out` empty.)
        unsafe { out.set_len(total) };
        Ok(out)
    }
    /// Whether this view's buffer is referenced by nobody else, is dense, and covers the whole
    /// buffer — i.e. an element-wise kernel may write its result into it.
    pub fn is_reusable(&self, shape: &[usize]) -> bool {
        self.offset == 0
            && Arc::strong_count(&self.buf) == 1
            && self.buf.len() == crate::shape::numel(shape)
            && self.is_contiguous(shape)
    }
    /// The elements of a dense view covering its whole buffer, mutably, when this `Data` is the
    /// buffer's only owner (`None` otherwise, or on a dtype mismatch). The exclusive borrow
    /// of the only `Arc` is what makes writing sound: nobody else can read the buffer.
    pub fn unique_slice_mut<T: BufferElement>(&mut self, shape: &[usize]) -> Option<&mut [T]> {
        if self.offset != 0 || !self.is_contiguous(shape) {
            return None;
        }
        let n = crate::shape::numel(shape);
        let s = T::slice_mut(Arc::get_mut(&mut self.buf)?)?;
        (s.len() == n).then_some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_are_checked_against_their_buffers() {
        let buf = Arc::new(f32::into_buffer(vec![0.0; 12]));
        let view = |shape: &[usize], strides: &[isize], offset| Data::view(buf.clone(), shape, strides, offset);
        assert!(view(&[3, 4], &[4, 1], 0).is_some());
        assert!(view(&[4, 3], &[1, 4], 0).is_some(), "transposed");
        assert!(view(&[5, 4], &[0, 1], 8).is_some(), "broadcast rows reach 8..=11");
        assert!(view(&[5, 4], &[0, 1], 9).is_none(), "one past the end");
        assert!(view(&[3, 4], &[-4, -1], 11).is_some(), "reversed both ways reaches 0..=11");
        assert!(view(&[3, 4], &[-4, -1], 10).is_none(), "reaches -1");
        assert!(view(&[13], &[1], 0).is_none());
        assert!(view(&[0, 100], &[100, 1], 1000).is_some(), "an empty view addresses nothing");
        assert!(view(&[], &[], 11).is_some() && view(&[], &[], 12).is_none(), "0-d");
        assert!(view(&[3, 4], &[4], 0).is_none(), "one stride per axis");
        assert!(view(&[2, 2], &[isize::MAX, 1], 0).is_none(), "no overflow in the reach");
    }

    #[test]
    #[should_panic(expected = "reach outside their buffers")]
    fn matmul_refuses_a_view_larger_than_its_buffer() {
        // a dense 2×2 view used as if it were 64×64: gemm would read far past the buffer
        let small = Data::from_vec(vec![1.0f32; 4], &[2, 2]);
        let big = Data::from_vec(vec![1.0f32; 64 * 64], &[64, 64]);
        let _ = super::super::matmul::matmul(&small, &[64, 64], &big, &[64, 64], &[64, 64], DType::F32);
    }
}
