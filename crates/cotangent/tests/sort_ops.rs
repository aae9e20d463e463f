//! `argsort`, `sort` and `topk`: values against a reference sort written here (stable, NaN
//! last ascending and first descending), ties, negative axes, gradients and JVPs by finite
//! differences, vmap against a loop over the batch.
mod common;
use common::{assert_close, check_grads, vals, Lcg};
use cotangent::{self as ct, Array, DType};

/// The reference: the stable sorting permutation of every lane of a row-major `shape` along
/// `axis`, NaN greater than every number, as a row-major index array of `shape`.
fn reference_argsort(v: &[f64], shape: &[usize], axis: usize, descending: bool) -> Vec<u32> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut out = vec![0u32; v.len()];
    let key = |x: f64| if x.is_nan() { (1, 0.0) } else { (0, x) };
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * n * inner + j * inner + i;
            let mut perm: Vec<usize> = (0..n).collect();
            // insertion sort: stable by construction, independent of the library's sort
            for s in 1..n {
                let mut t = s;
                while t > 0 {
                    let (a, b) = (key(v[at(perm[t - 1])]), key(v[at(perm[t])]));
                    let out_of_order = if descending { a < b } else { a > b };
                    if !out_of_order {
                        break;
                    }
                    perm.swap(t - 1, t);
                    t -= 1;
                }
            }
            for (j, &p) in perm.iter().enumerate() {
                out[at(j)] = p as u32;
            }
        }
    }
    out
}

/// Values with ties and NaN: small integers, every fifth a NaN.
fn tied(rng: &mut Lcg, n: usize) -> Vec<f64> {
    (0..n).map(|k| if k % 5 == 3 { f64::NAN } else { rng.below(4) as f64 - 1.0 }).collect()
}

#[test]
fn argsort_matches_a_stable_reference_with_ties_and_nan_on_every_axis() {
    let mut rng = Lcg(11);
    let shape = [3usize, 5, 4];
    let v = tied(&mut rng, 60);
    for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        let x = Array::from_vec(v.clone(), &shape).astype(dtype);
        for axis in [-3isize, -2, -1, 0, 1, 2] {
            let a = axis.rem_euclid(3) as usize;
            for descending in [false, true] {
                let got = x.argsort(axis, descending);
                assert_eq!(got.dtype(), DType::U32);
                assert_eq!(got.shape(), &shape);
                let want = reference_argsort(&v, &shape, a, descending);
                assert_eq!(got.to_vec::<u32>().unwrap(), want, "{dtype} axis {axis} descending {descending}");
            }
        }
    }
}

#[test]
fn argsort_of_integers_and_a_transposed_view() {
    let v: Vec<i64> = vec![5, -2, 7, -2, 0, 9, 5, 1, -8, 3, 3, 2];
    let f: Vec<f64> = v.iter().map(|&a| a as f64).collect();
    for dtype in [DType::I32, DType::I64] {
        let x = Array::from_vec(v.clone(), &[3, 4]).astype(dtype);
        for descending in [false, true] {
            assert_eq!(
                x.argsort(1, descending).to_vec::<u32>().unwrap(),
                reference_argsort(&f, &[3, 4], 1, descending)
            );
        }
        // a strided view: sorting the transpose along its last axis sorts the columns
        let t = x.t();
        let tv: Vec<f64> = (0..4).flat_map(|j| (0..3).map(move |i| (i, j))).map(|(i, j)| f[i * 4 + j]).collect();
        assert_eq!(t.argsort(-1, false).to_vec::<u32>().unwrap(), reference_argsort(&tv, &[4, 3], 1, false));
    }
}

#[test]
fn sort_gathers_the_sorted_values() {
    let mut rng = Lcg(3);
    let shape = [4usize, 6];
    let v = tied(&mut rng, 24);
    let x = Array::from_vec(v.clone(), &shape);
    for (axis, a) in [(-1isize, 1usize), (0, 0)] {
        for descending in [false, true] {
            let perm = reference_argsort(&v, &shape, a, descending);
            let want: Vec<f64> = (0..24)
                .map(|k| {
                    let (i, j) = (k / 6, k % 6);
                    let p = perm[k] as usize;
                    if a == 1 {
                        v[i * 6 + p]
                    } else {
                        v[p * 6 + j]
                    }
                })
                .collect();
            let got = vals(&x.sort(axis, descending));
            assert_close(&got, &want, 0.0, &format!("sort axis {axis} descending {descending}"));
            assert_close(&vals(&ct::sort(&x, axis, descending)), &want, 0.0, "ct::sort");
        }
    }
}

#[test]
fn topk_picks_the_largest_in_order_ties_first_come_first() {
    let x = Array::from_slice(&[1.0f32, 3.0, 3.0, f32::NAN, -1.0, 2.0, 0.0, 2.0, 5.0, 2.0], &[2, 5]);
    let (v, i) = x.topk(3, -1);
    assert_eq!(v.shape(), &[2, 3]);
    assert_eq!(i.to_vec::<u32>().unwrap(), vec![3, 1, 2, 3, 0, 2]);
    let got = v.to_vec::<f32>().unwrap();
    assert!(got[0].is_nan());
    assert_eq!(&got[1..], &[3.0, 3.0, 5.0, 2.0, 2.0]);
    // along axis 0, k = 0 and k = n
    let (v0, i0) = x.topk(0, 0);
    assert_eq!((v0.shape(), i0.shape()), (&[0usize, 5][..], &[0usize, 5][..]));
    let (v2, i2) = ct::topk(&x, 2, 0);
    assert_eq!(i2.to_vec::<u32>().unwrap(), vec![1, 0, 0, 0, 1, 0, 1, 1, 1, 0]);
    assert_eq!(v2.shape(), &[2, 5]);
    // the largest k over random rows against the reference's descending order
    let mut rng = Lcg(5);
    let r = rng.vec(7 * 9, -3.0, 3.0);
    let xr = Array::from_vec(r.clone(), &[7, 9]);
    let perm = reference_argsort(&r, &[7, 9], 1, true);
    let (tv, ti) = xr.topk(4, 1);
    let want_i: Vec<u32> = (0..7).flat_map(|row| perm[row * 9..row * 9 + 4].to_vec()).collect();
    assert_eq!(ti.to_vec::<u32>().unwrap(), want_i);
    let want_v: Vec<f64> = (0..28).map(|k| r[(k / 4) * 9 + want_i[k] as usize]).collect();
    assert_close(&vals(&tv), &want_v, 0.0, "topk values");
}

#[test]
fn gradients_of_sort_and_topk_by_finite_differences() {
    // distinct values, so the order is the same at every finite-difference point
    let mut rng = Lcg(21);
    let x = rng.signed(&[3, 5]);
    check_grads("sort ascending axis -1", |a: &[Array]| a[0].sort(-1, false), std::slice::from_ref(&x));
    check_grads("sort descending axis 0", |a: &[Array]| a[0].sort(0, true), std::slice::from_ref(&x));
    check_grads("topk values", |a: &[Array]| a[0].topk(2, 1).0, std::slice::from_ref(&x));
    check_grads("topk along axis 0", |a: &[Array]| a[0].topk(2, -2).0 * 3.0, std::slice::from_ref(&x));
    // argsort itself is constant: its gradient is zero
    let g =
        ct::grad(|a: &[Array]| (a[0].argsort(-1, false).astype(DType::F64) * &a[0]).sum_all())(&[x.clone()]).unwrap();
    let perm: Vec<f64> = vals(&x.argsort(-1, false).astype(DType::F64));
    assert_close(&vals(&g[0]), &perm, 0.0, "grad through argsort's indices");
}

#[test]
fn jvp_of_sort_permutes_the_tangent() {
    let mut rng = Lcg(8);
    let x = rng.signed(&[4, 6]);
    let t = rng.signed(&[4, 6]);
    let (out, tan) = ct::jvp(|a: &[Array]| a[0].sort(1, true), &[x.clone()], &[t.clone()]).unwrap();
    let perm = x.argsort(1, true).to_vec::<u32>().unwrap();
    let (xv, tv) = (vals(&x), vals(&t));
    let want_out: Vec<f64> = (0..24).map(|k| xv[(k / 6) * 6 + perm[k] as usize]).collect();
    let want_tan: Vec<f64> = (0..24).map(|k| tv[(k / 6) * 6 + perm[k] as usize]).collect();
    assert_close(&vals(&out[0]), &want_out, 0.0, "sort");
    assert_close(&vals(&tan[0]), &want_tan, 0.0, "sort's tangent");
}

#[test]
fn vmap_of_argsort_sort_and_topk_equals_a_loop() {
    let mut rng = Lcg(13);
    let xs = Array::from_vec(tied(&mut rng, 5 * 3 * 4), &[3, 5, 4]);
    // batch on each axis, sorting each remaining axis (including one past the batch axis)
    for in_axis in 0..3usize {
        for axis in [0isize, -1] {
            let f = move |a: &[Array]| {
                let (v, i) = a[0].topk(2, axis);
                vec![a[0].argsort(axis, false), a[0].sort(axis, true), v, i]
            };
            let outs =
                ct::vmap(f, &[Some(in_axis as isize)], &[Some(0), Some(0), Some(0), Some(0)])(&[xs.clone()]).unwrap();
            for b in 0..xs.shape()[in_axis] {
                let one = f(&[xs.index_axis(in_axis as isize, b as isize)]);
                for (k, (got, want)) in outs.iter().zip(&one).enumerate() {
                    let got = got.index(b as isize);
                    assert_eq!(got.shape(), want.shape(), "output {k}");
                    assert_close(
                        &vals(&got),
                        &vals(want),
                        0.0,
                        &format!("in_axis {in_axis} axis {axis} output {k} b {b}"),
                    );
                }
            }
        }
    }
}

#[test]
fn vmap_of_the_gradient_of_topk() {
    let mut rng = Lcg(17);
    let xs = rng.signed(&[3, 6]);
    let g = ct::grad(|a: &[Array]| (a[0].topk(3, 0).0 * Array::from_slice(&[3.0f64, 2.0, 1.0], &[3])).sum_all());
    let batched = ct::vmap(g.clone(), &[Some(0)], &[Some(0)])(&[xs.clone()]).unwrap();
    for b in 0..3 {
        let one = g(&[xs.index(b)]).unwrap();
        assert_close(&vals(&batched[0].index(b)), &vals(&one[0]), 0.0, "vmap(grad(topk))");
    }
}

#[test]
#[should_panic(expected = "cotangent::topk: k = 4 exceeds the extent 3 of axis 1")]
fn topk_rejects_k_beyond_the_axis() {
    let _ = ct::zeros(&[2, 3], DType::F32).topk(4, 1);
}

#[test]
#[should_panic(expected = "cotangent::argsort: axis 2 is out of range for shape [2, 3]")]
fn argsort_rejects_a_bad_axis() {
    let _ = ct::zeros(&[2, 3], DType::F32).argsort(2, false);
}

#[test]
#[should_panic(expected = "cotangent::sort: a 0-d array")]
fn sort_rejects_a_scalar() {
    let _ = Array::scalar(1.0f32).sort(0, false);
}

#[test]
fn compiled_sort_and_topk_equal_the_eager_ops() {
    let x = Lcg(9).signed(&[4, 7]);
    let f = |a: &[Array]| {
        let (v, i) = a[0].topk(3, -1);
        vec![a[0].sort(0, false), v, i.astype(DType::F64)]
    };
    let got = ct::compile(f)(std::slice::from_ref(&x)).unwrap();
    for (k, (g, w)) in got.iter().zip(f(std::slice::from_ref(&x))).enumerate() {
        assert_close(&vals(g), &vals(&w), 0.0, &format!("compiled output {k}"));
    }
}
