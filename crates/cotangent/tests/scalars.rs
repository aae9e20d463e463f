//! Rust numbers on either side of `+ - * / %`, for every number type an operand may be.
use cotangent::{self as ct, Array, DType};

fn f32s(x: &Array) -> Vec<f32> {
    x.to_vec::<f32>().unwrap()
}

macro_rules! on_both_sides {
    ($($t:ty),*) => {$({
        let x = Array::from_slice(&[1.0f32, 2.0, 4.0], &[3]);
        let two = <$t>::from(2u8);
        let t = stringify!($t);
        // the scalar is weakly typed: the array's dtype wins
        assert_eq!((two + &x).dtype(), DType::F32, "{t}");
        assert_eq!(f32s(&(two + &x)), vec![3.0, 4.0, 6.0], "{t}");
        assert_eq!(f32s(&(two - &x)), vec![1.0, 0.0, -2.0], "{t}");
        assert_eq!(f32s(&(two * x.clone())), vec![2.0, 4.0, 8.0], "{t}");
        assert_eq!(f32s(&(two / &x)), vec![2.0, 1.0, 0.5], "{t}");
        assert_eq!(f32s(&(two % &x)), vec![0.0, 0.0, 2.0], "{t}");
        assert_eq!(f32s(&(&x + two)), vec![3.0, 4.0, 6.0], "{t}");
        assert_eq!(f32s(&(x.clone() - two)), vec![-1.0, 0.0, 2.0], "{t}");
        assert_eq!(f32s(&(&x * two)), vec![2.0, 4.0, 8.0], "{t}");
        assert_eq!(f32s(&(&x / two)), vec![0.5, 1.0, 2.0], "{t}");
        assert_eq!(f32s(&(&x % two)), vec![1.0, 0.0, 0.0], "{t}");
    })*};
}

#[test]
fn every_number_type_works_on_the_left_and_on_the_right() {
    on_both_sides!(f32, f64, i32, i64, u32, u8, usize, isize);
}

#[test]
fn integer_arrays_with_scalars_on_the_left() {
    let x = Array::from_slice(&[1i32, 2, 4], &[3]);
    let y = 3i64 - &x;
    assert_eq!(y.dtype(), DType::I32);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![2, 1, -1]);
    let z = 2.0f32 * &x; // a float scalar makes an integer array float
    assert_eq!(z.dtype(), DType::F32);
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 8.0]);
    let w = &x / 2u8; // `/` is true division
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![0.5, 1.0, 2.0]);
    let v = 10usize % &x;
    assert_eq!(v.to_vec::<i32>().unwrap(), vec![0, 0, 2]);
    // an unsuffixed literal on the left could be any of the types: Rust settles it (f64,
    // i32) only at the end, so the result needs its type named before a method call on it
    assert_eq!(f32s(&(1.5 * &z)), vec![3.0, 6.0, 12.0]);
    let y: Array = 1 + &x;
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![2, 3, 5]);
    assert_eq!((1i32 + &x).to_vec::<i32>().unwrap(), vec![2, 3, 5]);
}

/// Tests that swap the process-wide panic hook take turns.
static HOOK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run `f`, which must panic; return its message and the panic's (file, line).
fn panic_of(f: impl FnOnce()) -> (String, String, u32) {
    use std::sync::{Arc, Mutex};
    let _turn = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    let seen: Arc<Mutex<Option<(String, u32)>>> = Arc::default();
    let record = seen.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        *record.lock().unwrap_or_else(|e| e.into_inner()) = info.location().map(|l| (l.file().to_string(), l.line()));
    }));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(previous);
    let payload = result.expect_err("the call should have panicked");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .expect("a string panic message");
    let (file, line) = seen.lock().unwrap().clone().expect("the hook saw the location");
    (message, file, line)
}

/// `$call` panics at the lines of this invocation, in this file, with exactly the message `$message`.
macro_rules! panics_here {
    ($call:expr, $message:expr $(,)?) => {{
        let line = line!();
        let (message, file, at) = panic_of(|| {
            let _ = $call;
        });
        assert_eq!(file, file!(), "the panic should be reported in the caller's file: {message}");
        assert!((line..line + 4).contains(&at), "the panic should be reported at line {line}, not {at}: {message}");
        assert_eq!(message, $message);
    }};
}

#[test]
fn integers_that_do_not_fit_the_arrays_dtype_panic_at_the_callers_line() {
    let i32s = Array::from_slice(&[1i32, 2], &[2]);
    panics_here!(
        &i32s + 3_000_000_000i64,
        "cotangent::add: the integer 3000000000 does not fit int32, the dtype of the array it is combined with \
         (int32 holds -2147483648..=2147483647); cast the array to a wider dtype first, e.g. `x.astype(DType::I64)`"
    );
    panics_here!(
        -3_000_000_000i64 * i32s.clone(),
        "cotangent::multiply: the integer -3000000000 does not fit int32, the dtype of the array it is combined \
         with (int32 holds -2147483648..=2147483647); cast the array to a wider dtype first, e.g. \
         `x.astype(DType::I64)`"
    );
    let u8s = Array::from_slice(&[1u8, 2], &[2]);
    panics_here!(
        &u8s - -1,
        "cotangent::subtract: the integer -1 does not fit uint8, the dtype of the array it is combined with (uint8 \
         holds 0..=255); cast the array to a wider dtype first, e.g. `x.astype(DType::I64)`"
    );
    panics_here!(u8s.maximum(256), "cotangent::maximum: the integer 256 does not fit uint8, the dtype of the array it is combined with (uint8 holds 0..=255); cast the array to a wider dtype first, e.g. `x.astype(DType::I64)`");
    let u32s = Array::from_slice(&[1u32], &[1]);
    panics_here!(&u32s % (1i64 << 32), "cotangent::remainder: the integer 4294967296 does not fit uint32, the dtype of the array it is combined with (uint32 holds 0..=4294967295); cast the array to a wider dtype first, e.g. `x.astype(DType::I64)`");
    let f16s = Array::from_slice(&[1.0f32], &[1]).astype(DType::F16);
    panics_here!(&f16s + 100_000, "cotangent::add: the integer 100000 does not fit float16, the dtype of the array it is combined with (float16 holds finite values up to ±65504); cast the array to a wider dtype first, e.g. `x.astype(DType::I64)`");
    let cond = Array::from_slice(&[true, false], &[2]);
    panics_here!(ct::select(&cond, &u8s, -5), "cotangent::select: the integer -5 does not fit uint8, the dtype of the array it is combined with (uint8 holds 0..=255); cast the array to a wider dtype first, e.g. `x.astype(DType::I64)`");
    panics_here!(
        &i32s + usize::MAX,
        format!(
            "cotangent: the Rust integer {} is larger than any array dtype holds (the largest int64 is {})",
            usize::MAX,
            i64::MAX
        )
    );
}

#[test]
fn integers_that_fit_keep_working_at_the_edges_of_each_dtype() {
    let i32s = Array::from_slice(&[0i32, -1], &[2]);
    assert_eq!((&i32s + 2_147_483_647i64).to_vec::<i32>().unwrap(), vec![i32::MAX, i32::MAX - 1]);
    assert_eq!((&i32s + i32::MIN as i64 + 1).to_vec::<i32>().unwrap(), vec![i32::MIN + 1, i32::MIN]);
    let u8s = Array::from_slice(&[0u8, 5], &[2]);
    assert_eq!((&u8s + 255).to_vec::<u8>().unwrap(), vec![255, 4], "in-range operands still wrap like numpy's uint8");
    let i64s = Array::from_slice(&[1i64], &[1]);
    assert_eq!((&i64s + 3_000_000_000i64).to_vec::<i64>().unwrap(), vec![3_000_000_001]);
    // a cast makes room, as the message says
    let wide = Array::from_slice(&[1i32, 2], &[2]).astype(DType::I64) + 3_000_000_000i64;
    assert_eq!(wide.to_vec::<i64>().unwrap(), vec![3_000_000_001, 3_000_000_002]);
    // floats hold large integers approximately (rounded, never wrapped)
    let f32s = Array::from_slice(&[0.0f32], &[1]);
    assert_eq!((&f32s + 16_777_217).to_vec::<f32>().unwrap(), vec![16_777_216.0]);
    assert_eq!((&f32s + 3_000_000_000i64).to_vec::<f32>().unwrap(), vec![3e9]);
    // float numbers with integer arrays promote to float32, as documented (no truncation)
    assert_eq!((Array::from_slice(&[1i32], &[1]) + 0.5).to_vec::<f32>().unwrap(), vec![1.5]);
    // bool arrays with integers are int32
    let b = Array::from_slice(&[true, false], &[2]);
    assert_eq!((&b + 2).to_vec::<i32>().unwrap(), vec![3, 2]);
}
