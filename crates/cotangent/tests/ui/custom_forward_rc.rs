// A custom function's forward must be Send + Sync: capturing an Rc is rejected.
use cotangent::{self as ct, Array};
use std::rc::Rc;

fn main() {
    let scale = Rc::new(2.0f64);
    let f = ct::custom_function(move |x: &[Array]| &x[0] * *scale).build();
    let _ = f(&[Array::scalar(1.0f64)]);
}
