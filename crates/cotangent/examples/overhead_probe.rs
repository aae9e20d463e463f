//! Quick per-op overhead probe: a chain of `sin(x) * 1.01 + 0.1` on 16 f32.
use cotangent::{self as ct, Array, DType};
use std::time::Instant;

fn chain(x: &Array, n: usize) -> Array {
    let mut y = x.clone();
    for _ in 0..n {
        y = y.sin() * 1.01 + 0.1;
    }
    y
}

fn main() {
    let n = 1000;
    let x = ct::ones(&[16], DType::F32) * 0.5;
    x.eval().unwrap();
    for _ in 0..50 {
        chain(&x, n).eval().unwrap();
    }
    let reps = 200;
    let t = Instant::now();
    for _ in 0..reps {
        chain(&x, n).eval().unwrap();
    }
    let fwd = t.elapsed().as_secs_f64() / reps as f64 / (3 * n) as f64;
    let g = ct::grad(move |a: &[Array]| chain(&a[0], n).sum_all());
    for _ in 0..10 {
        g(&[x.clone()]).unwrap()[0].eval().unwrap();
    }
    let t = Instant::now();
    for _ in 0..50 {
        g(&[x.clone()]).unwrap()[0].eval().unwrap();
    }
    let gr = t.elapsed().as_secs_f64() / 50.0 / (3 * n) as f64;
    println!("forward: {:.3} us/op, grad: {:.3} us/op (per elementary op; the peer counts one chain step as an op? see bench)", fwd * 1e6, gr * 1e6);
}
