//! Misusing an op panics at the caller's line, with a message naming the op and the shapes.
//!
//! Each check runs the misuse under `catch_unwind` with a panic hook that records
//! `PanicHookInfo::location()`: the location must be this file, on the line of the call, not a
//! line inside cotangent. (`#[track_caller]` is only forwarded by functions that carry it and
//! call on outside closures, so every family of ops is checked.)
use cotangent::{self as ct, Array, DType};
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe, PanicHookInfo};
use std::sync::Once;

thread_local! {
    /// Whether this thread's panics are being captured (others print as usual).
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    /// The last captured panic on this thread: file, line, message.
    static LAST: RefCell<Option<(String, u32, String)>> = const { RefCell::new(None) };
}

fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
            if !CAPTURING.with(|c| c.get()) {
                return default(info);
            }
            let message = if let Some(s) = info.payload().downcast_ref::<&str>() {
                s.to_string()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                String::new()
            };
            let (file, line) = info.location().map_or((String::new(), 0), |l| (l.file().to_string(), l.line()));
            LAST.with(|l| *l.borrow_mut() = Some((file, line, message)));
        }));
    });
}

/// Runs `f`, which must panic; returns the panic's file, line and message.
fn capture(f: impl FnOnce()) -> (String, u32, String) {
    install_hook();
    LAST.with(|l| l.borrow_mut().take());
    CAPTURING.with(|c| c.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CAPTURING.with(|c| c.set(false));
    assert!(result.is_err(), "expected a panic");
    LAST.with(|l| l.borrow_mut().take()).expect("the panic hook saw the panic")
}

/// Evaluates to the panic message of `$e`, after checking that the panic points at this file
/// and at the line of the macro call (write the misuse on that line).
macro_rules! misuse {
    ($e:expr) => {{
        let line = line!();
        let (file, at, message) = capture(|| {
            let _ = $e;
        });
        assert!(file.ends_with("tests/misuse.rs") && file == file!(), "panicked at {file}:{at}: {message}");
        assert_eq!(at, line, "panicked at line {at} instead of the call's line {line}: {message}");
        message
    }};
}

/// Asserts that `message` contains every one of `parts`.
#[track_caller]
fn names(message: &str, parts: &[&str]) {
    for p in parts {
        assert!(message.contains(p), "{p:?} missing from the panic message: {message}");
    }
}

fn f32s(shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::from_vec((0..n).map(|i| i as f32).collect::<Vec<_>>(), shape)
}

#[test]
fn broadcasting_in_binary_ops() {
    let a = f32s(&[2, 3]);
    let b = Array::from_slice(&[1i32, 2, 3, 4], &[4]);
    let m = misuse!(&a + &b);
    names(&m, &["cotangent::add", "[2, 3]", "[4]", "float32", "do not broadcast"]);
    let m = misuse!(a.clone() * b.clone());
    names(&m, &["cotangent::multiply", "[2, 3]", "[4]"]);
    let m = misuse!(&a - &b);
    names(&m, &["cotangent::subtract", "[2, 3]", "[4]"]);
    let m = misuse!(&a / &b);
    names(&m, &["cotangent::divide", "[2, 3]", "[4]"]);
    let m = misuse!(&a % &b);
    names(&m, &["cotangent::remainder", "[2, 3]", "[4]"]);
    let m = misuse!(a.maximum(&b));
    names(&m, &["cotangent::maximum", "[2, 3]", "[4]"]);
    let m = misuse!(ct::power(&a, &b));
    names(&m, &["cotangent::power", "[2, 3]", "[4]"]);
    let m = misuse!(a.less(&b));
    names(&m, &["cotangent::less", "[2, 3]", "[4]"]);
    let m = misuse!(ct::logical_and(&a, &b));
    names(&m, &["cotangent::logical_and", "[2, 3]", "[4]"]);
    let m = misuse!(a.clip(&b, 10.0));
    names(&m, &["cotangent::maximum", "[2, 3]", "[4]"]);
}

#[test]
fn broadcasting_in_select() {
    let a = f32s(&[2, 3]);
    let cond = Array::from_slice(&[true, false], &[2]);
    let m = misuse!(ct::select(&cond, &a, 0.0));
    names(&m, &["cotangent::select", "[2]", "[2, 3]", "bool", "float32", "do not broadcast"]);
    let m = misuse!(ct::select(&a.greater(1.0), &a, f32s(&[4])));
    names(&m, &["cotangent::select", "[2, 3]", "[4]"]);
    let m = misuse!(a.tril(0).reshape(&[-1]).triu(0));
    names(&m, &["cotangent::triu", "[6]"]);
}

#[test]
fn matmul_shapes() {
    let a = f32s(&[2, 3]);
    let m = misuse!(a.matmul(&a));
    names(&m, &["cotangent::matmul", "contracted extents differ", "[2, 3]", "float32"]);
    let m = misuse!(ct::matmul(&f32s(&[2, 2, 3]), &f32s(&[3, 3, 4])));
    names(&m, &["cotangent::matmul", "batch axes", "[2, 2, 3]", "[3, 3, 4]", "do not broadcast"]);
    let m = misuse!(ct::matmul(&Array::scalar(1.0f32), &a));
    names(&m, &["cotangent::matmul", "at least one axis", "[]", "[2, 3]"]);
    let m = misuse!(ct::tensordot(&a, &a, ([0], [1])));
    names(&m, &["cotangent::tensordot", "[2, 3]", "differ in extent"]);
    let m = misuse!(ct::tensordot(&a, &a, ([0], [5])));
    names(&m, &["cotangent::tensordot", "axis 5", "[2, 3]"]);
    let m = misuse!(ct::einsum("ij,jk->ik", &[a.clone(), f32s(&[4, 2])]));
    names(&m, &["cotangent::einsum", "'j'", "extents 3 and 4"]);
    let m = misuse!(ct::einsum("i.j,jk->ik", &[a.clone(), a.clone()]));
    names(&m, &["cotangent::einsum", "ellipsis"]);
    let m = misuse!(ct::outer(&a, &f32s(&[2])) + f32s(&[5]));
    names(&m, &["cotangent::add", "[6, 2]", "[5]"]);
}

#[test]
fn bad_axes() {
    let x = f32s(&[2, 3]);
    let m = misuse!(x.sum(&[2], false));
    names(&m, &["cotangent::sum", "axis 2", "[2, 3]"]);
    let m = misuse!(ct::sum(&x, &[0, -3], true));
    names(&m, &["cotangent::sum", "axis -3", "[2, 3]"]);
    let m = misuse!(x.mean(&[5], false));
    names(&m, &["cotangent::mean", "axis 5"]);
    let m = misuse!(x.max(&[0, 0], false));
    names(&m, &["cotangent::max", "repeated axis"]);
    let m = misuse!(x.var(&[3], false, 0));
    names(&m, &["cotangent::var", "axis 3"]);
    let m = misuse!(x.logsumexp(&[2], false));
    names(&m, &["cotangent::logsumexp", "axis 2", "[2, 3]"]);
    let m = misuse!(x.softmax(&[-4]));
    names(&m, &["cotangent::softmax", "axis -4"]);
    let m = misuse!(x.argmax(2, false));
    names(&m, &["cotangent::argmax", "axis 2"]);
    let m = misuse!(x.cumsum(2));
    names(&m, &["cotangent::cumsum", "axis 2"]);
    let m = misuse!(x.transpose(&[0, 2]));
    names(&m, &["cotangent::transpose", "axis 2", "[2, 3]"]);
    let m = misuse!(x.transpose(&[0, 0]));
    names(&m, &["cotangent::transpose", "not a permutation"]);
    let m = misuse!(x.swapaxes(0, 7));
    names(&m, &["cotangent::swapaxes", "axis 7"]);
    let m = misuse!(x.moveaxis(-3, 0));
    names(&m, &["cotangent::moveaxis", "axis -3"]);
    let m = misuse!(x.expand_dims(&[3]));
    names(&m, &["cotangent::expand_dims", "axis 3", "[2, 3]"]);
    let m = misuse!(x.squeeze(&[4]));
    names(&m, &["cotangent::squeeze", "axis 4"]);
    let m = misuse!(x.squeeze(&[0]));
    names(&m, &["cotangent::squeeze", "not of size 1", "[2, 3]"]);
    let m = misuse!(x.flip(&[2]));
    names(&m, &["cotangent::flip", "axis 2"]);
    let m = misuse!(x.repeat(2, 2));
    names(&m, &["cotangent::repeat", "axis 2"]);
    let m = misuse!(x.split(2, 1));
    names(&m, &["cotangent::split", "[2, 3]", "2 equal sections"]);
    let m = misuse!(x.dim(2));
    names(&m, &["cotangent::dim", "axis 2", "[2, 3]"]);
    let m = misuse!(ct::random::categorical(&ct::random::key(0), &x, 2));
    names(&m, &["cotangent::random::categorical", "axis 2"]);
}

#[test]
fn reshape() {
    let x = f32s(&[2, 3]);
    let m = misuse!(x.reshape(&[4, -1]));
    names(&m, &["cotangent::reshape", "[2, 3]", "[4, -1]", "6 elements"]);
    let m = misuse!(x.reshape(&[-1, -1]));
    names(&m, &["cotangent::reshape", "at most one -1", "[-1, -1]"]);
    let m = misuse!(ct::reshape(&x, &[4, 2]));
    names(&m, &["cotangent::reshape", "[2, 3]", "[4, 2]"]);
    let m = misuse!(x.reshape_exact(&[5]));
    names(&m, &["cotangent::reshape", "[2, 3]", "[5]"]);
    let m = misuse!(x.broadcast_to(&[3, 3]));
    names(&m, &["cotangent::broadcast_to", "[2, 3]", "[3, 3]"]);
}

#[test]
fn concatenate_and_stack() {
    let (a, b) = (f32s(&[2, 3]), f32s(&[2, 4]));
    let m = misuse!(ct::concatenate(&[a.clone(), b.clone()], 0));
    names(&m, &["cotangent::concatenate", "[[2, 3], [2, 4]]", "disagree outside axis 0"]);
    let m = misuse!(Array::concatenate(&[a.clone(), b.clone()], 2));
    names(&m, &["cotangent::concatenate", "axis 2"]);
    let m = misuse!(ct::concatenate(&[], 0));
    names(&m, &["cotangent::concatenate", "at least one"]);
    let m = misuse!(ct::stack(&[a.clone(), b.clone()], 0));
    names(&m, &["cotangent::stack", "[[2, 3], [2, 4]]", "differ"]);
    let m = misuse!(Array::stack(&[a.clone(), a.clone()], 4));
    names(&m, &["cotangent::stack", "axis 4"]);
}

#[test]
fn slicing() {
    let x = f32s(&[2, 3]);
    let m = misuse!(x.slice(&[0, 0, 0], &[1, 1, 1], &[]));
    names(&m, &["cotangent::slice", "3 axes sliced", "[2, 3]"]);
    let m = misuse!(ct::slice(&x, &[0], &[1], &[0]));
    names(&m, &["cotangent::slice", "step of axis 0 is zero"]);
    let m = misuse!(x.slice_axis(2, None, None, 1));
    names(&m, &["cotangent::slice_axis", "axis 2", "[2, 3]"]);
    let m = misuse!(x.slice_update(&f32s(&[2]), &[0], &[2], &[]));
    names(&m, &["cotangent::slice_update", "update of shape [2]", "[2, 3]"]);
    let m = misuse!(x.pad(&[(1, 1); 3], 0.0));
    names(&m, &["cotangent::pad", "[2, 3]"]);
    let m = misuse!(x.pad(&[(usize::MAX, 1)], 0.0));
    names(&m, &["cotangent::pad", "overflows usize"]);
    let m = misuse!(x.tile(&[usize::MAX, 2]));
    names(&m, &["cotangent::tile", "overflows usize"]);
    let m = misuse!(x.repeat(usize::MAX, 1));
    names(&m, &["cotangent::repeat", "overflows usize"]);
}

#[test]
fn indexing() {
    let x = f32s(&[2, 3]);
    let idx = Array::from_slice(&[0i32, 1], &[2]);
    let m = misuse!(x.take(&f32s(&[2]), 0));
    names(&m, &["cotangent::take", "integer dtype", "float32", "[2]"]);
    let m = misuse!(ct::take(&x, &idx, 2));
    names(&m, &["cotangent::take", "axis 2", "[2, 3]"]);
    let m = misuse!(x.take_along_axis(&idx, 1));
    names(&m, &["cotangent::take_along_axis", "[2]", "rank", "[2, 3]"]);
    let m = misuse!(x.take_along_axis(&Array::from_slice(&[0i32; 3], &[3, 1]), 1));
    names(&m, &["cotangent::take_along_axis", "[3, 1]", "[2, 3]", "axis 0"]);
    let m = misuse!(x.put_along_axis(&idx.reshape(&[2, 1]), &f32s(&[3]), 1));
    names(&m, &["cotangent::put_along_axis", "values of shape [3]", "[2, 1]"]);
    let m = misuse!(x.scatter_add(&idx, &f32s(&[4]), 0));
    names(&m, &["cotangent::scatter_add", "[4]", "[2, 3]"]);
    let m = misuse!(ct::one_hot(&x, 3, DType::F32));
    names(&m, &["cotangent::one_hot", "integer dtype", "float32"]);
}

#[test]
fn creation_and_random() {
    let m = misuse!(Array::from_slice(&[1.0f32, 2.0, 3.0], &[2, 2]));
    names(&m, &["cotangent::from_slice", "3 elements", "[2, 2]"]);
    let m = misuse!(ct::arange(0.0, 1.0, 0.0, DType::F32));
    names(&m, &["cotangent::arange", "step"]);
    let m = misuse!(ct::zeros(&[usize::MAX, 2], DType::F32));
    names(&m, &["cotangent::zeros", "too large", "float32"]);
    let m = misuse!(ct::tril(&f32s(&[3]), 0));
    names(&m, &["cotangent::tril", "[3]"]);
    let bad_key = Array::from_slice(&[1u32, 2, 3], &[3]);
    let m = misuse!(ct::random::normal(&bad_key, &[2], DType::F32));
    names(&m, &["cotangent::random::normal", "[3]", "uint32"]);
    let m = misuse!(ct::random::split_keys(&bad_key, 2));
    names(&m, &["cotangent::random::split_keys", "[3]"]);
    let m = misuse!(ct::random::uniform(&ct::random::key(1), &[2], 0.0, 1.0, DType::I32));
    names(&m, &["cotangent::random::uniform", "float type", "int32"]);
}

#[test]
fn rows_and_entries() {
    let x = f32s(&[2, 3]);
    let m = misuse!(x.index(2));
    names(&m, &["cotangent::index", "index 2", "axis 0 of extent 2", "[2, 3]", "float32"]);
    let m = misuse!(x.index(-3));
    names(&m, &["cotangent::index", "index -3", "axis 0 of extent 2"]);
    let m = misuse!(Array::scalar(1.0f32).index(0));
    names(&m, &["cotangent::index", "0-d"]);
    let m = misuse!(x.index_axis(2, 0));
    names(&m, &["cotangent::index_axis", "axis 2", "[2, 3]"]);
    let m = misuse!(ct::index_axis(&x, 1, 3));
    names(&m, &["cotangent::index_axis", "index 3", "axis 1 of extent 3"]);
    let m = misuse!(ct::index(&x, 5));
    names(&m, &["cotangent::index", "index 5"]);
}
