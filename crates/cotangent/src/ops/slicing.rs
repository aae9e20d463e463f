//! Slicing with Rust ranges: [`SliceItem`], the [`s!`](crate::s) macro and
//! [`Array::slice_ranges`], numpy's `x[1:3, -1, ::2]` spelled `x.slice_ranges(s![1..3, -1, ..;2])`.
use super::shape::{normalize_slice, slice_raw};
use crate::primitives::shape::Slice;
use crate::shape::{normalize_axis, Shape};
use crate::Array;
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

/// One axis of a [`slice_ranges`](Array::slice_ranges): a range with a step (the axis is kept)
/// or a single index (the axis is removed). Built from Rust ranges and integers by `From`
/// (usually through [`s!`](crate::s)); bounds and indices may be negative, counting from the
/// end, and out-of-range range bounds clamp as in numpy.
///
/// ```
/// use cotangent::SliceItem;
/// assert_eq!(SliceItem::from(1..3), SliceItem::Range { start: Some(1), stop: Some(3), step: 1 });
/// assert_eq!(SliceItem::from(..).step(-1), SliceItem::Range { start: None, stop: None, step: -1 });
/// assert_eq!(SliceItem::from(-1), SliceItem::Index(-1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceItem {
    /// `start..stop` by `step` (`None`: the open end in the direction of `step`).
    Range {
        /// First index (inclusive).
        start: Option<isize>,
        /// End (exclusive).
        stop: Option<isize>,
        /// Step (not zero; negative walks backwards).
        step: isize,
    },
    /// One index; the axis is dropped.
    Index(isize),
}

impl SliceItem {
    /// The range with step `step` (numpy's `start:stop:step`).
    ///
    /// ```
    /// use cotangent::SliceItem;
    /// assert_eq!(SliceItem::from(2..).step(3), SliceItem::Range { start: Some(2), stop: None, step: 3 });
    /// ```
    ///
    /// # Panics
    /// If `self` is an index, which has no step (reported at the caller's line).
    #[track_caller]
    pub fn step(self, step: isize) -> SliceItem {
        match self {
            SliceItem::Range { start, stop, .. } => SliceItem::Range { start, stop, step },
            SliceItem::Index(i) => panic!("cotangent::s!: the index {i} cannot take a step ({step}); use a range"),
        }
    }
}

macro_rules! slice_item_from_ints {
    ($($t:ty),*) => {$(
        impl From<$t> for SliceItem {
            fn from(i: $t) -> SliceItem {
                SliceItem::Index(i as isize)
            }
        }
        impl From<Range<$t>> for SliceItem {
            fn from(r: Range<$t>) -> SliceItem {
                SliceItem::Range { start: Some(r.start as isize), stop: Some(r.end as isize), step: 1 }
            }
        }
        impl From<RangeFrom<$t>> for SliceItem {
            fn from(r: RangeFrom<$t>) -> SliceItem {
                SliceItem::Range { start: Some(r.start as isize), stop: None, step: 1 }
            }
        }
        impl From<RangeTo<$t>> for SliceItem {
            fn from(r: RangeTo<$t>) -> SliceItem {
                SliceItem::Range { start: None, stop: Some(r.end as isize), step: 1 }
            }
        }
        impl From<RangeInclusive<$t>> for SliceItem {
            fn from(r: RangeInclusive<$t>) -> SliceItem {
                inclusive(Some(*r.start() as isize), *r.end() as isize)
            }
        }
        impl From<RangeToInclusive<$t>> for SliceItem {
            fn from(r: RangeToInclusive<$t>) -> SliceItem {
                inclusive(None, r.end as isize)
            }
        }
    )*};
}
slice_item_from_ints!(i32, i64, isize, usize);

/// `start..=end`: the end is included; `..=-1` runs to the last element.
fn inclusive(start: Option<isize>, end: isize) -> SliceItem {
    let stop = if end == -1 { None } else { Some(end + 1) };
    SliceItem::Range { start, stop, step: 1 }
}

impl From<RangeFull> for SliceItem {
    fn from(_: RangeFull) -> SliceItem {
        SliceItem::Range { start: None, stop: None, step: 1 }
    }
}

/// A list of [`SliceItem`]s from Rust ranges and integers, for
/// [`slice_ranges`](Array::slice_ranges): `s![.., 1..3, -1, ..;2, 4..;-1]` is numpy's
/// `[:, 1:3, -1, ::2, 4::-1]` (a range followed by `; step` takes that step).
///
/// ```
/// use cotangent::{self as ct, s, Array};
/// let x = ct::arange(0.0, 24.0, 1.0, ct::DType::I32).reshape(&[2, 3, 4]);
/// let y = x.slice_ranges(s![-1, 1.., ..;2]);
/// assert_eq!(y.shape(), &[2, 2]);
/// assert_eq!(y.to_vec::<i32>()?, vec![16, 18, 20, 22]);
/// assert_eq!(x.slice_ranges(s![.., 0, ..;-1]).to_vec::<i32>()?, vec![3, 2, 1, 0, 15, 14, 13, 12]);
/// # Ok::<(), ct::Error>(())
/// ```
#[macro_export]
macro_rules! s {
    () => {{
        let none: [$crate::SliceItem; 0] = [];
        none
    }};
    (@item $item:expr) => {
        $crate::SliceItem::from($item)
    };
    (@item $item:expr; $step:expr) => {
        $crate::SliceItem::from($item).step($step)
    };
    ($($item:expr $(; $step:expr)?),* $(,)?) => {
        [$($crate::s!(@item $item $(; $step)?)),*]
    };
}

impl Array {
    /// numpy basic indexing with [`SliceItem`]s (usually written with [`s!`](crate::s)): item
    /// `i` slices axis `i` (a range keeps the axis, an index drops it); axes past the items are
    /// taken whole. A view sharing `self`'s buffer; differentiable like
    /// [`slice`](Array::slice).
    ///
    /// ```
    /// use cotangent::{self as ct, s, Array, SliceItem};
    /// let x = Array::from_slice(&[0i32, 1, 2, 3, 4, 5], &[2, 3]);
    /// assert_eq!(x.slice_ranges(s![.., 1..]).to_vec::<i32>()?, vec![1, 2, 4, 5]);
    /// assert_eq!(x.slice_ranges([SliceItem::Index(-1)]).to_vec::<i32>()?, vec![3, 4, 5]);
    /// # Ok::<(), ct::Error>(())
    /// ```
    ///
    /// # Panics
    /// If there are more items than axes, a step is zero, or an index is out of range
    /// (reported at the caller's line).
    #[track_caller]
    pub fn slice_ranges(&self, items: impl AsRef<[SliceItem]>) -> Array {
        let _op = crate::array::OpScope::enter("slice_ranges");
        let items = items.as_ref();
        let nd = self.ndim();
        assert!(
            items.len() <= nd,
            "cotangent::slice_ranges: {} items slice an array of shape {:?} ({}), which has {nd} axes",
            items.len(),
            self.shape(),
            self.dtype()
        );
        let mut s = Slice { starts: vec![0; nd], steps: vec![1; nd], shape: Shape::from_slice(self.shape()) };
        let mut kept: Vec<usize> = Vec::with_capacity(nd);
        for (a, item) in items.iter().enumerate() {
            let n = self.shape()[a];
            match *item {
                SliceItem::Range { start, stop, step } => {
                    assert!(
                        step != 0,
                        "cotangent::slice_ranges: the step of axis {a} is zero (shape {:?})",
                        self.shape()
                    );
                    let (b, len) = normalize_slice(n, start, stop, step);
                    s.starts[a] = b;
                    s.steps[a] = step;
                    s.shape[a] = len;
                    kept.push(len);
                }
                SliceItem::Index(i) => {
                    let Some(k) = normalize_axis(i, n) else {
                        panic!(
                            "cotangent::slice_ranges: index {i} is out of range for axis {a} of extent {n} (shape {:?}, \
                             {})",
                            self.shape(),
                            self.dtype()
                        )
                    };
                    s.starts[a] = k;
                    s.shape[a] = 1;
                }
            }
        }
        kept.extend_from_slice(&self.shape()[items.len()..]);
        let out = slice_raw(self, s);
        if kept.as_slice() == out.shape() {
            out
        } else {
            out.reshape_exact(&kept)
        }
    }
}
