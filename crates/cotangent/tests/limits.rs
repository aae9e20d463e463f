//! Limits (issue 13): shapes whose element count or byte size cannot exist are rejected when
//! the op is built (a clear panic naming the op, never a kernel reading a wrapped-around view),
//! buffers that cannot be allocated are an `Err` from `eval` (never an abort), and integer
//! arithmetic wraps at the extreme values instead of panicking.
use cotangent::{self as ct, Array, DType, Error};

const HUGE: usize = (1 << 60) + 1;

// ----- shapes that cannot exist: panics at build time -------------------------------------------

#[test]
#[should_panic(
    expected = "cotangent::from_vec: an array of shape [64, 1152921504606846977] and dtype float32 is too large: its element count overflows usize"
)]
fn from_vec_with_a_wrapping_element_count_panics() {
    // 64 · (2^60 + 1) wraps to 64 in usize: it must not be taken for the vector's length
    let _ = Array::from_vec(vec![1f32; 64], &[64, HUGE]);
}

#[test]
#[should_panic(expected = "its element count overflows usize")]
fn from_slice_with_a_wrapping_element_count_panics() {
    let _ = Array::from_slice(&[1u8; 64], &[64, HUGE]);
}

#[test]
#[should_panic(
    expected = "cotangent::zeros: an array of shape [4294967296, 4294967296] and dtype float32 is too large"
)]
fn zeros_whose_element_count_wraps_to_zero_panics() {
    // 2^32 · 2^32 wraps to 0: it used to give an array of size 0
    let _ = ct::zeros(&[1 << 32, 1 << 32], DType::F32);
}

#[test]
#[should_panic(expected = "are 9223372036854775808 bytes, more than isize::MAX")]
fn zeros_of_more_than_isize_max_bytes_panics() {
    // 2^61 f32 elements fit usize but are 2^63 bytes
    let _ = ct::zeros(&[1 << 61], DType::F32);
}

#[test]
#[should_panic(expected = "(called at crates/cotangent/tests/limits.rs")]
fn the_message_names_the_callers_location() {
    let _ = ct::ones(&[1 << 40, 1 << 40], DType::F64);
}

#[test]
#[should_panic(expected = "cotangent::reshape")]
fn reshape_to_a_wrapping_shape_panics() {
    let x = Array::from_vec(vec![1f32; 64], &[64]);
    let _ = x.reshape(&[64, HUGE as isize]);
}

#[test]
#[should_panic(expected = "cotangent::reshape")]
fn reshape_with_an_inferred_axis_and_a_wrapping_product_panics() {
    let x = Array::from_vec(vec![1f32; 64], &[64]);
    let _ = x.reshape(&[1 << 40, 1 << 40, -1]);
}

#[test]
#[should_panic(expected = "cotangent::broadcast_to")]
fn broadcast_to_a_wrapping_shape_panics() {
    let x = Array::from_vec(vec![1f32; 2], &[1, 2]);
    let _ = x.broadcast_to(&[1 << 63, 2]);
}

#[test]
#[should_panic(expected = "cotangent::concatenate")]
fn concatenate_whose_joined_extent_wraps_panics() {
    // four views of 2^62 bools each exist (2^62 bytes); joined they would be 2^64 = 0 elements
    let x = ct::zeros(&[1 << 62], DType::Bool);
    let _ = ct::concatenate(&[x.clone(), x.clone(), x.clone(), x], 0);
}

#[test]
#[should_panic(expected = "cotangent::concatenate")]
fn concatenate_of_more_than_isize_max_bytes_panics() {
    let x = ct::zeros(&[1 << 60], DType::F32); // 2^62 bytes; two of them are 2^63
    let _ = ct::concatenate(&[x.clone(), x], 0);
}

#[test]
#[should_panic(expected = "cotangent::matmul")]
fn matmul_whose_broadcast_batch_wraps_panics() {
    // [2^40, 1, 2, 2] @ [2^40, 2, 2] broadcasts to a batch of 2^80 matrices
    let a = ct::zeros(&[1 << 40, 1, 2, 2], DType::F32);
    let b = ct::zeros(&[1 << 40, 2, 2], DType::F32);
    let _ = a.matmul(&b);
}

#[test]
#[should_panic(expected = "cotangent::matmul")]
fn matmul_whose_output_wraps_panics() {
    let a = ct::zeros(&[1 << 33, 1], DType::F32);
    let b = ct::zeros(&[1, 1 << 33], DType::F32);
    let _ = a.matmul(&b);
}

#[test]
#[should_panic(expected = "cotangent::pad")]
fn pad_past_usize_panics() {
    let x = ct::zeros(&[4], DType::U8);
    let _ = x.pad(&[(usize::MAX, 1)], 0.0);
}

#[test]
#[should_panic(expected = "cotangent::tile")]
fn tile_past_usize_panics() {
    let x = ct::zeros(&[1 << 40], DType::U8);
    let _ = x.tile(&[1 << 40]);
}

#[test]
#[should_panic(expected = "cotangent::repeat")]
fn repeat_past_isize_max_bytes_panics() {
    let x = ct::zeros(&[1 << 40], DType::F32);
    let _ = x.repeat(1 << 30, 0);
}

#[test]
#[should_panic(expected = "cotangent::stack")]
fn stack_of_too_large_arrays_panics() {
    let x = ct::zeros(&[1 << 60], DType::F32);
    let _ = ct::stack(&[x.clone(), x], 0);
}

#[test]
#[should_panic(expected = "cotangent::arange")]
fn arange_with_a_count_beyond_usize_panics() {
    let _ = ct::arange(0.0, 1e30, 1.0, DType::F32);
}

#[test]
#[should_panic(expected = "cotangent::linspace")]
fn linspace_of_more_than_isize_max_bytes_panics() {
    let _ = ct::linspace(0.0, 1.0, 1 << 62, DType::F64);
}

#[test]
#[should_panic(expected = "cotangent::eye")]
fn eye_whose_element_count_wraps_panics() {
    let _ = ct::eye(1 << 32, 1 << 32, 0, DType::F32);
}

#[test]
fn slices_of_large_views_take_the_right_rows() {
    // a large (2^31 × 4) broadcast view is representable; slicing rows of it must not wrap
    let row = Array::from_slice(&[1f32, 2.0, 3.0, 4.0], &[1, 4]);
    let big = row.broadcast_to(&[1 << 31, 4]);
    let s = big.slice(&[(1 << 31) - 2, 1], &[(1 << 31) - 1, 3], &[1, 1]);
    assert_eq!(s.shape(), &[1, 2]);
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
}

#[test]
fn shapes_with_a_zero_extent_are_empty() {
    let x = ct::zeros(&[0, 1 << 40], DType::F32);
    assert_eq!(x.size(), 0);
    assert_eq!((&x + 1.0).to_vec::<f32>().unwrap(), Vec::<f32>::new());
}

// ----- buffers that cannot be allocated: Err from eval --------------------------------------------

/// Whether `err` is the out-of-memory error of `op` for a result of `shape` and `dtype`.
fn is_oom(err: &Error, op: &str, shape: &[usize], dtype: DType) -> bool {
    matches!(err, Error::OutOfMemory { op: o, shape: s, dtype: d, bytes, .. } if o == op && s == shape && *d == dtype && *bytes > 0)
}

#[test]
fn an_output_that_cannot_be_allocated_is_an_err() {
    // 4 TiB: more than the machine's memory (the allocator, or cotangent's own check against
    // RAM + swap under overcommit, refuses it without touching any page)
    let y = ct::zeros(&[1 << 40], DType::F32) + 1.0;
    let err = y.eval().unwrap_err();
    assert!(is_oom(&err, "add", &[1 << 40], DType::F32), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("add") && msg.contains("4398046511104 bytes") && msg.contains("float32"), "{msg}");
}

#[test]
fn an_output_beyond_any_address_space_is_an_err() {
    // 2^61 bytes: representable (< isize::MAX) but larger than any address space, so the
    // allocator refuses it whatever the overcommit policy
    let y = ct::zeros(&[1 << 59], DType::F32).exp();
    let err = y.eval().unwrap_err();
    assert!(is_oom(&err, "exp", &[1 << 59], DType::F32), "{err:?}");
}

#[test]
fn a_failed_node_reports_the_same_error_every_time() {
    let y = ct::zeros(&[1 << 40], DType::F32) * 2.0;
    let first = y.eval().unwrap_err();
    let second = y.eval().unwrap_err();
    assert_eq!(first, second);
    assert_eq!(y.to_vec::<f32>().unwrap_err(), first);
    // and a consumer fails with it too
    let z = &y + 1.0;
    assert_eq!(z.eval().unwrap_err(), first);
}

#[test]
fn other_kernels_report_out_of_memory() {
    let big = ct::zeros(&[1 << 40], DType::F32);
    for (y, op) in [
        (big.astype(DType::F64), "astype"),
        (ct::select(&ct::zeros(&[1 << 40], DType::Bool), &big, &(&big + 0.0)), "add"),
        (big.greater(0.0f32), "greater"),
        (ct::zeros(&[1 << 20, 1], DType::F32).matmul(&ct::zeros(&[1, 1 << 20], DType::F32)), "matmul"),
    ] {
        let err = y.eval().unwrap_err();
        assert!(matches!(&err, Error::OutOfMemory { op: o, .. } if o == op), "{op}: {err:?}");
    }
    let c = ct::concatenate(&[big.clone(), big], 0);
    assert!(matches!(c.eval().unwrap_err(), Error::OutOfMemory { .. }));
}

#[test]
fn arange_that_fits_a_shape_but_not_memory_is_an_err() {
    let x = ct::arange(0.0, (1u64 << 40) as f64, 1.0, DType::F32);
    assert_eq!(x.shape(), &[1 << 40]);
    let err = x.eval().unwrap_err();
    assert!(is_oom(&err, "arange", &[1 << 40], DType::F32), "{err:?}");
    assert_eq!(x.eval().unwrap_err(), err);
}

// ----- integer arithmetic wraps ----------------------------------------------------------------

fn bin_i32(op: fn(&Array, &Array) -> Array, a: i32, b: i32) -> i32 {
    op(&Array::scalar(a), &Array::scalar(b)).item::<i32>().unwrap()
}
fn bin_i64(op: fn(&Array, &Array) -> Array, a: i64, b: i64) -> i64 {
    op(&Array::scalar(a), &Array::scalar(b)).item::<i64>().unwrap()
}

#[test]
fn signed_integer_ops_wrap_at_the_extremes() {
    let fd = |a: &Array, b: &Array| ct::floor_divide(a, b);
    let rem = |a: &Array, b: &Array| ct::remainder(a, b);
    let add = |a: &Array, b: &Array| a + b;
    let sub = |a: &Array, b: &Array| a - b;
    let mul = |a: &Array, b: &Array| a * b;
    assert_eq!(bin_i32(fd, i32::MIN, -1), i32::MIN.wrapping_div(-1));
    assert_eq!(bin_i32(rem, i32::MIN, -1), 0);
    assert_eq!(bin_i32(add, i32::MAX, 1), i32::MAX.wrapping_add(1));
    assert_eq!(bin_i32(sub, i32::MIN, 1), i32::MIN.wrapping_sub(1));
    assert_eq!(bin_i32(mul, i32::MAX, 2), i32::MAX.wrapping_mul(2));
    assert_eq!(bin_i32(mul, i32::MIN, -1), i32::MIN.wrapping_mul(-1));
    assert_eq!(bin_i32(fd, i32::MIN, 3), -715827883); // floor(-2147483648 / 3)
    assert_eq!(bin_i32(rem, i32::MIN, 3), 1);
    assert_eq!(bin_i32(fd, i32::MAX, -1), -i32::MAX);
    assert_eq!(bin_i32(fd, 7, 0), 0);
    assert_eq!(bin_i32(rem, 7, 0), 0);

    assert_eq!(bin_i64(fd, i64::MIN, -1), i64::MIN.wrapping_div(-1));
    assert_eq!(bin_i64(rem, i64::MIN, -1), 0);
    assert_eq!(bin_i64(add, i64::MAX, 1), i64::MIN);
    assert_eq!(bin_i64(sub, i64::MIN, 1), i64::MAX);
    assert_eq!(bin_i64(mul, i64::MAX, 3), i64::MAX.wrapping_mul(3));
    assert_eq!(bin_i64(fd, i64::MIN, 2), i64::MIN / 2);

    // the `%` operator and unary ops
    let r = (Array::scalar(i32::MIN) % Array::scalar(-1i32)).item::<i32>().unwrap();
    assert_eq!(r, 0);
    assert_eq!((-Array::scalar(i32::MIN)).item::<i32>().unwrap(), i32::MIN.wrapping_neg());
    assert_eq!(Array::scalar(i32::MIN).abs().item::<i32>().unwrap(), i32::MIN.wrapping_abs());
    assert_eq!(Array::scalar(i64::MIN).abs().item::<i64>().unwrap(), i64::MIN.wrapping_abs());
    assert_eq!(Array::scalar(i32::MIN).square().item::<i32>().unwrap(), i32::MIN.wrapping_mul(i32::MIN));
}

#[test]
fn signed_integer_ops_wrap_in_every_kernel_layout() {
    // dense, scalar-broadcast and strided operands take different kernel paths
    let a = Array::from_slice(&[i32::MIN, i32::MIN, i32::MAX, -7], &[2, 2]);
    let b = Array::from_slice(&[-1i32, -1, -1, 2], &[2, 2]);
    let fd = ct::floor_divide(&a, &b).to_vec::<i32>().unwrap();
    assert_eq!(fd, vec![i32::MIN, i32::MIN, -i32::MAX, -4]);
    let fd_t = ct::floor_divide(a.t(), b.t()).to_vec::<i32>().unwrap();
    assert_eq!(fd_t, vec![i32::MIN, -i32::MAX, i32::MIN, -4]);
    let fd_s = ct::floor_divide(&a, Array::scalar(-1i32)).to_vec::<i32>().unwrap();
    assert_eq!(fd_s, vec![i32::MIN, i32::MIN, -i32::MAX, 7]);
    let r = ct::remainder(&a, &b).to_vec::<i32>().unwrap();
    assert_eq!(r, vec![0, 0, 0, 1]);
}

#[test]
fn unsigned_integer_ops_wrap_at_the_extremes() {
    let a = Array::from_slice(&[0u8, 255, 200, 7], &[4]);
    let b = Array::from_slice(&[1u8, 1, 2, 0], &[4]);
    assert_eq!((&a - &b).to_vec::<u8>().unwrap(), vec![255, 254, 198, 7]);
    assert_eq!((&a + &b).to_vec::<u8>().unwrap(), vec![1, 0, 202, 7]);
    assert_eq!((&a * &Array::scalar(2u8)).to_vec::<u8>().unwrap(), vec![0, 254, 144, 14]);
    assert_eq!(ct::floor_divide(&a, &b).to_vec::<u8>().unwrap(), vec![0, 255, 100, 0]);
    assert_eq!(ct::remainder(&a, &b).to_vec::<u8>().unwrap(), vec![0, 0, 0, 0]);
    assert_eq!((-&a).to_vec::<u8>().unwrap(), vec![0, 1, 56, 249]);

    let x = Array::from_slice(&[0u32, u32::MAX], &[2]);
    assert_eq!((&x - 1u32).to_vec::<u32>().unwrap(), vec![u32::MAX, u32::MAX - 1]);
    assert_eq!((&x + 1u32).to_vec::<u32>().unwrap(), vec![1, 0]);
    assert_eq!((&x * &x).to_vec::<u32>().unwrap(), vec![0, 1]);
    assert_eq!((-&x).to_vec::<u32>().unwrap(), vec![0, 1]);
}
