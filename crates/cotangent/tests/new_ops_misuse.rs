//! Misusing argsort, sort, topk, conv1d/conv2d, rope, scaled_dot_product_attention,
//! slice_ranges, `s!` and scan panics at the caller's line with a sentence naming the op, the
//! shapes and the dtypes. A panic hook records `PanicHookInfo::location()` for the check.
use cotangent::{self as ct, s, Array, AttentionMask, ConvOptions, DType};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

/// The last panic's file, line and message (the tests of this file run one at a time under it).
static LAST: Mutex<Option<(String, u32, String)>> = Mutex::new(None);
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `f`, which must panic, and returns where and what.
fn capture(f: impl FnOnce()) -> (String, u32, String) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let default = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let (file, line) = info.location().map_or((String::new(), 0), |l| (l.file().to_string(), l.line()));
        *LAST.lock().unwrap_or_else(|e| e.into_inner()) = Some((file, line, message));
    }));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(default);
    assert!(result.is_err(), "expected a panic");
    LAST.lock().unwrap_or_else(|e| e.into_inner()).take().expect("the hook saw the panic")
}

/// The panic message of `$e`, checked to point at this file and the macro call's line.
macro_rules! misuse {
    ($e:expr) => {{
        let line = line!();
        let (file, at, message) = capture(|| {
            let _ = $e;
        });
        assert!(file == file!() && at == line, "panicked at {file}:{at} instead of {}:{line}: {message}", file!());
        message
    }};
}

#[test]
fn sorting_ops_panic_at_the_callers_line() {
    let x = ct::zeros(&[2, 3], DType::F32);
    let m = misuse!(x.argsort(-3, false));
    assert_eq!(m, "cotangent::argsort: axis -3 is out of range for shape [2, 3] (2 axes)");
    let m = misuse!(ct::sort(&Array::scalar(1i32), 0, true));
    assert_eq!(m, "cotangent::sort: a 0-d array (int32) has no axis to sort along (axis 0)");
    let m = misuse!(ct::topk(&x, 5, 0));
    assert_eq!(m, "cotangent::topk: k = 5 exceeds the extent 2 of axis 0 of the array of shape [2, 3] (float32)");
}

#[test]
fn convolutions_panic_at_the_callers_line() {
    let (x, w) = (ct::zeros(&[1, 4, 8], DType::F32), ct::zeros(&[2, 3, 3], DType::F32));
    let m = misuse!(ct::conv1d(&x, &w, ConvOptions::default()));
    assert!(m.starts_with("cotangent::conv1d: the weight of shape [2, 3, 3] has 3 input channels per group"), "{m}");
    let m = misuse!(x.conv1d(&w, ConvOptions::default().stride(0)));
    assert!(m.starts_with("cotangent::conv1d: the weight"), "{m}");
    let m = misuse!(ct::conv2d(&x, &w.reshape(&[2, 3, 3, 1]), ConvOptions::default()));
    assert!(m.contains("must be [N, C, H, W] and [O, C / groups, KH, KW], got shapes [1, 4, 8] (float32)"), "{m}");
    let x4 = ct::zeros(&[1, 4, 5, 5], DType::F32);
    let m = misuse!(x4.conv2d(&ct::zeros(&[4, 1, 3, 3], DType::F32), ConvOptions::default().stride(0).groups(4)));
    assert_eq!(m, "cotangent::conv2d: stride [0, 0] and dilation [1, 1] must be at least 1");
}

#[test]
fn attention_ops_panic_at_the_callers_line() {
    let q = ct::zeros(&[1, 2, 3, 4], DType::F32);
    let m = misuse!(ct::rope(&q, 6, false, 10000.0, 1.0, 0));
    assert!(m.starts_with("cotangent::rope: dims = 6 must be even and at most the feature extent 4"), "{m}");
    let m = misuse!(ct::rope(&q.astype(DType::I32), 2, false, 10000.0, 1.0, 0));
    assert!(m.starts_with("cotangent::rope: needs a float array"), "{m}");
    let m = misuse!(ct::scaled_dot_product_attention(&q, &q.astype(DType::F16), &q, 0.5, AttentionMask::None));
    assert!(m.contains("q, k and v must be floats of one dtype, got float32, float16 and float32"), "{m}");
    let mask = ct::zeros(&[3, 3], DType::I32);
    let m = misuse!(ct::scaled_dot_product_attention(&q, &q, &q, 0.5, &mask));
    assert!(m.contains("the mask must be boolean (true = attend) or float"), "{m}");
}

#[test]
fn slicing_and_scan_panic_at_the_callers_line() {
    let x = ct::zeros(&[2, 3], DType::F32);
    let m = misuse!(x.slice_ranges(s![.., -4]));
    assert!(m.starts_with("cotangent::slice_ranges: index -4 is out of range for axis 1 of extent 3"), "{m}");
    let m = misuse!(x.slice_ranges(s![..;0]));
    assert!(m.starts_with("cotangent::slice_ranges: the step of axis 0 is zero"), "{m}");
    let m = misuse!(s![.., 1;2]);
    assert!(m.starts_with("cotangent::s!: the index 1 cannot take a step"), "{m}");
    let m = misuse!(ct::scan(|c, _| (c.to_vec(), vec![]), &[], &[x.clone(), ct::zeros(&[3], DType::F32)]));
    assert!(m.starts_with("cotangent::scan: xs must be at least one array, each with the same leading extent"), "{m}");
}
