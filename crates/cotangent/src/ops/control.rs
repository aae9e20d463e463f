//! Control flow over functions: [`scan`].
use crate::Array;

/// `jax.lax.scan` over arrays: runs `f(carry, x_t) -> (carry, y_t)` for each `t` along axis 0
/// of every array in `xs` (all of one leading extent `T`), starting from `init`, and returns
/// the final carry and each output of `f` stacked along a new axis 0 (`[T, ..]`).
///
/// The loop is unrolled into the graph (one copy of `f`'s ops per step), so `grad`, `jvp`,
/// `vmap` and `compile` go through it with the ops' own rules, and it runs on any device.
/// Reverse mode keeps every step's intermediates; wrap `f`'s body in
/// [`checkpoint`](crate::checkpoint) to recompute them instead. With `T = 0`, `f` is traced
/// once on zeros to learn the outputs' shapes; the carry is `init` and the outputs are empty.
///
/// ```
/// use cotangent::{self as ct, Array};
/// // a running sum and the partial sums: the carry is the total so far
/// let xs = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]);
/// let (carry, ys) = ct::scan(
///     |c, x| {
///         let s = &c[0] + &x[0];
///         (vec![s.clone()], vec![s * 10.0])
///     },
///     &[Array::scalar(0.0f32)],
///     &[xs],
/// );
/// assert_eq!(carry[0].item::<f32>()?, 10.0);
/// assert_eq!(ys[0].to_vec::<f32>()?, vec![10.0, 30.0, 60.0, 100.0]);
/// # Ok::<(), ct::Error>(())
/// ```
///
/// # Panics
/// If `xs` is empty or has a 0-d array or arrays of different leading extents, or `f` returns
/// a carry whose shapes or dtypes differ from `init`'s, or outputs whose count, shapes or
/// dtypes change between steps (reported at the caller's line).
#[track_caller]
pub fn scan<F>(f: F, init: &[Array], xs: &[Array]) -> (Vec<Array>, Vec<Array>)
where
    F: Fn(&[Array], &[Array]) -> (Vec<Array>, Vec<Array>),
{
    let _op = crate::array::OpScope::enter("scan");
    let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape()).collect();
    assert!(
        !xs.is_empty() && xs.iter().all(|x| x.ndim() >= 1 && x.shape()[0] == xs[0].shape()[0]),
        "cotangent::scan: xs must be at least one array, each with the same leading extent, got shapes {shapes:?}"
    );
    let t = xs[0].shape()[0];
    let signature = |a: &[Array]| a.iter().map(|x| (x.shape().to_vec(), x.dtype())).collect::<Vec<_>>();
    let carry_sig = signature(init);
    let mut carry = init.to_vec();
    let mut ys: Vec<Vec<Array>> = Vec::new();
    let mut y_sig = None;
    let steps = t.max(1);
    for i in 0..steps {
        let x_t: Vec<Array> = if t == 0 {
            xs.iter().map(|x| crate::ops::zeros(&x.shape()[1..], x.dtype()).to_device(x.device())).collect()
        } else {
            xs.iter().map(|x| x.index(i as isize)).collect()
        };
        let (c, y) = f(&carry, &x_t);
        let got = signature(&c);
        assert!(
            got == carry_sig,
            "cotangent::scan: step {i} returned a carry of {}, but the initial carry is {}",
            describe(&got),
            describe(&carry_sig)
        );
        let sig = signature(&y);
        match &y_sig {
            None => y_sig = Some(sig),
            Some(first) => assert!(
                *first == sig,
                "cotangent::scan: step {i} returned outputs of {}, but step 0 returned {}",
                describe(&sig),
                describe(first)
            ),
        }
        if t == 0 {
            let empty =
                y.iter().map(|y| crate::ops::zeros(&[&[0][..], y.shape()].concat(), y.dtype()).to_device(y.device()));
            return (init.to_vec(), empty.collect());
        }
        carry = c;
        ys.push(y);
    }
    let n_out = ys[0].len();
    let mut stacked = Vec::with_capacity(n_out);
    for k in 0..n_out {
        let column: Vec<Array> = ys.iter().map(|y| y[k].clone()).collect();
        stacked.push(crate::ops::stack(&column, 0));
    }
    (carry, stacked)
}

/// `[2, 3] float32, [] int32` for messages (`no arrays` when empty).
fn describe(sig: &[(Vec<usize>, crate::DType)]) -> String {
    if sig.is_empty() {
        return "no arrays".into();
    }
    sig.iter().map(|(s, d)| format!("{s:?} {d}")).collect::<Vec<_>>().join(", ")
}
