//! Shapes, strides, broadcasting and axis normalisation.
use smallvec::SmallVec;

/// A shape: the extent of every axis. Inline for up to 4 axes.
pub type Shape = SmallVec<[usize; 4]>;
/// Strides in elements (may be zero for broadcast axes or negative for flipped views).
pub type Strides = SmallVec<[isize; 4]>;

/// Number of elements of a shape.
#[inline]
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major (C order) strides of a contiguous array of this shape.
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
