use cotangent::{self as ct, Array, DType};

#[test]
fn basic_forward() {
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let y = (&x * 2.0 + &x).sum(&[-1], false);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![9.0, 21.0]);
    let t = x.t();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 3.0, 2.0, 4.0]);
    let b = (&x + &Array::from_slice(&[10.0f32, 20.0], &[2, 1])).to_vec::<f32>().unwrap();
    assert_eq!(b, vec![11.0, 12.0, 23.0, 24.0]);
    assert!(x.to_vec::<f64>().is_err());
    let z = ct::zeros(&[3], DType::F32) + 1.0;
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![1.0; 3]);
    assert_eq!((1.0f64 - &x).dtype(), DType::F32);
    let m = x.max(&[0], true);
    assert_eq!(m.shape(), &[1, 2]);
    assert_eq!(m.to_vec::<f32>().unwrap(), vec![3.0, 4.0]);
    assert_eq!(x.exp().to_vec::<f32>().unwrap()[0], 1f32.exp());
}

#[test]
fn long_chain() {
    let mut y = Array::from_slice(&[0.0f32; 4], &[4]);
    for _ in 0..1_000_000 {
        y = &y + 1.0;
    }
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1_000_000.0; 4]);
}
