//! The independent reference: a tiny interpreter over `Vec<f64>` + shape (row-major), written
//! from numpy's definitions of the fuzzed ops. It shares no code with cotangent.
//!
//! Non-finite values follow IEEE arithmetic in `f64` as the formulas are written here, plus
//! the choices cotangent documents: `maximum` and `max` propagate NaN; `softmax` is
//! `exp(x - m) / Σ exp(x - m)` with `m` the NaN-propagating maximum (so a row holding `+inf`,
//! only `-inf`s, or a NaN is all NaN); `logsumexp` is `+inf` if any element is `+inf`, `-inf`
//! for a row of `-inf`s or an empty one, NaN if any element is NaN.

/// A dense row-major tensor of `f64`.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The multi-index of flat position `k` in `shape`.
fn unravel(mut k: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for i in (0..shape.len()).rev() {
        idx[i] = k % shape[i];
        k /= shape[i];
    }
    idx
}

/// numpy's broadcast of two shapes (`None` if they do not broadcast).
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
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

/// Normalise a possibly negative axis against `n` axes.
pub fn norm_axis(a: isize, n: usize) -> usize {
    let v = if a < 0 { a + n as isize } else { a };
    assert!(v >= 0 && (v as usize) < n, "reference: axis {a} out of range for {n} axes");
    v as usize
}

/// numpy's `slice(start, stop, step).indices(n)`: the positions taken along an axis of extent
/// `n`.
pub fn slice_positions(n: usize, start: isize, stop: isize, step: isize) -> Vec<usize> {
    assert!(step != 0);
    let n = n as isize;
    let clamp = |v: isize, lo: isize, hi: isize| v.max(lo).min(hi);
    let fix = |v: isize| if v < 0 { v + n } else { v };
    let mut out = Vec::new();
    if step > 0 {
        let (b, e) = (clamp(fix(start), 0, n), clamp(fix(stop), 0, n));
        let mut i = b;
        while i < e {
            out.push(i as usize);
            i += step;
        }
    } else {
        let (b, e) = (clamp(fix(start), -1, n - 1), clamp(fix(stop), -1, n - 1));
        let mut i = b;
        while i > e {
            out.push(i as usize);
            i += step;
        }
    }
    out
}

impl Tensor {
    pub fn new(shape: &[usize], data: Vec<f64>) -> Tensor {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "reference: {shape:?} vs {} values", data.len());
        Tensor { shape: shape.to_vec(), data }
    }

    pub fn map(&self, f: impl Fn(f64) -> f64) -> Tensor {
        Tensor { shape: self.shape.clone(), data: self.data.iter().map(|&v| f(v)).collect() }
    }

    /// numpy `broadcast_to`.
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor {
        let off = shape.len() - self.shape.len();
        let st = strides(&self.shape);
        let n: usize = shape.iter().product();
        let data = (0..n)
            .map(|k| {
                let idx = unravel(k, shape);
                let src: usize =
                    (0..self.shape.len()).map(|i| if self.shape[i] == 1 { 0 } else { idx[i + off] * st[i] }).sum();
                self.data[src]
            })
            .collect();
        Tensor { shape: shape.to_vec(), data }
    }

    /// Element-wise `f(a, b)` with broadcasting.
    pub fn zip(&self, other: &Tensor, f: impl Fn(f64, f64) -> f64) -> Tensor {
        let shape = broadcast_shapes(&self.shape, &other.shape).expect("reference: shapes broadcast");
        let (a, b) = (self.broadcast_to(&shape), other.broadcast_to(&shape));
        Tensor { shape, data: a.data.iter().zip(&b.data).map(|(&x, &y)| f(x, y)).collect() }
    }

    /// `cond ? a : b`, all three broadcast.
    pub fn select(cond: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
        let shape = broadcast_shapes(&cond.shape, &a.shape).and_then(|s| broadcast_shapes(&s, &b.shape)).unwrap();
        let (c, a, b) = (cond.broadcast_to(&shape), a.broadcast_to(&shape), b.broadcast_to(&shape));
        let data = (0..c.data.len()).map(|i| if c.data[i] != 0.0 { a.data[i] } else { b.data[i] }).collect();
        Tensor { shape, data }
    }

    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        Tensor::new(shape, self.data.clone())
    }

    /// numpy `transpose(perm)`: output axis `i` is input axis `perm[i]`.
    pub fn transpose(&self, perm: &[usize]) -> Tensor {
        let shape: Vec<usize> = perm.iter().map(|&p| self.shape[p]).collect();
        let st = strides(&self.shape);
        let n = self.data.len();
        let data = (0..n)
            .map(|k| {
                let idx = unravel(k, &shape);
                self.data[perm.iter().enumerate().map(|(i, &p)| idx[i] * st[p]).sum::<usize>()]
            })
            .collect();
        Tensor { shape, data }
    }

    /// Take `positions[i]` along axis `i` (an outer product of index lists).
    pub fn gather_axes(&self, positions: &[Vec<usize>]) -> Tensor {
        let shape: Vec<usize> = positions.iter().map(|p| p.len()).collect();
        let st = strides(&self.shape);
        let n: usize = shape.iter().product();
        let data = (0..n)
            .map(|k| {
                let idx = unravel(k, &shape);
                self.data[idx.iter().enumerate().map(|(i, &j)| positions[i][j] * st[i]).sum::<usize>()]
            })
            .collect();
        Tensor { shape, data }
    }

    /// numpy `concatenate(xs, axis)`.
    pub fn concatenate(xs: &[Tensor], axis: usize) -> Tensor {
        let mut shape = xs[0].shape.clone();
        shape[axis] = xs.iter().map(|x| x.shape[axis]).sum();
        let outer: usize = shape[..axis].iter().product();
        let mut data = Vec::with_capacity(shape.iter().product());
        for o in 0..outer {
            for x in xs {
                let inner: usize = x.shape[axis..].iter().product();
                data.extend_from_slice(&x.data[o * inner..(o + 1) * inner]);
            }
        }
        Tensor { shape, data }
    }

    /// Fold every group of elements sharing the kept axes with `f` (a function of the group's
    /// values), keeping the reduced axes as unit axes.
    pub fn reduce_keepdims(&self, axes: &[usize], f: impl Fn(&[f64]) -> f64) -> Tensor {
        let shape: Vec<usize> =
            self.shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
        let n_out: usize = shape.iter().product();
        let mut groups = vec![Vec::new(); n_out];
        let ost = strides(&shape);
        for (k, &v) in self.data.iter().enumerate() {
            let idx = unravel(k, &self.shape);
            let o: usize = idx.iter().enumerate().map(|(i, &j)| if axes.contains(&i) { 0 } else { j * ost[i] }).sum();
            groups[o].push(v);
        }
        Tensor { shape, data: groups.iter().map(|g| f(g)).collect() }
    }

    /// Map every group over `axes` to a group of the same size with `f` (softmax).
    pub fn map_groups(&self, axes: &[usize], f: impl Fn(&[f64]) -> Vec<f64>) -> Tensor {
        let gshape: Vec<usize> =
            self.shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
        let gst = strides(&gshape);
        let n_groups: usize = gshape.iter().product();
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); n_groups];
        for k in 0..self.data.len() {
            let idx = unravel(k, &self.shape);
            let g: usize = idx.iter().enumerate().map(|(i, &j)| if axes.contains(&i) { 0 } else { j * gst[i] }).sum();
            members[g].push(k);
        }
        let mut data = vec![0.0; self.data.len()];
        for m in &members {
            let vals: Vec<f64> = m.iter().map(|&k| self.data[k]).collect();
            for (&k, v) in m.iter().zip(f(&vals)) {
                data[k] = v;
            }
        }
        Tensor { shape: self.shape.clone(), data }
    }

    /// Drop the unit axes `axes` (after a reduction without keepdims).
    pub fn squeeze_axes(&self, axes: &[usize]) -> Tensor {
        let shape: Vec<usize> = (0..self.shape.len()).filter(|i| !axes.contains(i)).map(|i| self.shape[i]).collect();
        self.reshape(&shape)
    }

    /// numpy `matmul` (1-d operands promoted and their unit axis removed afterwards).
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        let a = if self.shape.len() == 1 { self.reshape(&[1, self.shape[0]]) } else { self.clone() };
        let b = if other.shape.len() == 1 { other.reshape(&[other.shape[0], 1]) } else { other.clone() };
        let (ra, rb) = (a.shape.len(), b.shape.len());
        let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
        assert_eq!(k, b.shape[rb - 2], "reference: matmul contraction");
        let batch = broadcast_shapes(&a.shape[..ra - 2], &b.shape[..rb - 2]).unwrap();
        let full = |t: &Tensor, rows: usize, cols: usize| {
            let mut s = batch.clone();
            s.extend([rows, cols]);
            t.broadcast_to(&s)
        };
        let (a, b) = (full(&a, m, k), full(&b, k, n));
        let nb: usize = batch.iter().product();
        let mut data = vec![0.0; nb * m * n];
        for bi in 0..nb {
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0;
                    for l in 0..k {
                        s += a.data[bi * m * k + i * k + l] * b.data[bi * k * n + l * n + j];
                    }
                    data[bi * m * n + i * n + j] = s;
                }
            }
        }
        let mut shape = batch;
        if self.shape.len() > 1 {
            shape.push(m);
        }
        if other.shape.len() > 1 {
            shape.push(n);
        }
        Tensor { shape, data }
    }
}

/// The NaN-propagating maximum of two values (cotangent's `maximum`).
pub fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// The NaN-propagating maximum of a group (`-inf` for an empty one).
pub fn group_max(g: &[f64]) -> f64 {
    g.iter().fold(f64::NEG_INFINITY, |m, &v| max_nan(m, v))
}

/// `log Σ exp(g)`, stable, with the non-finite cases of the module docs.
pub fn group_logsumexp(g: &[f64]) -> f64 {
    let m = group_max(g);
    let shift = if m.is_finite() { m } else { 0.0 };
    shift + g.iter().map(|&v| (v - shift).exp()).sum::<f64>().ln()
}

/// `exp(g - m) / Σ exp(g - m)` with `m` the NaN-propagating maximum. The normaliser is summed
/// with Neumaier's compensation: a plain sequential f64 sum of a large group is off by tens of
/// ulps (fuzzer finding: a softmax over 16,605 elements where cotangent, summing pairwise, was
/// 0.56 ulp from the exact value and the sequential reference 28 ulp), and the tolerance assumes
/// the reference is the accurate side.
pub fn group_softmax(g: &[f64]) -> Vec<f64> {
    let m = group_max(g);
    let e: Vec<f64> = g.iter().map(|&v| (v - m).exp()).collect();
    let s = compensated_sum(&e);
    e.iter().map(|v| v / s).collect()
}

/// `Σ xs` with Neumaier's compensated summation (error about one rounding of the result, for
/// finite terms; non-finite terms give what a plain sum gives).
pub fn compensated_sum(xs: &[f64]) -> f64 {
    let (mut sum, mut carry) = (0.0f64, 0.0f64);
    for &x in xs {
        let t = sum + x;
        carry += if sum.abs() >= x.abs() { (sum - t) + x } else { (x - t) + sum };
        sum = t;
    }
    if carry.is_finite() {
        sum + carry
    } else {
        sum
    }
}
