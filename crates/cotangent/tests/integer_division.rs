//! What integer division and remainder by zero give (0, as numpy returns; nothing panics), and
//! that `/` on integers is true division in `float32`.
use cotangent::{self as ct, Array, DType};

macro_rules! by_zero_is_zero {
    ($($t:ty),*) => {$({
        let t = stringify!($t);
        let a = Array::from_slice(&[<$t>::from(7u8), <$t>::from(0u8), <$t>::from(200u8)], &[3]);
        let zeros = Array::from_slice(&[<$t>::from(0u8); 3], &[3]);
        let zero: Vec<$t> = vec![<$t>::from(0u8); 3];
        assert_eq!(ct::floor_divide(&a, &zeros).to_vec::<$t>().unwrap(), zero, "{t}");
        assert_eq!(a.floor_divide(0).to_vec::<$t>().unwrap(), zero, "{t}");
        assert_eq!(ct::remainder(&a, &zeros).to_vec::<$t>().unwrap(), zero, "{t}");
        assert_eq!((&a % &zeros).to_vec::<$t>().unwrap(), zero, "{t}");
        assert_eq!((&a % 0).to_vec::<$t>().unwrap(), zero, "{t}");
        // and in a broadcast layout, with the zero on either side
        let col = a.reshape(&[3, 1]);
        assert_eq!(ct::floor_divide(&col, &zeros).to_vec::<$t>().unwrap(), vec![<$t>::from(0u8); 9], "{t}");
        assert_eq!(ct::floor_divide(&zeros, &col).to_vec::<$t>().unwrap(), vec![<$t>::from(0u8); 9], "{t}");
    })*};
}

#[test]
fn integer_floor_division_and_remainder_by_zero_give_zero() {
    by_zero_is_zero!(u8, u32, i32, i64);
    let neg = Array::from_slice(&[-7i32, i32::MIN], &[2]);
    assert_eq!(ct::floor_divide(&neg, 0).to_vec::<i32>().unwrap(), vec![0, 0]);
    assert_eq!((&neg % 0).to_vec::<i32>().unwrap(), vec![0, 0]);
}

#[test]
fn float_division_by_zero_is_ieee() {
    let a = Array::from_slice(&[1.0f32, -1.0, 0.0], &[3]);
    let fd = ct::floor_divide(&a, 0.0).to_vec::<f32>().unwrap();
    assert_eq!(&fd[..2], &[f32::INFINITY, f32::NEG_INFINITY]);
    assert!(fd[2].is_nan());
    assert!((&a % 0.0).to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));
}

#[test]
fn slash_on_integers_is_true_division_in_float32() {
    let a = Array::from_slice(&[7i32, -7, 0, 1], &[4]);
    let b = Array::from_slice(&[2i32, 2, 0, 0], &[4]);
    for q in [&a / &b, ct::divide(&a, &b), a.divide(&b)] {
        assert_eq!(q.dtype(), DType::F32);
        let v = q.to_vec::<f32>().unwrap();
        assert_eq!(&v[..2], &[3.5, -3.5]);
        assert!(v[2].is_nan());
        assert_eq!(v[3], f32::INFINITY);
    }
    assert_eq!((&a / 2).dtype(), DType::F32);
    assert_eq!((7u8 / &Array::from_slice(&[2u8], &[1])).to_vec::<f32>().unwrap(), vec![3.5]);
    // floor_divide keeps integers
    let fd = ct::floor_divide(&a, 2);
    assert_eq!(fd.dtype(), DType::I32);
    assert_eq!(fd.to_vec::<i32>().unwrap(), vec![3, -4, 0, 0]);
}
