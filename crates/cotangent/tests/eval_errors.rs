//! Errors found when an array is evaluated name the public op that built the failing node and
//! the line that called it.
use cotangent::{self as ct, Array, DType, Error};

fn eval_message(x: &Array) -> String {
    match x.eval().unwrap_err() {
        Error::Eval(m) => m,
        other => panic!("expected an evaluation error, got {other:?}"),
    }
}

/// `op (this file:line:` as the error names a node built by `op` on `line`.
fn built_at(op: &str, line: u32) -> String {
    format!("{op} ({}:{line}:", file!())
}

#[test]
fn an_index_out_of_range_names_the_op_and_the_callers_line() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]);
    let idx = Array::from_slice(&[0i32, 10], &[2]);
    let line = line!() + 1;
    let y = x.take(&idx, 0);
    let m = eval_message(&y);
    assert!(m.starts_with(&built_at("take", line)), "{m}");
    // (on CUDA the backend names the device before its message: "): cuda: cuda:0: index 10 ...")
    assert!(m.contains("index 10 is out of range for axis 0 of extent 2"), "{m}");
    // the full text, as printed
    let shown = y.to_vec::<f32>().unwrap_err().to_string();
    assert!(shown.starts_with("evaluation error: take (") && shown.contains("index 10 is out of range"), "{shown}");
    // a consumer reports the failed node's error, not its own
    let z = (&y * 2.0).sum_all();
    assert_eq!(z.eval().unwrap_err(), y.eval().unwrap_err());
}

#[test]
fn every_indexing_op_names_itself() {
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let bad = Array::from_slice(&[-3i64, 0], &[2, 1]);
    let line = line!() + 2;
    let cases = [
        (ct::take_along_axis(&x, &bad, 1), "take_along_axis", line),
        (ct::put_along_axis(&x, &bad, &Array::scalar(0.0f32), 1), "put_along_axis", line + 1),
        (x.scatter_add_along_axis(&bad, &Array::scalar(1.0f32), 1), "scatter_add_along_axis", line + 2),
        (x.scatter_add(&bad.reshape(&[2]), &Array::scalar(1.0f32), 0), "scatter_add", line + 3),
        (ct::take(&x, &bad, -1), "take", line + 4),
    ];
    for (y, op, line) in cases {
        let m = eval_message(&y);
        assert!(m.starts_with(&built_at(op, line)), "{op}: {m}");
        assert!(m.contains("index -3 is out of range"), "{op}: {m}");
    }
}

#[test]
fn gradients_and_batches_name_the_op_they_come_from() {
    let bad = Array::from_slice(&[5i32], &[1]);
    let x = Array::from_slice(&[1.0f64, 2.0], &[2]);
    // the gradient of take scatters into the input's shape with the same indices
    let line = line!() + 1;
    let g = ct::grad(move |x: &[Array]| x[0].take(&bad, 0).sum_all());
    let err = g(&[x.clone()]).and_then(|g| g[0].eval()).unwrap_err();
    let m = err.to_string();
    assert!(m.contains(&format!("gradient of {}", built_at("take", line))), "{m}");
    assert!(m.contains("index 5 is out of range for axis 0 of extent 2"), "{m}");

    // a batched op keeps the line it was written on
    let idx = Array::from_slice(&[0i32, 1, 2], &[3, 1]);
    let line = line!() + 1;
    let f = ct::vmap(|a: &[Array]| a[0].take_along_axis(&a[1], 0), &[None, Some(0)], &[Some(0)]);
    let y = f(&[x, idx]).unwrap();
    let m = eval_message(&y[0]);
    assert!(m.starts_with(&built_at("take_along_axis", line)), "{m}");
    assert!(m.contains("index 2 is out of range"), "{m}");
}

#[test]
fn out_of_memory_names_where_the_op_was_built() {
    let big = ct::zeros(&[1 << 40], DType::F32);
    let line = line!() + 1;
    let y = big.exp();
    let err = y.eval().unwrap_err();
    match &err {
        Error::OutOfMemory { op, origin: Some(origin), .. } => {
            assert_eq!(op, "exp");
            assert!(origin.starts_with(&built_at("exp", line)), "{origin}");
        }
        other => panic!("expected OutOfMemory with an origin, got {other:?}"),
    }
    assert!(err.to_string().starts_with(&format!("out of memory in {}", built_at("exp", line))), "{err}");
}
