//! Dense matrix transposition: the copy behind a transposed view made contiguous and behind a
//! product computed column-major (`matmul::product_through_column_major`).
//!
//! The matrix is walked in 16×16 tiles so that every cache line read and written is used whole.
//! On CPUs with AVX-512, a full tile of 4-byte elements (`f32`, `i32`, `u32`) is transposed in
//! registers: 16 vector loads, four rounds of shuffles, 16 vector stores. The scalar tile loop it
//! replaces ran at 5–20 GB/s (one bounds-checked element at a time, worst at power-of-two row
//! strides); other element sizes and the ragged edges of a matrix still take that loop.
use super::buffer::BufferElement;
use std::mem::MaybeUninit;

/// Side of the square tiles the transposition walks.
const TILE: usize = 16;

/// Writes into `dst` the row-major `rows × cols` matrix whose element `(i, j)` is
/// `src[i + j * col_stride]` (that is, `src` holds its columns, `col_stride` apart).
///
/// # Panics
/// If `dst` is shorter than `rows * cols` or `src` does not hold every addressed element.
pub(crate) fn transpose_into<T: BufferElement>(
    src: &[T],
    col_stride: usize,
    rows: usize,
    cols: usize,
    dst: &mut [MaybeUninit<T>],
) {
    if rows == 0 || cols == 0 {
        return;
    }
    let last_read = (cols - 1).checked_mul(col_stride).and_then(|x| x.checked_add(rows - 1));
    let written = rows.checked_mul(cols);
    assert!(
        last_read.is_some_and(|l| l < src.len()) && written.is_some_and(|w| w <= dst.len()),
        "transpose_into: a {rows}×{cols} matrix with column stride {col_stride} needs more than \
         {} source / {} destination elements",
        src.len(),
        dst.len()
    );
    let registers = tile_kernel::<T>();
    for i0 in (0..rows).step_by(TILE) {
        let ie = (i0 + TILE).min(rows);
        for j0 in (0..cols).step_by(TILE) {
            let je = (j0 + TILE).min(cols);
            match registers {
                Some(kernel) if ie - i0 == TILE && je - j0 == TILE => {
                    // SAFETY: `tile_kernel` returned the kernel only after detecting AVX-512F.
                    // The kernel reads source rows `i0 + (j0 + r) * col_stride .. + 16` and writes
                    // destination rows `(i0 + r) * cols + j0 .. + 16` (r < 16): this is a full
                    // tile (`ie - i0 == je - j0 == 16`), so the last element read is at most
                    // `last_read` and the last written below `rows * cols`, both inside the bounds
                    // asserted above. `T` is a 4-byte number (`tile_kernel`: `f32`, `i32` or `u32`,
                    // no padding), so every element is read and written whole as a `u32`, with
                    // unaligned loads and stores. `dst` may be uninitialised: it is only written.
                    unsafe {
                        kernel(
                            src.as_ptr().add(i0 + j0 * col_stride) as *const u32,
                            col_stride,
                            dst.as_mut_ptr().add(i0 * cols + j0) as *mut u32,
                            cols,
                        )
                    }
                }
                _ => {
                    for j in j0..je {
                        let column = &src[j * col_stride + i0..j * col_stride + ie];
                        for (i, &v) in column.iter().enumerate() {
                            dst[(i0 + i) * cols + j].write(v);
                        }
                    }
                }
            }
        }
    }
}

/// A 16×16 tile transposition: reads 16 rows of 16 elements `src_stride` apart, writes their
/// transpose as 16 rows `dst_stride` apart.
///
/// # Safety
/// Calling one is unsafe: the CPU must have the instruction set it was compiled for, and
/// `src + r * src_stride` / `dst + r * dst_stride` must be valid for reads / writes of 16
/// elements for every r < 16 (see `avx512::tile16`).
type TileKernel = unsafe fn(*const u32, usize, *mut u32, usize);

/// The in-register tile kernel for `T`, when `T` has 4 bytes and the CPU has AVX-512.
fn tile_kernel<T>() -> Option<TileKernel> {
    #[cfg(target_arch = "x86_64")]
    if std::mem::size_of::<T>() == 4 && std::is_x86_feature_detected!("avx512f") {
        return Some(avx512::tile16 as TileKernel);
    }
    None
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// 16×16 transposition of 4-byte elements in zmm registers: pairs of rows interleaved by
    /// 32-bit lanes, then by 64-bit lanes, then 128-bit blocks exchanged twice.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `src + r * src_stride` must be valid for reads and
    /// `dst + r * dst_stride` valid for writes of 16 `u32`s for every r < 16 (no alignment
    /// needed). All 16 rows are loaded before anything is stored.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile16(src: *const u32, src_stride: usize, dst: *mut u32, dst_stride: usize) {
        let mut rows = [_mm512_setzero_ps(); 16];
        for (r, row) in rows.iter_mut().enumerate() {
            // SAFETY: the caller guarantees 16 readable `u32`s (64 bytes, one zmm register) at
            // every source row; `loadu` has no alignment requirement.
            *row = unsafe { _mm512_loadu_ps(src.add(r * src_stride) as *const f32) };
        }
        // 32-bit lanes of row pairs (2i, 2i + 1) interleaved
        let mut pairs = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            pairs[2 * i] = _mm512_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
            pairs[2 * i + 1] = _mm512_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
        }
        // 64-bit lanes of pairs (b, b + 2) and (b + 1, b + 3) interleaved
        let mut quads = [_mm512_setzero_ps(); 16];
        let pd = _mm512_castps_pd;
        for b in (0..16).step_by(4) {
            quads[b] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(pairs[b]), pd(pairs[b + 2])));
            quads[b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(pairs[b]), pd(pairs[b + 2])));
            quads[b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(pairs[b + 1]), pd(pairs[b + 3])));
            quads[b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(pairs[b + 1]), pd(pairs[b + 3])));
        }
        // even and odd 128-bit blocks of quads (b + q, b + 4 + q) gathered
        let mut octs = [_mm512_setzero_ps(); 16];
        for b in [0, 8] {
            for q in 0..4 {
                octs[b + q] = _mm512_shuffle_f32x4::<0x88>(quads[b + q], quads[b + 4 + q]);
                octs[b + 4 + q] = _mm512_shuffle_f32x4::<0xdd>(quads[b + q], quads[b + 4 + q]);
            }
        }
        for q in 0..8 {
            let low = _mm512_shuffle_f32x4::<0x88>(octs[q], octs[8 + q]);
            let high = _mm512_shuffle_f32x4::<0xdd>(octs[q], octs[8 + q]);
            // SAFETY: the caller guarantees 16 writable `u32`s at every destination row
            // (rows q and q + 8, both < 16); `storeu` has no alignment requirement.
            unsafe {
                _mm512_storeu_ps(dst.add(q * dst_stride) as *mut f32, low);
                _mm512_storeu_ps(dst.add((q + 8) * dst_stride) as *mut f32, high);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element lands at its transposed place, for sizes with and without ragged edges,
    /// padded column strides, 4-byte (register tiles) and 8-/2-byte (scalar) elements (all values
    /// distinct, f16 exact up to 2048).
    fn check<T: BufferElement + PartialEq + std::fmt::Debug>(make: impl Fn(usize) -> T) {
        for &(rows, cols, pad) in
            &[(16, 16, 0), (32, 48, 0), (17, 33, 3), (5, 70, 1), (64, 16, 7), (1, 1, 0), (100, 3, 0)]
        {
            let cs = rows + pad;
            let src: Vec<T> = (0..cs * cols).map(&make).collect();
            let mut dst = vec![MaybeUninit::<T>::uninit(); rows * cols];
            transpose_into(&src, cs, rows, cols, &mut dst);
            for i in 0..rows {
                for j in 0..cols {
                    // SAFETY: `transpose_into` wrote every one of the `rows * cols` elements
                    // (full tiles in registers, the ragged edges element by element).
                    assert_eq!(
                        unsafe { dst[i * cols + j].assume_init() },
                        src[i + j * cs],
                        "({i}, {j}) of {rows}×{cols}"
                    );
                }
            }
        }
    }

    #[test]
    fn transposes_every_element_size() {
        check(|k| k as f32 * 0.5);
        check(|k| k as u32);
        check(|k| k as f64);
        check(|k| half::f16::from_f32(k as f32));
    }
}
