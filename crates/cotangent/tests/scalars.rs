//! Rust numbers on either side of `+ - * / %`, for every number type an operand may be.
use cotangent::{Array, DType};

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
