//! Iteration over strided views, one row (innermost axis) at a time.

/// Calls `f(offsets, len, inner_strides)` once per row of `shape` (all axes but the last),
/// for `N` operands that share the shape but have their own strides and starting offsets.
/// Adjacent axes that are dense for every operand are merged first, so a contiguous array is a
/// single row. Rows are visited in row-major order.
#[inline]
pub fn for_each_row<const N: usize>(
    shape: &[usize],
    strides: [&[isize]; N],
    offsets: [isize; N],
    mut f: impl FnMut([isize; N], usize, [isize; N]),
) {
    if shape.contains(&0) {
        return;
    }
    // Coalesce axes: drop extent-1 axes and merge axis i into i+1 where dense for all operands.
    let mut dims: smallvec::SmallVec<[usize; 8]> = smallvec::SmallVec::new();
    let mut strd: smallvec::SmallVec<[[isize; N]; 8]> = smallvec::SmallVec::new();
    for (ax, &d) in shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let s: [isize; N] = std::array::from_fn(|k| strides[k][ax]);
        if let (Some(ld), Some(ls)) = (dims.last_mut(), strd.last_mut()) {
            if (0..N).all(|k| ls[k] == s[k] * d as isize) {
                *ld *= d;
                *ls = s;
                continue;
            }
        }
        dims.push(d);
        strd.push(s);
    }
    if dims.is_empty() {
        f(offsets, 1, [1; N]);
        return;
    }
    let nd = dims.len();
    let inner = dims[nd - 1];
    let inner_s = strd[nd - 1];
    let outer = nd - 1;
    let mut idx: smallvec::SmallVec<[usize; 8]> = smallvec::SmallVec::from_elem(0, outer);
    let mut off = offsets;
    loop {
        f(off, inner, inner_s);
        // increment the multi-index over the outer axes
        let mut ax = outer;
        loop {
            if ax == 0 {
                return;
            }
            ax -= 1;
            idx[ax] += 1;
            for k in 0..N {
                off[k] += strd[ax][k];
            }
            if idx[ax] < dims[ax] {
                break;
            }
            for k in 0..N {
                off[k] -= strd[ax][k] * dims[ax] as isize;
            }
            idx[ax] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn rows_of_transposed() {
        // shape [2,3] viewing a [3,2] buffer transposed: strides [1,2]
        let mut seen = vec![];
        for_each_row(&[2, 3], [&[1, 2]], [0], |[o], n, [s]| {
            for i in 0..n as isize {
                seen.push(o + i * s);
            }
        });
        assert_eq!(seen, vec![0, 2, 4, 1, 3, 5]);
        let mut rows = 0;
        for_each_row(&[4, 5, 6], [&[30, 6, 1]], [0], |_, n, _| {
            rows += 1;
            assert_eq!(n, 120);
        });
        assert_eq!(rows, 1);
    }
}
