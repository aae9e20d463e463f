//! The `s!` slice builder with Rust ranges (against indices computed here, numpy's rules) and
//! `scan` over a function (against a loop, gradients by finite differences, vmap).
mod common;
use common::{assert_close, check_grads, vals, Lcg};
use cotangent::{self as ct, s, Array, DType, SliceItem};

/// numpy's indices of `start:stop:step` over an axis of extent `n`, computed directly.
fn indices(n: isize, start: Option<isize>, stop: Option<isize>, step: isize) -> Vec<isize> {
    let norm = |v: isize| if v < 0 { v + n } else { v };
    let mut out = Vec::new();
    if step > 0 {
        let (a, b) = (start.map_or(0, norm).clamp(0, n), stop.map_or(n, norm).clamp(0, n));
        let mut i = a;
        while i < b {
            out.push(i);
            i += step;
        }
    } else {
        let (a, b) = (start.map_or(n - 1, norm).clamp(-1, n - 1), stop.map_or(-1, norm).clamp(-1, n - 1));
        let mut i = a;
        while i > b {
            out.push(i);
            i += step;
        }
    }
    out
}

/// Items and the numpy starts, stops and steps they stand for, per axis.
type Case = (Vec<SliceItem>, [Option<isize>; 3], [Option<isize>; 3], [isize; 3]);

#[test]
fn slice_ranges_follows_numpy_for_ranges_steps_and_negative_indices() {
    let x = ct::arange(0.0, 60.0, 1.0, DType::I64).reshape(&[3, 4, 5]);
    let cases: Vec<Case> = vec![
        (s![.., 1..3, ..;2].to_vec(), [None, Some(1), None], [None, Some(3), None], [1, 1, 2]),
        (s![-2.., ..-1, 4..;-1].to_vec(), [Some(-2), None, Some(4)], [None, Some(-1), None], [1, 1, -1]),
        (s![..;-1, 0..=2, -4..=-2].to_vec(), [None, Some(0), Some(-4)], [None, Some(3), Some(-1)], [-1, 1, 1]),
        (s![1..100, -100..2, ..=-1;3].to_vec(), [Some(1), Some(-100), None], [Some(100), Some(2), None], [1, 1, 3]),
    ];
    let xv: Vec<i64> = x.to_vec().unwrap();
    for (items, starts, stops, steps) in cases {
        let y = x.slice_ranges(&items);
        let idx: Vec<Vec<isize>> = (0..3).map(|a| indices([3, 4, 5][a], starts[a], stops[a], steps[a])).collect();
        let shape: Vec<usize> = idx.iter().map(|v| v.len()).collect();
        assert_eq!(y.shape(), shape.as_slice(), "{items:?}");
        let mut want = Vec::new();
        for &i in &idx[0] {
            for &j in &idx[1] {
                for &k in &idx[2] {
                    want.push(xv[(i * 20 + j * 5 + k) as usize]);
                }
            }
        }
        assert_eq!(y.to_vec::<i64>().unwrap(), want, "{items:?}");
    }
}

#[test]
fn indices_drop_axes_and_trailing_axes_are_whole() {
    let x = ct::arange(0.0, 24.0, 1.0, DType::I32).reshape(&[2, 3, 4]);
    let y = x.slice_ranges(s![-1, 1]);
    assert_eq!(y.shape(), &[4]);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![16, 17, 18, 19]);
    let z = x.slice_ranges(s![0usize, .., -1isize]);
    assert_eq!(z.to_vec::<i32>().unwrap(), vec![3, 7, 11]);
    assert_eq!(x.slice_ranges(s![]).shape(), &[2, 3, 4]);
    assert_eq!(x.slice_ranges(s![1, 2, 3,]).shape(), &[] as &[usize]);
}

#[test]
fn slice_ranges_is_differentiable() {
    let mut rng = Lcg(1);
    let x = rng.signed(&[4, 5]);
    check_grads("slice_ranges", |a: &[Array]| a[0].slice_ranges(s![1..;2, ..;-2]), std::slice::from_ref(&x));
    check_grads("slice_ranges index", |a: &[Array]| a[0].slice_ranges(s![-1, 1..4]), std::slice::from_ref(&x));
}

#[test]
#[should_panic(expected = "cotangent::slice_ranges: index 3 is out of range for axis 0 of extent 3")]
fn slice_ranges_rejects_an_index_out_of_range() {
    let _ = ct::zeros(&[3, 2], DType::F32).slice_ranges(s![3]);
}

#[test]
#[should_panic(expected = "cotangent::slice_ranges: 3 items slice an array of shape [3, 2]")]
fn slice_ranges_rejects_too_many_items() {
    let _ = ct::zeros(&[3, 2], DType::F32).slice_ranges(s![.., .., ..]);
}

#[test]
#[should_panic(expected = "cotangent::s!: the index 2 cannot take a step (2)")]
fn an_index_takes_no_step() {
    let _ = s![2;2];
}

/// An RNN-like step: `h' = tanh(h w + x)`, output `h' · 2` and `sum(x)`.
fn step(c: &[Array], x: &[Array]) -> (Vec<Array>, Vec<Array>) {
    let h = (c[0].matmul(&c[1]) + &x[0]).tanh();
    (vec![h.clone(), c[1].clone()], vec![&h * 2.0, x[0].sum_all()])
}

#[test]
fn scan_equals_a_loop_and_stacks_its_outputs() {
    let mut rng = Lcg(2);
    let (h0, w, xs) = (rng.signed(&[3]), rng.signed(&[3, 3]), rng.signed(&[5, 3]));
    let (carry, ys) = ct::scan(step, &[h0.clone(), w.clone()], &[xs.clone()]);
    assert_eq!(ys[0].shape(), &[5, 3]);
    assert_eq!(ys[1].shape(), &[5]);
    // the loop in f64 on the host
    let (wv, xv) = (vals(&w), vals(&xs));
    let mut h = vals(&h0);
    let (mut want0, mut want1) = (Vec::new(), Vec::new());
    for t in 0..5 {
        let next: Vec<f64> =
            (0..3).map(|j| ((0..3).map(|i| h[i] * wv[i * 3 + j]).sum::<f64>() + xv[t * 3 + j]).tanh()).collect();
        want0.extend(next.iter().map(|v| v * 2.0));
        want1.push(xv[t * 3..t * 3 + 3].iter().sum::<f64>());
        h = next;
    }
    assert_close(&vals(&carry[0]), &h, 1e-12, "final carry");
    assert_close(&vals(&ys[0]), &want0, 1e-12, "stacked h");
    assert_close(&vals(&ys[1]), &want1, 1e-12, "stacked sums");
}

#[test]
fn scan_over_no_steps_returns_the_carry_and_empty_outputs() {
    let (carry, ys) =
        ct::scan(step, &[ct::ones(&[3], DType::F64), ct::eye(3, 3, 0, DType::F64)], &[ct::zeros(&[0, 3], DType::F64)]);
    assert_eq!(vals(&carry[0]), vec![1.0; 3]);
    assert_eq!((ys[0].shape(), ys[1].shape()), (&[0usize, 3][..], &[0usize][..]));
}

#[test]
fn gradients_and_vmap_of_scan() {
    let mut rng = Lcg(3);
    let (h0, w, xs) = (rng.signed(&[3]), rng.signed(&[3, 3]), rng.signed(&[4, 3]));
    let f = |a: &[Array]| {
        let (c, ys) = ct::scan(step, &[a[0].clone(), a[1].clone()], &[a[2].clone()]);
        &ys[0].sum(&[0], false) + &c[0]
    };
    check_grads("scan", f, &[h0.clone(), w.clone(), xs.clone()]);
    // a batch of initial states and sequences
    let (hb, xb) = (rng.signed(&[2, 3]), rng.signed(&[2, 4, 3]));
    let batched = ct::vmap(f, &[Some(0), None, Some(0)], &[Some(0)])(&[hb.clone(), w.clone(), xb.clone()]).unwrap();
    for b in 0..2 {
        assert_close(
            &vals(&batched[0].index(b)),
            &vals(&f(&[hb.index(b), w.clone(), xb.index(b)])),
            1e-12,
            "vmap(scan)",
        );
    }
}

#[test]
#[should_panic(
    expected = "cotangent::scan: step 0 returned a carry of [2] float64, but the initial carry is [1] float64"
)]
fn scan_rejects_a_carry_that_changes_shape() {
    let _ = ct::scan(
        |c, x| (vec![ct::concatenate(&[c[0].clone(), x[0].clone()], 0)], vec![]),
        &[ct::zeros(&[1], DType::F64)],
        &[ct::zeros(&[3, 1], DType::F64)],
    );
}
