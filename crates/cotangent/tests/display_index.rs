//! `Display` prints values as numpy's `repr` does (the expected texts are numpy 2's, with the
//! dtype always shown and shapes written as Rust slices); `index` / `index_axis` take rows and
//! entries, differentiably.
use cotangent::{self as ct, Array, DType};

#[test]
fn display_matches_numpy() {
    let cases: Vec<(&str, Array, &str)> = vec![
        ("ints_2d", Array::from_slice(&[1i32, 2, 3, 4], &[2, 2]), "array([[1, 2],\n       [3, 4]], dtype=int32)"),
        ("floats", Array::from_slice(&[1.5f32, 2.25, -3.0], &[3]), "array([ 1.5 ,  2.25, -3.  ], dtype=float32)"),
        ("whole_floats", Array::from_slice(&[1.0f32, 2.0], &[2]), "array([1., 2.], dtype=float32)"),
        ("scientific", Array::from_slice(&[1e-5f32, 1.0, 1.5], &[3]), "array([1.0e-05, 1.0e+00, 1.5e+00], dtype=float32)"),
        ("nonfinite", Array::from_slice(&[f32::NAN, 1.0, f32::NEG_INFINITY], &[3]), "array([ nan,   1., -inf], dtype=float32)"),
        ("half", Array::from_slice(&[0.1f32, 0.2], &[2]).astype(DType::F16), "array([0.1, 0.2], dtype=float16)"),
        ("bools", Array::from_slice(&[true, false], &[2]), "array([ True, False], dtype=bool)"),
        ("three_d", ct::arange(0.0, 24.0, 1.0, DType::I32).reshape(&[2, 3, 4]), "array([[[ 0,  1,  2,  3],\n        [ 4,  5,  6,  7],\n        [ 8,  9, 10, 11]],\n\n       [[12, 13, 14, 15],\n        [16, 17, 18, 19],\n        [20, 21, 22, 23]]], dtype=int32)"),
        ("wrapped", ct::arange(0.0, 30.0, 1.0, DType::I32), "array([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16,\n       17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29], dtype=int32)"),
        ("summarised", ct::arange(0.0, 2000.0, 1.0, DType::I32).reshape(&[2, 1000]), "array([[   0,    1,    2, ...,  997,  998,  999],\n       [1000, 1001, 1002, ..., 1997, 1998, 1999]],\n      shape=[2, 1000], dtype=int32)"),
        ("summarised_floats", ct::arange(0.0, 3000.0, 1.0, DType::F32).reshape(&[10, 300]) / 7.0, "array([[0.0000000e+00, 1.4285715e-01, 2.8571430e-01, ..., 4.2428570e+01,\n        4.2571430e+01, 4.2714287e+01],\n       [4.2857143e+01, 4.3000000e+01, 4.3142857e+01, ..., 8.5285713e+01,\n        8.5428574e+01, 8.5571426e+01],\n       [8.5714287e+01, 8.5857140e+01, 8.6000000e+01, ..., 1.2814285e+02,\n        1.2828572e+02, 1.2842857e+02],\n       ...,\n       [3.0000000e+02, 3.0014285e+02, 3.0028571e+02, ..., 3.4242856e+02,\n        3.4257144e+02, 3.4271429e+02],\n       [3.4285715e+02, 3.4300000e+02, 3.4314285e+02, ..., 3.8528571e+02,\n        3.8542856e+02, 3.8557144e+02],\n       [3.8571429e+02, 3.8585715e+02, 3.8600000e+02, ..., 4.2814285e+02,\n        4.2828571e+02, 4.2842856e+02]], shape=[10, 300], dtype=float32)"),
        ("empty", ct::zeros(&[0, 3], DType::F32), "array([], shape=[0, 3], dtype=float32)"),
        ("empty_1d", ct::zeros(&[0], DType::F32), "array([], dtype=float32)"),
        ("scalar", Array::scalar(5i32), "array(5, dtype=int32)"),
        ("f64_third", Array::from_slice(&[1.0f64 / 3.0, 1.0], &[2]), "array([0.33333333, 1.        ], dtype=float64)"),
        ("big", Array::from_slice(&[123456789.0f64, 1.0], &[2]), "array([1.23456789e+08, 1.00000000e+00], dtype=float64)"),
        ("neg_zero", Array::from_slice(&[-0.0f32, 0.0], &[2]), "array([-0.,  0.], dtype=float32)"),
        ("summarised_3d", ct::arange(0.0, 3600.0, 1.0, DType::I64).reshape(&[2, 600, 3]), "array([[[   0,    1,    2],\n        [   3,    4,    5],\n        [   6,    7,    8],\n        ...,\n        [1791, 1792, 1793],\n        [1794, 1795, 1796],\n        [1797, 1798, 1799]],\n\n       [[1800, 1801, 1802],\n        [1803, 1804, 1805],\n        [1806, 1807, 1808],\n        ...,\n        [3591, 3592, 3593],\n        [3594, 3595, 3596],\n        [3597, 3598, 3599]]], shape=[2, 600, 3], dtype=int64)"),
        ("u8", Array::from_slice(&[1u8, 200, 3], &[3]), "array([  1, 200,   3], dtype=uint8)"),
        ("large_i64", Array::from_slice(&[(1i64 << 62) + 1, -5], &[2]), "array([4611686018427387905,                  -5], dtype=int64)"),
        ("two_decimals", Array::from_slice(&[0.25f64, 100.5, -7.125], &[3]), "array([  0.25 , 100.5  ,  -7.125], dtype=float64)"),
    ];
    let mut failures = Vec::new();
    for (name, x, expected) in cases {
        let shown = x.to_string();
        if shown != expected {
            failures.push(format!("{name}:\n{shown}\nexpected:\n{expected}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn display_precision_and_lazy_inputs() {
    let x = Array::from_slice(&[1.0f64 / 3.0, 2.0], &[2]);
    assert_eq!(format!("{x:.3}"), "array([0.333, 2.   ], dtype=float64)");
    // an unevaluated graph is evaluated for printing
    let y = (&x * 3.0).sum_all();
    assert!(!y.is_evaluated());
    assert_eq!(y.to_string(), "array(7., dtype=float64)");
    // Debug stays cheap: it names the node and does not evaluate it
    let z = x.exp();
    let d = format!("{z:?}");
    assert!(d.starts_with("Array(shape=[2], dtype=float64, exp)"), "{d}");
    assert!(!z.is_evaluated());
}

#[test]
fn display_of_a_failing_array_prints_the_error() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]);
    let y = x.take(&Array::from_slice(&[7i32], &[1]), 0);
    let shown = y.to_string();
    assert!(shown.starts_with("array(<evaluation error: take ("), "{shown}");
    assert!(shown.contains("index 7 is out of range for axis 0 of extent 2"), "{shown}");
    assert!(shown.ends_with(">, shape=[1], dtype=float32)"), "{shown}");
}

#[test]
fn index_takes_rows_and_entries() {
    let x = ct::arange(0.0, 24.0, 1.0, DType::F32).reshape(&[2, 3, 4]);
    assert_eq!(x.index(1).shape(), &[3, 4]);
    assert_eq!(x.index(-1).index(0).to_vec::<f32>().unwrap(), vec![12.0, 13.0, 14.0, 15.0]);
    assert_eq!(x.index(0).index(2).index(-1).item::<f32>().unwrap(), 11.0);
    let col = x.index_axis(-1, 1);
    assert_eq!(col.shape(), &[2, 3]);
    assert_eq!(col.to_vec::<f32>().unwrap(), vec![1.0, 5.0, 9.0, 13.0, 17.0, 21.0]);
    assert_eq!(ct::index_axis(&x, 1, -3).to_vec::<f32>().unwrap(), x.index_axis(1, 0).to_vec::<f32>().unwrap());
    assert_eq!(ct::index(&x, 1).to_vec::<f32>().unwrap(), x.index(1).to_vec::<f32>().unwrap());
}

#[test]
fn index_is_differentiable() {
    let x = ct::arange(0.0, 6.0, 1.0, DType::F64).reshape(&[3, 2]);
    // d/dx sum(x[1]^2) = 2 x on row 1, 0 elsewhere
    let g = ct::grad(|x: &[Array]| x[0].index(1).square().sum_all())(&[x.clone()]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![0.0, 0.0, 4.0, 6.0, 0.0, 0.0]);
    // a loop over the rows, as a user would write it: every row's gradient lands in place
    let f = |x: &[Array]| {
        let mut total = Array::scalar(0.0f64);
        for i in 0..3 {
            total = total + x[0].index(i).index_axis(0, -1) * (i as f64 + 1.0);
        }
        total
    };
    let g = ct::grad(f)(&[x.clone()]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![0.0, 1.0, 0.0, 2.0, 0.0, 3.0]);
    // and second order, and under vmap (row 0 of each batch element)
    let inner = ct::grad(|x: &[Array]| (x[0].index(0) * x[0].index(0) * x[0].index(0)).sum_all());
    let h = ct::grad(move |x: &[Array]| inner(x).map(|g| g[0].sum_all()))(&[x.clone()]).unwrap();
    assert_eq!(h[0].to_vec::<f64>().unwrap(), vec![0.0, 6.0, 0.0, 0.0, 0.0, 0.0]);
    let rows = ct::vmap(|x: &[Array]| x[0].index(0), &[Some(0)], &[Some(0)])(&[x.reshape(&[1, 3, 2])]).unwrap();
    assert_eq!(rows[0].to_vec::<f64>().unwrap(), vec![0.0, 1.0]);
}
