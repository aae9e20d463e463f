//! CPU kernel of [`ArgSort`] (see `crate::primitives::sort` for its rules).
use super::CpuKernel;
use crate::backend::cpu::reduce::{data_from_rows, map_rows, rows_of};
use crate::backend::cpu::Data;
use crate::primitive::{Primitive, Spec};
use crate::primitives::sort::ArgSort;
use crate::{Array, Error, Result};
use std::cmp::Ordering;

/// `a` against `b` with NaN greater than every number and equal to NaN (a total order on the
/// values a sort meets; `v != v` finds NaN in every float type and nothing in the others).
#[allow(clippy::eq_op)]
fn nan_last<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    match (a != a, b != b) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
    }
}

/// The stable sorting permutation of `row`, written to `out`.
fn argsort_row<T: PartialOrd>(row: &[T], out: &mut [u32], descending: bool) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = i as u32;
    }
    if descending {
        out.sort_by(|&i, &j| nan_last(&row[j as usize], &row[i as usize]));
    } else {
        out.sort_by(|&i, &j| nan_last(&row[i as usize], &row[j as usize]));
    }
}

impl CpuKernel for ArgSort {
    fn eval(&self, inputs: &[Array], outputs: &[Spec]) -> Result<Vec<Data>> {
        let x = &inputs[0];
        let n = x.shape()[self.axis];
        if n > u32::MAX as usize + 1 {
            return Err(Error::Eval(format!(
                "{}: axis {} of shape {:?} has {n} elements, more than u32 indices can number",
                self.name(),
                self.axis,
                x.shape()
            )));
        }
        let d = x.computed_data()?;
        let axes = [self.axis];
        let v: Vec<u32> = crate::dispatch_dtype!(x.dtype(), T => {
            let (rows, r) = rows_of::<T>(d, x.shape(), &axes);
            map_rows(&rows, r, |row, out| argsort_row(row, out, self.descending))
        });
        Ok(vec![data_from_rows(v, &outputs[0].shape, &axes)])
    }
}
