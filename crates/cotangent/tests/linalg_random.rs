//! Matmul / linear algebra and random tests: forward values against f64 reference loops,
//! VJP/JVP against central finite differences, vmap against loops; the Threefry generator
//! against published known answers and the samplers against statistics.
mod common;

use common::{assert_close, check_grads, vals, Lcg};
use cotangent::{self as ct, Array, DType};

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// numpy matmul by definition: f64 loops with 1-D promotion and broadcast batch axes.
fn ref_matmul(a: &[f64], sa: &[usize], b: &[f64], sb: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let (a1, b1) = (sa.len() == 1, sb.len() == 1);
    let sa: Vec<usize> = if a1 { vec![1, sa[0]] } else { sa.to_vec() };
    let sb: Vec<usize> = if b1 { vec![sb[0], 1] } else { sb.to_vec() };
    let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
    let (ba, bb) = (&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    let nb = ba.len().max(bb.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; nb - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(ba), pad(bb));
    let batch: Vec<usize> = (0..nb).map(|i| pa[i].max(pb[i])).collect();
    let (sta, stb) = (strides(&pa), strides(&pb));
    let count: usize = batch.iter().product();
    let mut out = vec![0.0; count * m * n];
    for bi in 0..count {
        let (mut oa, mut ob, mut r) = (0, 0, bi);
        for ax in (0..nb).rev() {
            let idx = r % batch[ax];
            r /= batch[ax];
            if pa[ax] != 1 {
                oa += idx * sta[ax];
            }
            if pb[ax] != 1 {
                ob += idx * stb[ax];
            }
        }
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..k {
                    s += a[(oa * m + i) * k + p] * b[(ob * k + p) * n + j];
                }
                out[(bi * m + i) * n + j] = s;
            }
        }
    }
    let mut shape = batch;
    if !a1 {
        shape.push(m);
    }
    if !b1 {
        shape.push(n);
    }
    (out, shape)
}

fn check_matmul(rng: &mut Lcg, sa: &[usize], sb: &[usize], dtype: DType, tol: f64) {
    let (na, nb): (usize, usize) = (sa.iter().product(), sb.iter().product());
    // integers for int dtypes, otherwise values representable in the dtype
    let mk = |rng: &mut Lcg, n: usize| -> Vec<f64> {
        let v = rng.vec(n, -1.0, 1.0);
        if dtype.is_float() {
            Array::from_vec(v, &[n]).astype(dtype).to_f64_vec().unwrap()
        } else {
            v.iter().map(|x| (x * 5.0).round()).collect()
        }
    };
    let (av, bv) = (mk(rng, na), mk(rng, nb));
    let a = Array::from_vec(av.clone(), sa).astype(dtype);
    let b = Array::from_vec(bv.clone(), sb).astype(dtype);
    let y = a.matmul(&b);
    let (r, rs) = ref_matmul(&av, sa, &bv, sb);
    assert_eq!(y.shape(), &rs[..], "shape of {sa:?} @ {sb:?}");
    assert_eq!(y.dtype(), dtype);
    assert_close(&vals(&y), &r, tol, &format!("{sa:?} @ {sb:?} ({dtype})"));
}

#[test]
fn matmul_shapes_f64() {
    let mut rng = Lcg(1);
    let cases: &[(&[usize], &[usize])] = &[
        (&[3, 4], &[4, 5]),
        (&[4], &[4, 5]),
        (&[3, 4], &[4]),
        (&[4], &[4]),
        (&[2, 3, 4], &[4, 5]),
        (&[3, 4], &[2, 4, 5]),
        (&[2, 1, 3, 4], &[5, 4, 2]),
        (&[1, 3, 4], &[6, 4, 2]),
        (&[4], &[2, 3, 4, 5]),
        (&[2, 3, 4], &[4]),
        (&[1, 1], &[1, 1]),
        (&[7, 33], &[33, 9]),
        (&[40, 30], &[30, 50]),
        (&[3, 17, 20], &[3, 20, 19]),
    ];
    for (sa, sb) in cases {
        check_matmul(&mut rng, sa, sb, DType::F64, 1e-12);
    }
}

#[test]
fn matmul_dtypes() {
    let mut rng = Lcg(2);
    for (dtype, tol) in [
        (DType::F32, 1e-5),
        (DType::F64, 1e-12),
        (DType::F16, 2e-2),
        (DType::BF16, 3e-2),
        (DType::I32, 0.0),
        (DType::I64, 0.0),
    ] {
        for (sa, sb) in [(&[5, 6][..], &[6, 7][..]), (&[2, 20, 30], &[30, 25]), (&[9], &[9, 3])] {
            check_matmul(&mut rng, sa, sb, dtype, tol);
        }
    }
    // mixed dtypes promote
    let a = Array::from_slice(&[1i32, 2, 3, 4], &[2, 2]);
    let b = Array::from_slice(&[0.5f32, 0.25, 1.0, 2.0], &[2, 2]);
    let y = a.matmul(&b);
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.5, 4.25, 5.5, 8.75]);
    // bool: or of ands
    let p = Array::from_slice(&[true, false, false, false], &[2, 2]);
    let q = Array::from_slice(&[false, true, true, false], &[2, 2]);
    assert_eq!(p.matmul(&q).to_vec::<bool>().unwrap(), vec![false, true, false, false]);
    // u8 wraps like numpy
    let u = Array::from_slice(&[200u8, 100], &[1, 2]);
    let v = Array::from_slice(&[1u8, 1], &[2, 1]);
    assert_eq!(u.matmul(&v).to_vec::<u8>().unwrap(), vec![44]);
}

#[test]
fn matmul_strided_and_broadcast_views() {
    let mut rng = Lcg(3);
    // transposed views of both operands (no copy in the kernel), several sizes incl. gemm path
    for (m, k, n) in [(3, 4, 5), (20, 30, 25), (64, 70, 80)] {
        let at = rng.signed(&[k, m]);
        let bt = rng.signed(&[n, k]);
        let y = at.t().matmul(&bt.t());
        let a: Vec<f64> = vals(&at.t());
        let b: Vec<f64> = vals(&bt.t());
        let (r, _) = ref_matmul(&a, &[m, k], &b, &[k, n]);
        assert_close(&vals(&y), &r, 1e-12, "transposed");
        // f32 strided too
        let y32 = at.astype(DType::F32).t().matmul(&bt.astype(DType::F32).t());
        assert_close(&vals(&y32), &r, 1e-5, "transposed f32");
    }
    // batch-transposed: [b, k, m] -> swap last two
    let x = rng.signed(&[3, 6, 4]);
    let w = rng.signed(&[3, 6, 5]);
    let y = x.swapaxes(-1, -2).matmul(&w);
    let (r, s) = ref_matmul(&vals(&x.swapaxes(-1, -2)), &[3, 4, 6], &vals(&w), &[3, 6, 5]);
    assert_eq!(y.shape(), &s[..]);
    assert_close(&vals(&y), &r, 1e-12, "batch transposed");
    // broadcast views (zero strides) as operands: full() is a broadcast of one element
    let ones = ct::full(&[4, 6], 2.0, DType::F64);
    let y = ones.matmul(&w);
    let (r, _) = ref_matmul(&[2.0; 24], &[4, 6], &vals(&w), &[3, 6, 5]);
    assert_close(&vals(&y), &r, 1e-12, "broadcast operand");
    // a row broadcast along the batch: [1, 6] -> [3, 1, 6]
    let row = rng.signed(&[6]).broadcast_to(&[3, 2, 6]);
    let y = row.matmul(&w);
    let (r, _) = ref_matmul(&vals(&row), &[3, 2, 6], &vals(&w), &[3, 6, 5]);
    assert_close(&vals(&y), &r, 1e-12, "broadcast rows");
}

#[test]
fn matmul_zero_size() {
    let a = ct::zeros(&[3, 0], DType::F32);
    let b = ct::zeros(&[0, 4], DType::F32);
    let y = a.matmul(&b);
    assert_eq!(y.shape(), &[3, 4]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0; 12]);
    let a = Array::from_vec(Vec::<f64>::new(), &[2, 0, 3]);
    let b = Array::from_vec(vec![1.0f64; 15], &[3, 5]);
    assert_eq!(a.matmul(&b).shape(), &[2, 0, 5]);
    let e = Array::from_vec(Vec::<i32>::new(), &[0]);
    assert_eq!(e.matmul(&e).to_vec::<i32>().unwrap(), vec![0]);
}

#[test]
fn matmul_large_parallel_path() {
    let mut rng = Lcg(4);
    for dtype in [DType::F32, DType::F64] {
        check_matmul(&mut rng, &[300, 200], &[200, 250], dtype, if dtype == DType::F32 { 1e-4 } else { 1e-11 });
    }
    // many medium matrices in a batch (batch-parallel path)
    check_matmul(&mut rng, &[16, 24, 24], &[16, 24, 24], DType::F32, 1e-5);
    check_matmul(&mut rng, &[2, 130, 120], &[120, 110], DType::F16, 3e-2);
    // determinism: the same product twice is bit-identical, also from another thread
    let a = rng.signed(&[257, 300]).astype(DType::F32);
    let b = rng.signed(&[300, 263]).astype(DType::F32);
    let y1 = a.matmul(&b).to_vec::<f32>().unwrap();
    let (a2, b2) = (a.clone(), b.clone());
    let y2 = std::thread::spawn(move || a2.matmul(&b2).to_vec::<f32>().unwrap()).join().unwrap();
    assert!(y1.iter().zip(&y2).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
#[should_panic(expected = "cotangent::matmul: contracted extents differ")]
fn matmul_bad_shapes_panic() {
    let _ = ct::zeros(&[2, 3], DType::F32).matmul(&ct::zeros(&[4, 2], DType::F32));
}

#[test]
#[should_panic(expected = "cotangent::matmul: batch axes")]
fn matmul_bad_batch_panics() {
    let _ = ct::zeros(&[2, 2, 3], DType::F32).matmul(&ct::zeros(&[3, 3, 2], DType::F32));
}

#[test]
fn outer_tensordot_einsum() {
    let mut rng = Lcg(5);
    let a = rng.signed(&[3]);
    let b = rng.signed(&[4]);
    let (av, bv) = (vals(&a), vals(&b));
    let o = ct::outer(&a, &b);
    assert_eq!(o.shape(), &[3, 4]);
    let r: Vec<f64> = (0..12).map(|e| av[e / 4] * bv[e % 4]).collect();
    assert_close(&vals(&o), &r, 1e-15, "outer");

    // tensordot: x [2,3,4], y [4,3,5], contract x axes (1,2) with y axes (1,0) -> [2,5]
    let x = rng.signed(&[2, 3, 4]);
    let y = rng.signed(&[4, 3, 5]);
    let (xv, yv) = (vals(&x), vals(&y));
    let t = ct::tensordot(&x, &y, ([1, 2], [1, 0]));
    assert_eq!(t.shape(), &[2, 5]);
    let mut r = vec![0.0; 10];
    for i in 0..2 {
        for l in 0..5 {
            for j in 0..3 {
                for k in 0..4 {
                    r[i * 5 + l] += xv[(i * 3 + j) * 4 + k] * yv[(k * 3 + j) * 5 + l];
                }
            }
        }
    }
    assert_close(&vals(&t), &r, 1e-12, "tensordot pairs");
    // axes = n: x [2,3,4] with z [3,4,5], n = 2 -> [2,5]
    let z = rng.signed(&[3, 4, 5]);
    let zv = vals(&z);
    let t = ct::tensordot(&x, &z, 2);
    let mut r = vec![0.0; 10];
    for i in 0..2 {
        for l in 0..5 {
            for j in 0..3 {
                for k in 0..4 {
                    r[i * 5 + l] += xv[(i * 3 + j) * 4 + k] * zv[(j * 4 + k) * 5 + l];
                }
            }
        }
    }
    assert_close(&vals(&t), &r, 1e-12, "tensordot n");
    assert_eq!(ct::tensordot(&a, &b, 0).shape(), &[3, 4]);

    // einsum
    let p = rng.signed(&[3, 4]);
    let q = rng.signed(&[4, 5]);
    let (pv, qv) = (vals(&p), vals(&q));
    let (r, _) = ref_matmul(&pv, &[3, 4], &qv, &[4, 5]);
    assert_close(&vals(&ct::einsum("ij,jk->ik", &[p.clone(), q.clone()])), &r, 1e-12, "ij,jk->ik");
    assert_close(&vals(&ct::einsum("ij,jk", &[p.clone(), q.clone()])), &r, 1e-12, "implicit");
    let ki = ct::einsum("ij,jk->ki", &[p.clone(), q.clone()]);
    let rt: Vec<f64> = (0..15).map(|e| r[(e % 3) * 5 + e / 3]).collect();
    assert_close(&vals(&ki), &rt, 1e-12, "ij,jk->ki");
    assert_close(&vals(&ct::einsum("ij->ji", std::slice::from_ref(&p))), &vals(&p.t()), 0.0, "ij->ji");
    let s: f64 = pv.iter().sum();
    assert_close(&vals(&ct::einsum("ij->", std::slice::from_ref(&p))), &[s], 1e-12, "ij->");
    let rows: Vec<f64> = (0..3).map(|i| pv[i * 4..i * 4 + 4].iter().sum()).collect();
    assert_close(&vals(&ct::einsum("ij->i", std::slice::from_ref(&p))), &rows, 1e-12, "ij->i");
    let d: f64 = av.iter().zip(&av).map(|(x, y)| x * y).sum();
    assert_close(&vals(&ct::einsum("i,i->", &[a.clone(), a.clone()])), &[d], 1e-12, "i,i->");
    assert_close(&vals(&ct::einsum("i,j->ij", &[a.clone(), b.clone()])), &vals(&o), 1e-15, "i,j->ij");
    // batched
    let u = rng.signed(&[2, 3, 4]);
    let v = rng.signed(&[2, 4, 5]);
    let (r, _) = ref_matmul(&vals(&u), &[2, 3, 4], &vals(&v), &[2, 4, 5]);
    assert_close(&vals(&ct::einsum("bij,bjk->bik", &[u.clone(), v.clone()])), &r, 1e-12, "bij,bjk->bik");
    // attention scores: bhqd,bhkd->bhqk
    let (bb, h, qn, kn, dd) = (2, 3, 4, 5, 6);
    let qa = rng.signed(&[bb, h, qn, dd]);
    let ka = rng.signed(&[bb, h, kn, dd]);
    let (qv, kv) = (vals(&qa), vals(&ka));
    let sc = ct::einsum("bhqd,bhkd->bhqk", &[qa, ka]);
    assert_eq!(sc.shape(), &[bb, h, qn, kn]);
    let mut r = vec![0.0; bb * h * qn * kn];
    for g in 0..bb * h {
        for i in 0..qn {
            for j in 0..kn {
                for e in 0..dd {
                    r[(g * qn + i) * kn + j] += qv[(g * qn + i) * dd + e] * kv[(g * kn + j) * dd + e];
                }
            }
        }
    }
    assert_close(&vals(&sc), &r, 1e-12, "bhqd,bhkd->bhqk");
    // a letter summed in one operand only, and a free letter of b before a's: "ij,jkl->lk"
    let w = rng.signed(&[4, 2, 3]);
    let wv = vals(&w);
    let e = ct::einsum("ij,jkl->lk", &[p.clone(), w]);
    let mut r = vec![0.0; 6];
    for l in 0..3 {
        for k in 0..2 {
            for i in 0..3 {
                for j in 0..4 {
                    r[l * 2 + k] += pv[i * 4 + j] * wv[(j * 2 + k) * 3 + l];
                }
            }
        }
    }
    assert_close(&vals(&e), &r, 1e-12, "ij,jkl->lk");
}

#[test]
#[should_panic(expected = "cotangent::einsum: repeated subscript")]
fn einsum_unsupported_diagonal_panics() {
    let _ = ct::einsum("ii->i", &[ct::zeros(&[3, 3], DType::F32)]);
}

#[test]
#[should_panic(expected = "ellipsis")]
fn einsum_unsupported_ellipsis_panics() {
    let _ = ct::einsum("...ij,...jk->...ik", &[ct::zeros(&[3, 3], DType::F32), ct::zeros(&[3, 3], DType::F32)]);
}

// ----- transforms of matmul ----------------------------------------------------------------

#[test]
fn matmul_grads() {
    let mut rng = Lcg(8);
    let mm = |x: &[Array]| x[0].matmul(&x[1]);
    let cases: &[(&[usize], &[usize])] = &[
        (&[3, 4], &[4, 2]),
        (&[4], &[4, 2]),
        (&[3, 4], &[4]),
        (&[4], &[4]),
        (&[2, 3, 4], &[4, 2]),
        (&[2, 1, 3, 4], &[3, 4, 2]),
        (&[4], &[2, 4, 3]),
    ];
    for (sa, sb) in cases {
        check_grads(&format!("matmul {sa:?} @ {sb:?}"), mm, &[rng.signed(sa), rng.signed(sb)]);
    }
    // through einsum / tensordot / outer (built from matmul, reshapes, transposes, sums)
    check_grads(
        "einsum bhqd",
        |x: &[Array]| ct::einsum("bhqd,bhkd->bhqk", &[x[0].clone(), x[1].clone()]),
        &[rng.signed(&[1, 2, 3, 4]), rng.signed(&[1, 2, 2, 4])],
    );
    check_grads(
        "tensordot",
        |x: &[Array]| ct::tensordot(&x[0], &x[1], ([0, 2], [1, 0])),
        &[rng.signed(&[2, 3, 4]), rng.signed(&[4, 2, 2])],
    );
    check_grads("outer", |x: &[Array]| ct::outer(&x[0], &x[1]), &[rng.signed(&[3]), rng.signed(&[2])]);
    // second order: grad of grad of sum((A B)^2) w.r.t. A, checked through hvp-like jvp of vjp
    let g = ct::grad(|x: &[Array]| x[0].matmul(&x[1]).square().sum_all());
    let a = rng.signed(&[2, 3]);
    let b = rng.signed(&[3, 2]);
    let ga = g(&[a.clone(), b.clone()]).unwrap();
    // d/dA sum((AB)^2) = 2 (AB) Bᵀ
    let r = (a.matmul(&b) * 2.0).matmul(&b.t());
    assert_close(&vals(&ga[0]), &vals(&r), 1e-12, "grad");
    check_grads("grad of matmul", move |x: &[Array]| g(x).unwrap().remove(0), &[a, b]);
}

#[test]
fn matmul_vmap_matches_loop() {
    let mut rng = Lcg(9);
    let mm = |x: &[Array]| x[0].matmul(&x[1]);
    type Case<'a> = (&'a [usize], &'a [usize], Option<isize>, Option<isize>);
    let cases: &[Case] = &[
        (&[3, 4], &[4, 2], Some(0), None),
        (&[3, 4], &[4, 2], None, Some(1)),
        (&[3, 4], &[4, 2], Some(1), Some(0)),
        (&[4], &[4, 2], Some(0), None),
        (&[4], &[4], Some(0), Some(0)),
        (&[2, 3, 4], &[4, 2], Some(2), None),
        (&[3, 4], &[5, 4, 2], Some(0), None),
        (&[3, 4], &[5, 4, 2], Some(1), Some(2)),
    ];
    let nb = 3;
    for (sa, sb, ia, ib) in cases {
        let full = |s: &[usize], ax: Option<isize>| {
            let mut v = s.to_vec();
            if let Some(a) = ax {
                v.insert(a as usize, nb);
            }
            v
        };
        let (xa, xb) = (rng.signed(&full(sa, *ia)), rng.signed(&full(sb, *ib)));
        let f = ct::vmap(mm, &[*ia, *ib], &[Some(0)]);
        let y = f(&[xa.clone(), xb.clone()]).unwrap().remove(0);
        let pick = |x: &Array, s: &[usize], ax: Option<isize>, i: usize| -> Array {
            match ax {
                None => x.clone(),
                Some(a) => {
                    let moved = x.moveaxis(a, 0);
                    let n: usize = s.iter().product();
                    Array::from_vec(vals(&moved)[i * n..(i + 1) * n].to_vec(), s)
                }
            }
        };
        let mut expect = Vec::new();
        for i in 0..nb {
            expect.extend(vals(&mm(&[pick(&xa, sa, *ia, i), pick(&xb, sb, *ib, i)])));
        }
        assert_eq!(y.shape()[0], nb);
        assert_close(&vals(&y), &expect, 1e-12, &format!("vmap {sa:?}@{sb:?} axes {ia:?},{ib:?}"));
    }
    // vmap of grad
    let g = ct::grad(|x: &[Array]| x[0].matmul(&x[1]).sum_all());
    let vg = ct::vmap(g, &[Some(0), None], &[Some(0), Some(0)]);
    let xs = rng.signed(&[nb, 2, 3]);
    let w = rng.signed(&[3, 4]);
    let out = vg(&[xs, w.clone()]).unwrap();
    // d/dA sum(A W) = ones @ Wᵀ: each row is the row sums of W
    let ws = vals(&w);
    let rs: Vec<f64> = (0..3).map(|i| ws[i * 4..i * 4 + 4].iter().sum()).collect();
    let expect: Vec<f64> = (0..nb * 2).flat_map(|_| rs.clone()).collect();
    assert_close(&vals(&out[0]), &expect, 1e-12, "vmap of grad");
}

// ----- random ---------------------------------------------------------------------------------

#[test]
fn threefry_known_answers() {
    use ct::backend::cpu::random::threefry2x32;
    // Random123 kat_vectors, threefry2x32 with 20 rounds
    assert_eq!(threefry2x32([0, 0], [0, 0]), [0x6b200159, 0x99ba4efe]);
    assert_eq!(threefry2x32([u32::MAX, u32::MAX], [u32::MAX, u32::MAX]), [0x1cb996fc, 0xbb002be7]);
    assert_eq!(threefry2x32([0x13198a2e, 0x03707344], [0x243f6a88, 0x85a308d3]), [0xc4923a9c, 0x483df7a0]);
}

#[test]
fn keys_split_fold_in() {
    let k = ct::random::key(42);
    assert_eq!(k.to_vec::<u32>().unwrap(), vec![0, 42]);
    assert_eq!(ct::random::key(1 << 33 | 5).to_vec::<u32>().unwrap(), vec![2, 5]);
    let s = ct::random::split(&k, 4);
    assert_eq!(s.shape(), &[4, 2]);
    let sv = s.to_vec::<u32>().unwrap();
    for i in 0..4 {
        let f = ct::random::fold_in(&k, i as u32).to_vec::<u32>().unwrap();
        assert_eq!(f, sv[2 * i..2 * i + 2].to_vec());
        let expect = ct::backend::cpu::random::threefry2x32([0, 42], [0, i as u32]);
        assert_eq!(f, expect.to_vec());
    }
    let (k1, k2) = ct::random::split2(&k);
    let (a, b) =
        (ct::random::bits(&k1, &[64]).to_vec::<u32>().unwrap(), ct::random::bits(&k2, &[64]).to_vec::<u32>().unwrap());
    assert_ne!(a, b);
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(same <= 1, "split streams look related: {same} equal words");
    // the same key gives the same numbers
    assert_eq!(a, ct::random::bits(&k1, &[64]).to_vec::<u32>().unwrap());
    let ks = ct::random::split_keys(&k, 3);
    assert_eq!(ks[2].to_vec::<u32>().unwrap(), sv[4..6].to_vec());
}

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (m, v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n)
}

#[test]
fn uniform_and_normal_statistics() {
    let n = 100_000;
    let key = ct::random::key(0);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let u = ct::random::uniform(&key, &[n], -2.0, 3.0, dtype);
        assert_eq!(u.dtype(), dtype);
        let v = vals(&u);
        assert!(v.iter().all(|&x| (-2.0..3.0).contains(&x)), "uniform {dtype} out of range");
        let (m, var) = mean_var(&v);
        // mean 0.5, variance 25/12; std error of the mean = sqrt(25/12/n) ~ 0.0046
        assert!((m - 0.5).abs() < 0.025, "uniform {dtype} mean {m}");
        assert!((var - 25.0 / 12.0).abs() < 0.05, "uniform {dtype} var {var}");
        let z = vals(&ct::random::normal(&key, &[n], dtype));
        let (m, var) = mean_var(&z);
        assert!(m.abs() < 0.02, "normal {dtype} mean {m}");
        assert!((var - 1.0).abs() < 0.03, "normal {dtype} var {var}");
        // fraction within one sigma ~ 0.6827
        let within = z.iter().filter(|x| x.abs() < 1.0).count() as f64 / n as f64;
        assert!((within - 0.6827).abs() < 0.01, "normal {dtype} P(|z|<1) = {within}");
    }
    // uniform histogram over 10 bins
    let v = vals(&ct::random::uniform(&key, &[n], 0.0, 1.0, DType::F32));
    let mut bins = [0usize; 10];
    for x in &v {
        bins[(x * 10.0) as usize] += 1;
    }
    for b in bins {
        assert!((b as f64 - 10_000.0).abs() < 500.0, "uniform bins {bins:?}");
    }
    // truncated normal: in range, mean of N(0,1) truncated to [-1, 2] = (phi(-1)-phi(2))/(Phi(2)-Phi(-1))
    let t = vals(&ct::random::truncated_normal(&key, -1.0, 2.0, &[n], DType::F64));
    assert!(t.iter().all(|&x| (-1.0..=2.0).contains(&x)));
    let phi = |x: f64| (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let (cdf_m1, cdf_2) = (0.15865525393145707, 0.9772498680518208);
    let expect = (phi(-1.0) - phi(2.0)) / (cdf_2 - cdf_m1);
    let (m, _) = mean_var(&t);
    assert!((m - expect).abs() < 0.01, "truncated normal mean {m} vs {expect}");
    // gumbel mean = Euler-Mascheroni constant, variance pi^2/6
    let g = vals(&ct::random::gumbel(&key, &[n], DType::F32));
    let (m, var) = mean_var(&g);
    assert!((m - 0.5772).abs() < 0.02, "gumbel mean {m}");
    assert!((var - 1.6449).abs() < 0.06, "gumbel var {var}");
}

#[test]
fn randint_bernoulli_permutation_categorical() {
    let key = ct::random::key(7);
    let (k1, k2) = ct::random::split2(&key);
    let r = ct::random::randint(&k1, -3, 4, &[70_000], DType::I32);
    assert_eq!(r.dtype(), DType::I32);
    let rv = r.to_vec::<i32>().unwrap();
    let mut counts = [0usize; 7];
    for x in rv {
        assert!((-3..4).contains(&x));
        counts[(x + 3) as usize] += 1;
    }
    for c in counts {
        assert!((c as f64 - 10_000.0).abs() < 500.0, "randint counts {counts:?}");
    }
    let b = ct::random::bernoulli(&k2, 0.3, &[100_000]);
    assert_eq!(b.dtype(), DType::Bool);
    let frac = b.to_vec::<bool>().unwrap().iter().filter(|&&x| x).count() as f64 / 100_000.0;
    assert!((frac - 0.3).abs() < 0.01, "bernoulli {frac}");

    for n in [0usize, 1, 10, 1000] {
        let p = ct::random::permutation(&key, n).to_vec::<i32>().unwrap();
        let mut s = p.clone();
        s.sort_unstable();
        assert_eq!(s, (0..n as i32).collect::<Vec<_>>());
        if n == 1000 {
            assert_ne!(p, s, "a permutation of 1000 should not be the identity");
        }
    }

    // categorical: frequencies match softmax(logits) along axis 1 of a [2, 4] logits array
    let logits = Array::from_slice(&[0.0f32, 1.0, 2.0, -1.0, 3.0, 0.0, 0.0, 0.0], &[2, 4]);
    let n = 40_000;
    let big = logits.reshape(&[1, 2, 4]).broadcast_to(&[n, 2, 4]);
    let s = ct::random::categorical(&key, &big, -1);
    assert_eq!(s.shape(), &[n, 2]);
    assert_eq!(s.dtype(), DType::I32);
    let sv = s.to_vec::<i32>().unwrap();
    let counts_for = |row: usize| -> Vec<f64> {
        let mut c = vec![0.0; 4];
        for v in sv.iter().skip(row).step_by(2) {
            c[*v as usize] += 1.0 / n as f64;
        }
        c
    };
    let lv = vals(&logits);
    for row in 0..2 {
        let l = &lv[row * 4..row * 4 + 4];
        let z: f64 = l.iter().map(|x| x.exp()).sum();
        let c = counts_for(row);
        for j in 0..4 {
            let p = l[j].exp() / z;
            assert!((c[j] - p).abs() < 0.012, "categorical row {row}: freq {c:?} vs p_{j} = {p}");
        }
    }
    // axis 0
    let s = ct::random::categorical(&key, &logits.t(), 0);
    assert_eq!(s.shape(), &[2]);
}

#[test]
fn random_determinism_threads_and_vmap() {
    let key = ct::random::key(123);
    let a = ct::random::normal(&key, &[50_000], DType::F32).to_vec::<f32>().unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let k = key.clone();
            std::thread::spawn(move || ct::random::normal(&k, &[50_000], DType::F32).to_vec::<f32>().unwrap())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), a);
    }
    // a thread pool with one thread gives the same numbers as the default pool
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let k = key.clone();
    let b = pool.install(move || ct::random::normal(&k, &[50_000], DType::F32).to_vec::<f32>().unwrap());
    assert_eq!(a, b);
    // vmap over a batch of keys equals a loop over the keys
    let keys = ct::random::split(&key, 3);
    let f = ct::vmap(|k: &[Array]| ct::random::uniform(&k[0], &[5], 0.0, 1.0, DType::F64), &[Some(0)], &[Some(0)]);
    let y = f(std::slice::from_ref(&keys)).unwrap().remove(0);
    assert_eq!(y.shape(), &[3, 5]);
    let mut expect = Vec::new();
    for k in ct::random::split_keys(&key, 3) {
        expect.extend(vals(&ct::random::uniform(&k, &[5], 0.0, 1.0, DType::F64)));
    }
    assert_eq!(vals(&y), expect);
    // keys batched along axis 1, and a sampler combined with a batched array
    let g =
        ct::vmap(|x: &[Array]| &x[1] + ct::random::normal(&x[0], &[2], DType::F64), &[Some(1), Some(0)], &[Some(0)]);
    let xs = Array::from_slice(&[10.0f64, 20.0, 30.0], &[3, 1]);
    let y = g(&[keys.t(), xs]).unwrap().remove(0);
    let mut expect = Vec::new();
    for (i, k) in ct::random::split_keys(&key, 3).iter().enumerate() {
        expect.extend(vals(&ct::random::normal(k, &[2], DType::F64)).iter().map(|v| v + 10.0 * (i + 1) as f64));
    }
    assert_close(&vals(&y), &expect, 1e-15, "vmap keys axis 1");
    // gradients through a sampler are zero for the key and pass for the other operand
    let (_, g) = ct::vjp(
        |x: &[Array]| &x[0] * ct::random::normal(&ct::random::key(1), &[3], DType::F64),
        &[Array::from_slice(&[1.0f64, 2.0, 3.0], &[3])],
        &[Array::from_slice(&[1.0f64, 1.0, 1.0], &[3])],
    )
    .unwrap();
    assert_eq!(vals(&g[0]), vals(&ct::random::normal(&ct::random::key(1), &[3], DType::F64)));
}

#[test]
#[should_panic(expected = "cotangent::random::uniform: a key is a uint32 array of shape [2]")]
fn random_bad_key_panics() {
    let _ = ct::random::uniform(&ct::zeros(&[3], DType::U32), &[2], 0.0, 1.0, DType::F32);
}
