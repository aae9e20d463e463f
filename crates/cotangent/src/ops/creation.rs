//! Creating arrays: constants, ranges, identity and triangular masks.
use crate::dtype::BufferElement;
use crate::dtype::Element;
use crate::{Array, DType};

/// A 0-d array of `dtype` holding `v` (converted as `as` would).
pub(crate) fn scalar_f64(v: f64, dtype: DType) -> Array {
    recent_scalar(
        ScalarValue::Float(v.to_bits()),
        dtype,
        || crate::dispatch_dtype!(dtype, T => Array::scalar(<T as Element>::from_f64(v))),
    )
}

/// A 0-d array of `dtype` holding the integer `v` (exact for integer dtypes).
pub(crate) fn scalar_i64(v: i64, dtype: DType) -> Array {
    recent_scalar(
        ScalarValue::Int(v),
        dtype,
        || crate::dispatch_dtype!(dtype, T => Array::scalar(<T as Element>::from_i64(v))),
    )
}

/// The Rust number a scalar operand came from (a float by its bits: `-0.0` and `0.0`, and
/// NaN payloads, stay apart).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ScalarValue {
    Float(u64),
    Int(i64),
}

/// How many scalar constants each thread keeps for reuse.
const RECENT_SCALARS: usize = 8;

/// A recently made scalar constant: its value, dtype, device, and the array.
type RecentScalar = (ScalarValue, DType, crate::Device, Array);

thread_local! {
    /// The scalar constants this thread made last (the `1.01` and `0.1` of `x * 1.01 + 0.1` in
    /// a loop), replaced round-robin, with the slot to replace next.
    static RECENT: std::cell::RefCell<(Vec<RecentScalar>, usize)> = const { std::cell::RefCell::new((Vec::new(), 0)) };
}

/// The 0-d constant `value` of `dtype` on the default device: one this thread made recently,
/// or a new one from `make`. An operand like `1.01` in `x * 1.01` becomes a constant at every
/// call; reusing it saves a node and a buffer per op. Sharing is invisible: arrays are
/// immutable, and a shared constant's buffer is never donated to an op's output (donation needs
/// the only reference to the node).
fn recent_scalar(value: ScalarValue, dtype: DType, make: impl FnOnce() -> Array) -> Array {
    let device = crate::backend::default_device();
    let found = RECENT.with(|r| {
        let r = r.borrow();
        r.0.iter().find(|(v, t, d, _)| *v == value && *t == dtype && *d == device).map(|e| e.3.clone())
    });
    if let Some(a) = found {
        return a;
    }
    let a = make();
    RECENT.with(|r| {
        let mut r = r.borrow_mut();
        let (entries, next) = &mut *r;
        let entry = (value, dtype, device, a.clone());
        if entries.len() < RECENT_SCALARS {
            entries.push(entry);
        } else {
            entries[*next] = entry;
            *next = (*next + 1) % RECENT_SCALARS;
        }
    });
    a
}

/// An array of `shape` filled with `v` converted to `dtype`. It is a broadcast view of one
/// element: no memory is used until an op writes a result.
#[track_caller]
pub fn full(shape: &[usize], v: f64, dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("full");
    full_named("full", shape, v, dtype)
}

/// [`full`] for the op named `op` (so a shape too large names the op the user called).
#[track_caller]
fn full_named(op: &'static str, shape: &[usize], v: f64, dtype: DType) -> Array {
    crate::shape::check_shape(|| op.into(), shape, dtype);
    scalar_f64(v, dtype).broadcast_to(shape)
}

/// Zeros of `shape` and `dtype`.
#[track_caller]
pub fn zeros(shape: &[usize], dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("zeros");
    full_named("zeros", shape, 0.0, dtype)
}

/// Ones of `shape` and `dtype`.
#[track_caller]
pub fn ones(shape: &[usize], dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("ones");
    full_named("ones", shape, 1.0, dtype)
}

/// Zeros with the shape, dtype and device of `x`.
#[track_caller]
pub fn zeros_like(x: &Array) -> Array {
    let _op = crate::array::OpScope::enter("zeros_like");
    full_like(x, 0.0)
}

/// Ones with the shape, dtype and device of `x`.
#[track_caller]
pub fn ones_like(x: &Array) -> Array {
    let _op = crate::array::OpScope::enter("ones_like");
    full_like(x, 1.0)
}

/// `v` with the shape, dtype and device of `x`.
#[track_caller]
pub fn full_like(x: &Array, v: f64) -> Array {
    let _op = crate::array::OpScope::enter("full_like");
    scalar_f64(v, x.dtype()).to_device(x.device()).broadcast_to(x.shape())
}

/// An array of `shape` whose element `i` (row-major) is `f(i)`, built now.
///
/// Sizes follow one rule for every constructor that materialises its values (`arange`,
/// `linspace`, `eye`, `tri`): a shape that cannot be an array at all (element count over
/// `usize::MAX`, or more than `isize::MAX` bytes) is a misuse and panics here; a
/// representable shape whose buffer cannot be allocated gives an array that fails to
/// evaluate with [`Error::OutOfMemory`](crate::Error::OutOfMemory), as a kernel's output would.
#[track_caller]
fn materialise<T: BufferElement>(op: &'static str, shape: &[usize], mut f: impl FnMut(usize) -> T) -> Array {
    crate::shape::check_shape(|| op.into(), shape, T::DTYPE);
    let n = crate::shape::numel(shape);
    match crate::backend::try_host_vec::<T>(n) {
        Ok(mut v) => {
            v.extend((0..n).map(&mut f));
            Array::from_vec(v, shape)
        }
        Err(e) => {
            let origin = crate::array::current_origin().map(|o| o.to_string());
            Array::failed(shape, T::DTYPE, e.in_named_op(|| op.into(), origin, shape, T::DTYPE))
        }
    }
}

/// `start, start + step, ...` up to (not including) `stop`, as numpy's `arange`.
///
/// The values are computed now. A count that fits an array but not in memory gives an array
/// whose evaluation returns [`Error::OutOfMemory`](crate::Error::OutOfMemory).
///
/// # Panics
/// If `step` is zero, the count is not a number (`start` or `stop` infinite or NaN), or the
/// count cannot be an array's length at all (more than `usize::MAX` elements or
/// `isize::MAX` bytes of `dtype`, e.g. `arange(0.0, 1e30, 1.0, F32)`).
#[track_caller]
pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("arange");
    assert!(step != 0.0, "cotangent::arange: step must not be zero");
    let count = ((stop - start) / step).ceil().max(0.0);
    assert!(
        !count.is_nan() && count < usize::MAX as f64,
        "cotangent::arange: the element count of arange({start}, {stop}, {step}) is {count}, not a valid length \
         (called at {})",
        std::panic::Location::caller()
    );
    let n = count as usize;
    crate::dispatch_dtype!(dtype, T => materialise::<T>("arange", &[n], |i| <T as Element>::from_f64(start + i as f64 * step)))
}

/// `num` evenly spaced values from `start` to `stop` inclusive, as numpy's `linspace`.
///
/// # Panics
/// If `num` elements of `dtype` are more than `isize::MAX` bytes. Like [`arange`], a count
/// that fits but cannot be allocated gives an array that fails to evaluate.
#[track_caller]
pub fn linspace(start: f64, stop: f64, num: usize, dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("linspace");
    let step = if num > 1 { (stop - start) / (num - 1) as f64 } else { 0.0 };
    crate::dispatch_dtype!(dtype, T => materialise::<T>("linspace", &[num], |i| {
        <T as Element>::from_f64(if i + 1 == num && num > 1 { stop } else { start + i as f64 * step })
    }))
}

/// An `n × m` matrix with ones on diagonal `k` (0 = main, positive above) and zeros elsewhere.
///
/// # Panics
/// If `n × m` elements of `dtype` cannot be an array (see [`arange`] for the size rule).
#[track_caller]
pub fn eye(n: usize, m: usize, k: isize, dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("eye");
    mask("eye", n, m, dtype, |i, j| j as isize - i as isize == k)
}

/// An `n × m` matrix with ones on and below diagonal `k`, as numpy's `tri`.
///
/// # Panics
/// If `n × m` elements of `dtype` cannot be an array (see [`arange`] for the size rule).
#[track_caller]
pub fn tri(n: usize, m: usize, k: isize, dtype: DType) -> Array {
    let _op = crate::array::OpScope::enter("tri");
    mask("tri", n, m, dtype, |i, j| j as isize - i as isize <= k)
}

#[track_caller]
fn mask(op: &'static str, n: usize, m: usize, dtype: DType, f: impl Fn(usize, usize) -> bool) -> Array {
    // `m > 0` whenever `i` is computed (no element otherwise)
    crate::dispatch_dtype!(dtype, T => materialise::<T>(op, &[n, m], |i| T::from_f64(f(i / m, i % m) as u8 as f64)))
}

/// The lower triangle (on and below diagonal `k`) of the last two axes; zeros elsewhere.
#[track_caller]
pub fn tril(x: &Array, k: isize) -> Array {
    let _op = crate::array::OpScope::enter("tril");
    assert!(x.ndim() >= 2, "cotangent::tril: needs at least 2 axes, got shape {:?}", x.shape());
    let (n, m) = (x.shape()[x.ndim() - 2], x.shape()[x.ndim() - 1]);
    crate::ops::select(&tri(n, m, k, DType::Bool).to_device(x.device()), x, zeros_like(x))
}

/// The upper triangle (on and above diagonal `k`) of the last two axes; zeros elsewhere.
#[track_caller]
pub fn triu(x: &Array, k: isize) -> Array {
    let _op = crate::array::OpScope::enter("triu");
    assert!(x.ndim() >= 2, "cotangent::triu: needs at least 2 axes, got shape {:?}", x.shape());
    let (n, m) = (x.shape()[x.ndim() - 2], x.shape()[x.ndim() - 1]);
    crate::ops::select(&tri(n, m, k - 1, DType::Bool).to_device(x.device()), zeros_like(x), x)
}

impl Array {
    /// Lower triangle, see [`tril`].
    #[track_caller]
    pub fn tril(&self, k: isize) -> Array {
        let _op = crate::array::OpScope::enter("tril");
        tril(self, k)
    }
    /// Upper triangle, see [`triu`].
    #[track_caller]
    pub fn triu(&self, k: isize) -> Array {
        let _op = crate::array::OpScope::enter("triu");
        triu(self, k)
    }
}
