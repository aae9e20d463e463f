//! Defined behaviour for bad values. NaN and ±inf go through the element-wise ops, reductions,
//! softmax and matmul as IEEE arithmetic says, in every float dtype (the graph fuzzer,
//! `fuzz_graphs.rs`, also feeds NaN and infinities through random graphs); an out-of-range
//! index of any index dtype, up to the extremes of the dtype, makes evaluation fail with an
//! error naming the index.
use cotangent::{self as ct, Array, DType, Error};

const FLOATS: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];
const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;

/// `got` is `want` exactly: the same infinity, NaN for NaN, or the same number.
fn same(got: f64, want: f64) -> bool {
    (got.is_nan() && want.is_nan()) || got == want
}

/// `f` applied to `xs` (as one array of `dtype`) gives `want`, element by element.
#[track_caller]
fn check(what: &str, f: &dyn Fn(&Array) -> Array, xs: &[f64], shape: &[usize], want: &[f64]) {
    for dtype in FLOATS {
        let x = Array::from_vec(xs.to_vec(), shape).astype(dtype);
        let y = f(&x);
        assert_eq!(y.dtype(), dtype, "{what}");
        let got = y.to_f64_vec().unwrap();
        assert!(
            got.len() == want.len() && got.iter().zip(want).all(|(&g, &w)| same(g, w)),
            "{what} of {xs:?} in {dtype}: got {got:?}, want {want:?}"
        );
    }
}

#[test]
fn unary_ops_follow_ieee_on_nan_and_infinities() {
    type Case = (&'static str, fn(&Array) -> Array, [f64; 4], [f64; 4]);
    let cases: [Case; 10] = [
        ("exp", |x| x.exp(), [-INF, INF, NAN, 0.0], [0.0, INF, NAN, 1.0]),
        ("log", |x| x.log(), [0.0, -1.0, INF, NAN], [-INF, NAN, INF, NAN]),
        ("sqrt", |x| x.sqrt(), [-1.0, INF, NAN, -INF], [NAN, INF, NAN, NAN]),
        ("sin", |x| x.sin(), [INF, -INF, NAN, 0.0], [NAN, NAN, NAN, 0.0]),
        ("tanh", |x| x.tanh(), [INF, -INF, NAN, 0.0], [1.0, -1.0, NAN, 0.0]),
        ("sigmoid", |x| x.sigmoid(), [INF, -INF, NAN, 0.0], [1.0, 0.0, NAN, 0.5]),
        ("neg", |x| -x, [INF, -INF, NAN, 0.0], [-INF, INF, NAN, 0.0]),
        ("square", |x| x.square(), [INF, -INF, NAN, 0.0], [INF, INF, NAN, 0.0]),
        ("abs", |x| x.abs(), [INF, -INF, NAN, -0.0], [INF, INF, NAN, 0.0]),
        ("reciprocal", |x| x.reciprocal(), [INF, -INF, NAN, 0.0], [0.0, -0.0, NAN, INF]),
    ];
    for (what, f, xs, want) in cases {
        check(what, &f, &xs, &[4], &want);
    }
}

#[test]
fn binary_ops_follow_ieee_on_nan_and_infinities() {
    // x holds the left operands, the right operands are fixed
    let left = [INF, 0.0, 1.0, NAN, -INF, 0.0];
    let right = Array::from_slice(&[INF, INF, 0.0, 1.0, 2.0, 0.0], &[6]);
    type Case = (&'static str, fn(&Array, &Array) -> Array, [f64; 6]);
    let cases: [Case; 5] = [
        ("subtract", |a, b| a - b, [NAN, -INF, 1.0, NAN, -INF, 0.0]),
        ("multiply", |a, b| a * b, [INF, NAN, 0.0, NAN, -INF, 0.0]),
        ("divide", |a, b| a / b, [NAN, 0.0, INF, NAN, -INF, NAN]),
        ("maximum", |a, b| a.maximum(b), [INF, INF, 1.0, NAN, 2.0, 0.0]),
        ("minimum", |a, b| a.minimum(b), [INF, 0.0, 0.0, NAN, -INF, 0.0]),
    ];
    for (what, f, want) in cases {
        check(what, &|x| f(x, &right.astype(x.dtype())), &left, &[6], &want);
        // a NaN on the right propagates too
        check(what, &|x| f(&Array::scalar(1.0f64).astype(x.dtype()), x), &[NAN], &[1], &[NAN]);
    }
}

#[test]
fn reductions_softmax_and_matmul_follow_ieee_on_nan_and_infinities() {
    // rows: [inf, -inf], [inf, 1], [nan, 1], [-inf, -inf]
    let rows = [INF, -INF, INF, 1.0, NAN, 1.0, -INF, -INF];
    check("sum", &|x| x.sum(&[-1], false), &rows, &[4, 2], &[NAN, INF, NAN, -INF]);
    check("mean", &|x| x.mean(&[1], false), &rows, &[4, 2], &[NAN, INF, NAN, -INF]);
    check("max", &|x| x.max(&[1], false), &rows, &[4, 2], &[INF, INF, NAN, -INF]);
    check("logsumexp", &|x| x.logsumexp(&[1], false), &rows, &[4, 2], &[INF, INF, NAN, -INF]);
    // a row with +inf, NaN or only -inf has no finite normaliser: NaN throughout
    let soft = [NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN];
    check("softmax", &|x| x.softmax(&[1]), &rows, &[4, 2], &soft);
    check("softmax", &|x| x.softmax(&[0]), &[-INF, 0.0], &[2], &[0.0, 1.0]);
    // matmul: inf·0 is NaN, inf·1 + 1·1 is inf, inf·1 + (-inf)·1 is NaN
    let b = Array::from_slice(&[0.0f64, 1.0, 1.0, 1.0], &[2, 2]);
    check("matmul", &|x| x.matmul(&b.astype(x.dtype())), &[INF, 1.0, INF, -INF], &[2, 2], &[NAN, INF, NAN, NAN]);
}

/// The message of the evaluation error of `y`.
fn eval_error(y: &Array) -> String {
    match y.eval() {
        Err(Error::Eval(m)) => m,
        other => panic!("expected an evaluation error, got {other:?}"),
    }
}

#[test]
fn out_of_range_indices_of_every_index_dtype_are_errors_naming_the_index() {
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    // (indices, the index the error names): extremes of each dtype, and 2^32 + 1, which a
    // 32-bit truncation would turn into the valid index 1
    let cases: Vec<(Array, String)> = vec![
        (Array::from_slice(&[0u8, 3], &[2]), "3".into()),
        (Array::from_slice(&[u8::MAX], &[1]), "255".into()),
        (Array::from_slice(&[u32::MAX], &[1]), u32::MAX.to_string()),
        (Array::from_slice(&[i32::MIN], &[1]), i32::MIN.to_string()),
        (Array::from_slice(&[1i32, -4], &[2]), "-4".into()),
        (Array::from_slice(&[i64::MAX], &[1]), i64::MAX.to_string()),
        (Array::from_slice(&[i64::MIN], &[1]), i64::MIN.to_string()),
        (Array::from_slice(&[(1i64 << 32) + 1], &[1]), ((1i64 << 32) + 1).to_string()),
    ];
    for (idx, k) in cases {
        let expected = format!("index {k} is out of range for axis 0 of extent 3");
        let m = eval_error(&x.take(&idx, 0));
        assert!(m.contains(&expected), "take with {} indices: {m}", idx.dtype());
        let m = eval_error(&x.scatter_add(&idx, &Array::scalar(1.0f32), 0));
        assert!(m.contains(&expected), "scatter_add with {} indices: {m}", idx.dtype());
        // the gradient of take scatters with the same indices
        let i = idx.clone();
        let g = ct::grad(move |x: &[Array]| x[0].take(&i, 0).sum_all())(&[x.clone()]).and_then(|g| g[0].eval());
        assert!(g.unwrap_err().to_string().contains(&expected), "gradient of take with {} indices", idx.dtype());
    }
    // no index is in range of an empty axis
    let empty = ct::zeros(&[0, 2], DType::F32);
    let m = eval_error(&empty.take(&Array::from_slice(&[0i64], &[1]), 0));
    assert!(m.contains("index 0 is out of range for axis 0 of extent 0"), "{m}");
}
