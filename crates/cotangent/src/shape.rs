//! Shapes, strides, broadcasting and axis normalisation.
use smallvec::SmallVec;

/// A shape: the extent of every axis. Inline for up to 4 axes.
pub type Shape = SmallVec<[usize; 4]>;
/// Strides in elements (may be zero for broadcast axes or negative for flipped views).
pub type Strides = SmallVec<[isize; 4]>;

/// Number of elements of a shape.
///
/// Every array's shape has passed [`check_shape`], so its element count fits; the product is
/// still checked, so a shape that never became an array (a user's argument) cannot wrap
/// around to a small count.
///
/// # Panics
/// If the product overflows `usize`.
#[inline]
#[track_caller]
pub fn numel(shape: &[usize]) -> usize {
    match checked_numel(shape) {
        Some(n) => n,
        None => panic!("cotangent: the element count of shape {shape:?} overflows usize"),
    }
}

/// Number of elements of a shape, or `None` when the product overflows `usize`.
#[inline]
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// Why a shape cannot be the shape of an array of `dtype`, or `None` when it can.
///
/// An array's element count times the element size must be at most `isize::MAX` bytes (what
/// Rust allows for one allocation, so every element offset and byte offset fits an `isize`),
/// and so must the extents' product with zero extents counted as 1, which bounds the strides of
/// an empty array of that shape.
pub fn shape_problem(shape: &[usize], dtype: crate::DType) -> Option<String> {
    let size = dtype.size_of();
    let mut bytes = size; // numel × size so far; 0 once an extent is 0
    let mut extent = 1usize; // product of max(d, 1)
    let mut overflow = false;
    for &d in shape {
        match (bytes.checked_mul(d), extent.checked_mul(d.max(1))) {
            (Some(b), Some(e)) if b <= isize::MAX as usize && e <= isize::MAX as usize => {
                bytes = b;
                extent = e;
            }
            _ => {
                overflow = true;
                break;
            }
        }
    }
    if !overflow {
        return None;
    }
    Some(match checked_numel(shape) {
        None => "its element count overflows usize".to_string(),
        Some(0) => "its extents' product (zero extents counted as 1) exceeds isize::MAX".to_string(),
        Some(n) => match n.checked_mul(size) {
            Some(b) => format!("{n} elements of {size} bytes are {b} bytes, more than isize::MAX"),
            None => format!("{n} elements of {size} bytes are more than usize::MAX bytes"),
        },
    })
}

/// Checks that an array of `shape` and `dtype` can exist (see [`shape_problem`]).
///
/// # Panics
/// If it cannot: a misuse of op `op` (its name is only formatted then), reported with the
/// shape, the dtype and the caller's location.
#[inline]
#[track_caller]
pub fn check_shape(op: impl FnOnce() -> String, shape: &[usize], dtype: crate::DType) {
    // fast path: few small extents cannot overflow (each < 2^16, at most 3 of them: < 2^48 × 8)
    if shape.len() <= 3 && shape.iter().all(|&d| d < 1 << 16) {
        return;
    }
    if let Some(why) = shape_problem(shape, dtype) {
        shape_panic(&op(), shape, dtype, &why, std::panic::Location::caller());
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn shape_panic(op: &str, shape: &[usize], dtype: crate::DType, why: &str, at: &std::panic::Location<'_>) -> ! {
    panic!("cotangent::{op}: an array of shape {shape:?} and dtype {dtype} is too large: {why} (called at {at})")
}

/// Row-major (C order) strides of a contiguous array of this shape.
#[inline]
pub fn contiguous_strides(shape: &[usize]) -> Strides {
    let mut s: Strides = SmallVec::from_elem(0, shape.len());
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc *= shape[i].max(1) as isize;
    }
    s
}

/// Whether `strides` describe a dense row-major layout of `shape` (axes of extent 1 are ignored).
pub fn is_contiguous(shape: &[usize], strides: &[isize]) -> bool {
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        if shape[i] != 1 {
            if strides[i] != acc {
                return false;
            }
            acc *= shape[i] as isize;
        }
    }
    true
}

/// Whether every element a view addresses — `offset + Σ index·stride` over `shape`, one stride
/// per axis — lies in `0..len` (a buffer of `len` elements). An empty shape addresses nothing;
/// a stride count that differs from the axis count never fits.
///
/// ```
/// use cotangent::shape::view_lies_inside;
/// assert!(view_lies_inside(&[3, 4], &[1, 3], 0, 12)); // a transposed 4×3 buffer
/// assert!(view_lies_inside(&[3, 4], &[-4, -1], 11, 12)); // flipped both ways
/// assert!(!view_lies_inside(&[3, 4], &[4, 1], 1, 12)); // one past the end
/// assert!(view_lies_inside(&[0, 9], &[9, 1], 100, 0)); // empty
/// ```
pub fn view_lies_inside(shape: &[usize], strides: &[isize], offset: usize, len: usize) -> bool {
    if strides.len() != shape.len() {
        return false;
    }
    if shape.contains(&0) {
        return true;
    }
    let (mut lo, mut hi) = (offset as i128, offset as i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = (n as i128 - 1) * s as i128;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    lo >= 0 && hi < len as i128
}

/// The broadcast shape of two shapes, numpy rules, or `None` if they do not broadcast.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Shape> {
    let n = a.len().max(b.len());
    let mut out: Shape = SmallVec::from_elem(0, n);
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// Normalise a possibly negative axis for an array of `ndim` axes, or `None` if out of range.
pub fn normalize_axis(axis: isize, ndim: usize) -> Option<usize> {
    let n = ndim as isize;
    let a = if axis < 0 { axis + n } else { axis };
    if a < 0 || a >= n {
        None
    } else {
        Some(a as usize)
    }
}

/// Format a shape as `[2, 3]`.
pub fn fmt_shape(shape: &[usize]) -> String {
    format!("{shape:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn broadcast() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]).unwrap().as_slice(), &[2, 4, 3]);
        assert!(broadcast_shapes(&[2, 3], &[4]).is_none());
        assert_eq!(broadcast_shapes(&[0, 1], &[1, 5]).unwrap().as_slice(), &[0, 5]);
    }
    #[test]
    fn strides() {
        assert_eq!(contiguous_strides(&[2, 3, 4]).as_slice(), &[12, 4, 1]);
        assert!(is_contiguous(&[2, 1, 3], &[3, 7, 1]));
        assert_eq!(normalize_axis(-1, 3), Some(2));
        assert_eq!(normalize_axis(3, 3), None);
    }
}
