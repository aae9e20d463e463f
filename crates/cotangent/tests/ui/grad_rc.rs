// Transforms take only Send + Sync functions: grad of a closure capturing an Rc is rejected.
use cotangent::{self as ct, Array};
use std::rc::Rc;

fn main() {
    let scale = Rc::new(2.0f64);
    let g = ct::grad(move |x: &[Array]| (&x[0] * *scale).sum_all());
    let _ = g(&[Array::scalar(1.0f64)]);
}
