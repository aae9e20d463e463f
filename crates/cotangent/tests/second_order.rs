//! Second-order checks for every smooth differentiable op, in `f64` on random inputs.
//!
//! Each case is an op `f` (one table entry: a name, a closure, its inputs). The checker builds
//! the scalar `L(x) = sum(f(x) * (w + u * f(x)))` for random weights `w`, `u` (the quadratic
//! term makes linear ops — shape ops, sums, matmul — have a non-zero Hessian, so the VJP of
//! their VJP rules is exercised too), takes the library's gradient `g = grad(L)`, and checks:
//!
//! 1. reverse-over-reverse: `grad(x -> <g(x), v>)` (the Hessian-vector product `H v` for a
//!    random `v` over all inputs) against central differences of `g` along `v`;
//! 2. forward-over-reverse: `jvp(g, x, v)` and `ct::hvp(L, x, v)` against (1);
//! 3. `ct::hessian(L)` (jacfwd of grad, through vmap) for the diagonal block of every input
//!    against central differences of `g` along each coordinate of that input;
//! 4. reverse-over-forward, `grad(x -> jvp(L, x, v))`, against (1), and forward-over-forward,
//!    `jvp(x -> jvp(L, x, v), x, v) = vᵀ H v`, against `<v, (1)>`.
//!
//! Inputs keep away from the points where an op is not smooth (ties of max/min, clip bounds,
//! the kink of `abs`, the edges of a domain).
mod common;

use common::{assert_close, central_diff_columns, vals, Lcg};
use cotangent::{self as ct, Array, DType};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

type Fun = Arc<dyn Fn(&[Array]) -> Array + Send + Sync>;

/// One table entry: an op applied to `f64` inputs.
struct Case {
    name: String,
    f: Fun,
    xs: Vec<Array>,
}

fn case(name: impl Into<String>, f: impl Fn(&[Array]) -> Array + Send + Sync + 'static, xs: Vec<Array>) -> Case {
    Case { name: name.into(), f: Arc::new(f), xs }
}

/// Finite-difference step and tolerance (relative, `tol * (1 + |want|)`) against it.
const EPS: f64 = 1e-5;
const FD_TOL: f64 = 1e-6;
/// Tolerance between the transform compositions, which compute the same products.
const AD_TOL: f64 = 1e-9;

fn dot(a: &[Array], b: &[Array]) -> f64 {
    a.iter().zip(b).map(|(x, y)| vals(x).iter().zip(vals(y)).map(|(p, q)| p * q).sum::<f64>()).sum()
}

/// `xs + s * v`, input by input.
fn shifted(xs: &[Array], v: &[Array], s: f64) -> Vec<Array> {
    xs.iter().zip(v).map(|(x, d)| Array::from_vec(vals(&(x + &(d * s))), x.shape())).collect()
}

/// `ct::hessian` of `loss` with respect to input `i` (moved first, as `hessian` differentiates its
/// first argument) against central differences of the library's gradient `g` of that input.
fn hessian_block(
    name: &str,
    loss: &(impl Fn(&[Array]) -> Array + Send + Sync + Clone + 'static),
    g: &impl Fn(&[Array]) -> ct::Result<Vec<Array>>,
    xs: &[Array],
    i: usize,
) {
    // reordered inputs: input i first, then the others in order
    let order: Vec<usize> = std::iter::once(i).chain((0..xs.len()).filter(|&j| j != i)).collect();
    let (l, o) = (loss.clone(), order.clone());
    let loss_i = move |a: &[Array]| {
        let mut args = a.to_vec();
        for (k, &j) in o.iter().enumerate() {
            args[j] = a[k].clone();
        }
        l(&args)
    };
    let reordered: Vec<Array> = order.iter().map(|&j| xs[j].clone()).collect();
    let h = ct::hessian(loss_i)(&reordered).unwrap();
    let x = &xs[i];
    let n = x.size();
    let mut hshape = x.shape().to_vec();
    hshape.extend_from_slice(x.shape());
    assert_eq!(h.shape(), &hshape[..], "{name}: hessian shape of input {i}");
    // column k: d g / d x_k; the Hessian is laid out row j = g_j
    let cols = central_diff_columns(|a| vals(&g(a).unwrap()[i]), xs, i, EPS);
    let fd: Vec<f64> = (0..n * n).map(|t| cols[t % n][t / n]).collect();
    assert_close(&vals(&h), &fd, FD_TOL, &format!("{name}: ct::hessian of input {i} vs finite differences"));
}

fn check(c: &Case, seed: u64) {
    let mut rng = Lcg(seed);
    let name = &c.name;
    let xs = &c.xs;
    for x in xs {
        assert_eq!(x.dtype(), DType::F64, "{name}: inputs must be f64");
    }
    let out = (c.f)(xs);
    let (w, u) = (rng.signed(out.shape()), rng.array(out.shape(), -0.5, 0.5));
    let f = c.f.clone();
    let loss = move |x: &[Array]| {
        let y = f(x);
        (&y * &(&w + &(&y * &u))).sum_all()
    };
    let g = ct::grad(loss.clone());
    let v: Vec<Array> = xs.iter().map(|x| rng.signed(x.shape())).collect();

    // 1. reverse-over-reverse against central differences of the gradient along v
    let (g2, v2) = (g.clone(), v.clone());
    let gv = move |x: &[Array]| -> ct::Result<Array> {
        let gs = g2(x)?;
        let mut acc = (&gs[0] * &v2[0]).sum_all();
        for (gi, vi) in gs.iter().zip(&v2).skip(1) {
            acc = acc + (gi * vi).sum_all();
        }
        Ok(acc)
    };
    let hv = ct::grad(gv)(xs).unwrap();
    let (gp, gm) = (g(&shifted(xs, &v, EPS)).unwrap(), g(&shifted(xs, &v, -EPS)).unwrap());
    for i in 0..xs.len() {
        assert_eq!(hv[i].shape(), xs[i].shape(), "{name}: shape of H v for input {i}");
        let fd: Vec<f64> = vals(&gp[i]).iter().zip(vals(&gm[i])).map(|(p, m)| (p - m) / (2.0 * EPS)).collect();
        assert_close(&vals(&hv[i]), &fd, FD_TOL, &format!("{name}: grad∘grad H v, input {i} vs finite differences"));
    }

    // 2. forward-over-reverse
    let (_, hv_fr) = ct::jvp(g.clone(), xs, &v).unwrap();
    let hv_lib = ct::hvp(loss.clone(), xs, &v).unwrap();
    for i in 0..xs.len() {
        let want = vals(&hv[i]);
        assert_close(&vals(&hv_fr[i]), &want, AD_TOL, &format!("{name}: jvp∘grad vs grad∘grad, input {i}"));
        assert_close(&vals(&hv_lib[i]), &want, AD_TOL, &format!("{name}: ct::hvp vs grad∘grad, input {i}"));
    }

    // 3. the full Hessian block of each input against differences along each coordinate
    for i in 0..xs.len() {
        hessian_block(name, &loss, &g, xs, i);
    }

    // 4. reverse-over-forward and forward-over-forward
    let (l2, v2) = (loss.clone(), v.clone());
    let dir = move |x: &[Array]| -> ct::Result<Array> { Ok(ct::jvp(l2.clone(), x, &v2)?.1.remove(0)) };
    let hv_rf = ct::grad(dir.clone())(xs).unwrap();
    for i in 0..xs.len() {
        assert_close(&vals(&hv_rf[i]), &vals(&hv[i]), AD_TOL, &format!("{name}: grad∘jvp vs grad∘grad, input {i}"));
    }
    let (_, vhv) = ct::jvp(dir, xs, &v).unwrap();
    let want = dot(&v, &hv);
    assert_close(&vals(&vhv[0]), &[want], AD_TOL, &format!("{name}: jvp∘jvp vᵀHv vs <v, grad∘grad>"));
}

/// Run every case, collecting failures so one report names all of them.
fn run(cases: Vec<Case>) {
    let mut failed = Vec::new();
    for (k, c) in cases.iter().enumerate() {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(c, 1000 + k as u64))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("{}: {msg}", c.name));
        }
    }
    assert!(failed.is_empty(), "{} of {} cases failed:\n{}", failed.len(), cases.len(), failed.join("\n\n"));
}

#[test]
fn unary_ops() {
    let mut r = Lcg(1);
    let s = [2, 3];
    type U = fn(&Array) -> Array;
    let table: &[(&str, U, f64, f64)] = &[
        ("negative", ct::negative, -1.0, 1.0),
        ("neg operator", |x| -x, -1.0, 1.0),
        ("exp", ct::exp, -1.0, 1.0),
        ("expm1", ct::expm1, -1.0, 1.0),
        ("log", ct::log, 0.5, 2.0),
        ("log1p", ct::log1p, -0.5, 1.0),
        ("log2", ct::log2, 0.5, 2.0),
        ("sqrt", ct::sqrt, 0.5, 2.0),
        ("rsqrt", ct::rsqrt, 0.5, 2.0),
        ("square", ct::square, -1.0, 1.0),
        ("sin", ct::sin, -2.0, 2.0),
        ("cos", ct::cos, -2.0, 2.0),
        ("tan", ct::tan, -1.0, 1.0),
        ("tanh", ct::tanh, -2.0, 2.0),
        ("sinh", ct::sinh, -1.5, 1.5),
        ("cosh", ct::cosh, -1.5, 1.5),
        ("arcsin", ct::arcsin, -0.8, 0.8),
        ("arccos", ct::arccos, -0.8, 0.8),
        ("arctan", ct::arctan, -2.0, 2.0),
        ("sigmoid", ct::sigmoid, -3.0, 3.0),
        ("erf", ct::erf, -1.5, 1.5),
        ("erfinv", ct::erfinv, -0.85, 0.85),
    ];
    let mut cases: Vec<Case> =
        table.iter().map(|&(n, op, lo, hi)| case(n, move |x| op(&x[0]), vec![r.array(&s, lo, hi)])).collect();
    // ops with a kink or pole at zero, on inputs of both signs away from it
    let away: &[(&str, U)] = &[("abs", ct::abs), ("reciprocal", ct::reciprocal)];
    cases.extend(away.iter().map(|&(n, op)| case(n, move |x| op(&x[0]), vec![r.away(&s, 0.4, 1.5)])));
    // a strided (transposed) input
    cases.push(case("exp of a transpose", |x| x[0].t().exp(), vec![r.signed(&[3, 2])]));
    run(cases);
}

#[test]
fn binary_ops() {
    let mut r = Lcg(2);
    type B = fn(&Array, &Array) -> Array;
    let table: &[(&str, B)] = &[
        ("add", |a, b| a + b),
        ("subtract", |a, b| a - b),
        ("multiply", |a, b| a * b),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
        ("logaddexp", |a, b| a.logaddexp(b)),
    ];
    let mut cases = Vec::new();
    // same shapes, then broadcasting both ways ([2, 1, 3] with [4, 3]) and against a scalar array
    let shapes: &[(&[usize], &[usize])] = &[(&[2, 3], &[2, 3]), (&[2, 1, 3], &[4, 3]), (&[3], &[]), (&[], &[2, 1])];
    for &(sa, sb) in shapes {
        for &(n, op) in table {
            cases.push(case(format!("{n} {sa:?} {sb:?}"), move |x| op(&x[0], &x[1]), vec![r.signed(sa), r.signed(sb)]));
        }
        let div = move |x: &[Array]| &x[0] / &x[1];
        cases.push(case(format!("divide {sa:?} {sb:?}"), div, vec![r.signed(sa), r.away(sb, 0.5, 2.0)]));
        let pow = move |x: &[Array]| x[0].power(&x[1]);
        cases.push(case(format!("power {sa:?} {sb:?}"), pow, vec![r.array(sa, 0.5, 2.0), r.array(sb, -1.5, 1.5)]));
        let at2 = move |x: &[Array]| x[0].arctan2(&x[1]);
        cases.push(case(format!("arctan2 {sa:?} {sb:?}"), at2, vec![r.signed(sa), r.away(sb, 0.3, 1.5)]));
    }
    // Rust scalars on either side (weak promotion)
    let s = [2, 3];
    cases.push(case("x * 3.0", |x| &x[0] * 3.0, vec![r.signed(&s)]));
    cases.push(case("2.0 - x", |x| ct::subtract(2.0, &x[0]), vec![r.signed(&s)]));
    cases.push(case("1.5 / x", |x| ct::divide(1.5, &x[0]), vec![r.away(&s, 0.5, 2.0)]));
    cases.push(case("x ^ 2.5", |x| x[0].power(2.5), vec![r.array(&s, 0.5, 2.0)]));
    cases.push(case("2.0 ^ x", |x| ct::power(2.0, &x[0]), vec![r.signed(&s)]));
    cases.push(case("x ^ x", |x| x[0].power(&x[0]), vec![r.array(&s, 0.5, 2.0)]));
    cases.push(case("transposed times broadcast", |x| x[0].t() * &x[1], vec![r.signed(&[3, 2]), r.signed(&[2, 1])]));
    cases.push(case(
        "maximum(x, 0.1)",
        |x| x[0].maximum(0.1),
        vec![Array::from_slice(&[-0.7, 0.4, 0.9, -0.2, 0.6, 1.3], &s)],
    ));
    // select: a constant condition, and one computed from the input (away from the switch)
    let cond = Array::from_slice(&[true, false], &[2, 1]);
    cases.push(case(
        "select broadcast",
        move |x| ct::select(&cond, x[0].sin(), x[1].exp()),
        vec![r.signed(&[2, 3]), r.signed(&[3])],
    ));
    cases.push(case(
        "select on x > 0",
        |x| ct::select(&x[0].greater(0.0), x[0].square(), &x[0] * 3.0),
        vec![r.away(&s, 0.2, 1.0)],
    ));
    // clip away from its bounds, with scalar bounds and with an array bound that is an input
    let xc = Array::from_slice(&[-0.9, -0.3, 0.1, 0.45, 0.7, -0.6], &s);
    cases.push(case("clip", |x| x[0].clip(-0.5, 0.5), vec![xc.clone()]));
    cases.push(case("clip lower only", |x| ct::clip(&x[0], Some(-0.5), None::<f64>), vec![xc.clone()]));
    cases.push(case(
        "clip with an array bound",
        |x| ct::clip(&x[0], Some(&x[1]), Some(0.6)),
        vec![xc, Array::from_slice(&[-0.4, 0.0, 0.3], &[3])],
    ));
    run(cases);
}

#[test]
fn reductions() {
    let mut r = Lcg(3);
    let s = [2, 3, 4];
    let x = r.signed(&s);
    let pos = r.array(&s, 0.5, 1.5);
    let nz = r.away(&s, 0.5, 1.5);
    let mut cases = vec![
        case("sum [1]", |x| x[0].sum(&[1], false), vec![x.clone()]),
        case("sum [0, 2] keepdims", |x| x[0].sum(&[0, -1], true), vec![x.clone()]),
        case("sum_all", |x| x[0].sum_all(), vec![x.clone()]),
        case("mean [-1] keepdims", |x| x[0].mean(&[-1], true), vec![x.clone()]),
        case("mean [0, 1]", |x| x[0].mean(&[0, 1], false), vec![x.clone()]),
        case("mean_all", |x| x[0].mean_all(), vec![x.clone()]),
        case("prod [1]", |x| x[0].prod(&[1], false), vec![nz.clone()]),
        case("prod [0, 2] keepdims", |x| x[0].prod(&[0, 2], true), vec![pos.clone()]),
        case("prod_all", |x| x[0].prod_all(), vec![pos.clone()]),
        case("max [1]", |x| x[0].max(&[1], false), vec![x.clone()]),
        case("max [0, 2] keepdims", |x| x[0].max(&[0, 2], true), vec![x.clone()]),
        case("max_all", |x| x[0].max_all(), vec![x.clone()]),
        case("min [-1] keepdims", |x| x[0].min(&[-1], true), vec![x.clone()]),
        case("min_all", |x| x[0].min_all(), vec![x.clone()]),
        case("var [1]", |x| x[0].var(&[1], false, 0), vec![x.clone()]),
        case("var [0, 2] keepdims ddof=1", |x| x[0].var(&[0, 2], true, 1), vec![x.clone()]),
        case("var_all", |x| x[0].var_all(0), vec![x.clone()]),
        case("std [-1]", |x| x[0].std(&[-1], false, 0), vec![x.clone()]),
        case("std [0] keepdims ddof=1", |x| x[0].std(&[0], true, 1), vec![x.clone()]),
        case("std_all", |x| x[0].std_all(1), vec![x.clone()]),
        case("logsumexp [-1]", |x| x[0].logsumexp(&[-1], false), vec![x.clone()]),
        case("logsumexp [0, 2] keepdims", |x| x[0].logsumexp(&[0, 2], true), vec![x.clone()]),
        case("logsumexp_all", |x| x[0].logsumexp_all(), vec![x.clone()]),
        case("softmax [-1]", |x| x[0].softmax(&[-1]), vec![x.clone()]),
        case("softmax [0, 1]", |x| x[0].softmax(&[0, 1]), vec![x.clone()]),
        case("softmax of a transpose", |x| x[0].transpose(&[2, 0, 1]).softmax(&[1]), vec![x.clone()]),
        case("cumsum [1]", |x| x[0].cumsum(1), vec![x.clone()]),
        case("cumprod [-1]", |x| x[0].cumprod(-1), vec![nz.clone()]),
    ];
    for reverse in [false, true] {
        for inclusive in [false, true] {
            let o = format!("reverse={reverse} inclusive={inclusive}");
            cases.push(case(format!("cumsum {o}"), move |x| x[0].cumsum_opts(0, reverse, inclusive), vec![x.clone()]));
            cases.push(case(
                format!("cumprod {o}"),
                move |x| x[0].cumprod_opts(1, reverse, inclusive),
                vec![nz.clone()],
            ));
        }
    }
    run(cases);
}

#[test]
fn shape_ops() {
    let mut r = Lcg(4);
    let x = r.signed(&[2, 3, 4]);
    let mut cases = vec![
        case("reshape", |x| x[0].reshape(&[4, -1]), vec![x.clone()]),
        case("reshape of a transpose", |x| x[0].t().reshape(&[-1]), vec![x.clone()]),
        case("flatten", |x| x[0].flatten(), vec![x.clone()]),
        case("transpose", |x| x[0].transpose(&[2, 0, 1]), vec![x.clone()]),
        case("t", |x| x[0].t(), vec![x.clone()]),
        case("swapaxes", |x| x[0].swapaxes(0, -1), vec![x.clone()]),
        case("moveaxis", |x| x[0].moveaxis(0, -1), vec![x.clone()]),
        case("broadcast_to", |x| x[0].broadcast_to(&[2, 3, 4]), vec![r.signed(&[3, 1])]),
        case("expand_dims", |x| x[0].expand_dims(&[0, -1]), vec![x.clone()]),
        case("squeeze", |x| x[0].squeeze(&[1]), vec![r.signed(&[3, 1, 2])]),
        case("slice with steps", |x| x[0].slice(&[1, 3, 0], &[2, 0, isize::MAX], &[1, -2, 3]), vec![x.clone()]),
        case("slice_axis", |x| x[0].slice_axis(-1, Some(-1), None, -2), vec![x.clone()]),
        case(
            "slice_update",
            |x| x[0].slice_update(&x[1], &[0, 0, 1], &[2, 3, 4], &[1, 2, 2]),
            vec![x.clone(), r.signed(&[2, 2, 2])],
        ),
        case("flip", |x| x[0].flip(&[0, 2]), vec![x.clone()]),
        case("pad", |x| x[0].pad(&[(1, 0), (0, 2), (1, 1)], 0.5), vec![x.clone()]),
        case("tile", |x| x[0].tile(&[2, 1, 2]), vec![r.signed(&[3, 2])]),
        case("repeat", |x| x[0].repeat(2, 1), vec![x.clone()]),
        case("tril", |x| x[0].tril(0), vec![r.signed(&[3, 3])]),
        case("triu", |x| x[0].triu(1), vec![r.signed(&[3, 4])]),
        case(
            "concatenate",
            |x| ct::concatenate(&[x[0].clone(), x[1].clone(), x[2].clone()], 1),
            vec![r.signed(&[2, 1, 3]), r.signed(&[2, 2, 3]), r.signed(&[2, 3, 3])],
        ),
        case("stack", |x| ct::stack(&[x[0].clone(), x[1].sin()], -1), vec![r.signed(&[2, 3]), r.signed(&[2, 3])]),
        case(
            "split",
            |x| {
                let p = x[0].split(3, 1);
                &p[0] * &p[2] + &p[1]
            },
            vec![r.signed(&[2, 6])],
        ),
    ];
    // shape ops composed with an elementwise op, the way they meet in models
    cases.push(case("transpose times original", |x| x[0].t().matmul(&x[0]), vec![r.signed(&[3, 2])]));
    run(cases);
}

#[test]
fn indexing() {
    let mut r = Lcg(5);
    let x = r.signed(&[4, 5]);
    let idx = Array::from_slice(&[0i32, -1, 3, 3, 1, 0], &[2, 3]); // duplicates accumulate
    let along = Array::from_slice(&[4i64, 0, 0, 2, 1, 1, -1, 3], &[4, 2]);
    let put = Array::from_slice(&[1i64, 3, 0, 4, 2, 0, 4, 1], &[4, 2]); // distinct within a row
    let (i1, i2, i3, i3b) = (idx.clone(), idx.clone(), along.clone(), along.clone());
    let (i4, i5, i6) = (put.clone(), put.clone(), idx.clone());
    let cases = vec![
        case("take axis 1", move |x| x[0].take(&i1, 1), vec![x.clone()]),
        case("take axis 0 of a transpose", move |x| x[0].t().take(&i2, 0), vec![x.clone()]),
        case("take_along_axis", move |x| x[0].take_along_axis(&i3, 1), vec![x.clone()]),
        case(
            "take_along_axis broadcast",
            |x| x[0].take_along_axis(&Array::from_slice(&[2i64, 0, 4], &[1, 3]), -1),
            vec![x.clone()],
        ),
        case("put_along_axis", move |x| x[0].put_along_axis(&i4, &x[1], 1), vec![x.clone(), r.signed(&[4, 2])]),
        case(
            "scatter_add_along_axis",
            move |x| x[0].scatter_add_along_axis(&i5, &x[1], 1),
            vec![x.clone(), r.signed(&[4, 2])],
        ),
        case("scatter_add", move |x| x[0].scatter_add(&i6, &x[1], 0), vec![x.clone(), r.signed(&[2, 3, 5])]),
        case(
            "put_along_axis duplicates (last writer wins)",
            |x| x[0].put_along_axis(&Array::from_slice(&[1i64, 1, 0, 3, 2, 2, 4, 0], &[4, 2]), &x[1], 1),
            vec![x.clone(), r.signed(&[4, 2])],
        ),
        case(
            "scatter_add_along_axis duplicates",
            move |x| x[0].scatter_add_along_axis(&i3b, &x[1], 1),
            vec![x.clone(), r.signed(&[4, 2])],
        ),
        case(
            "gather of a product",
            |x| (&x[0] * &x[0].sin()).take(&Array::from_slice(&[2i32, 2, 0], &[3]), 0),
            vec![r.signed(&[3, 2])],
        ),
    ];
    run(cases);
}

#[test]
fn linalg() {
    let mut r = Lcg(6);
    let mm = |x: &[Array]| x[0].matmul(&x[1]);
    let shapes: &[(&[usize], &[usize])] = &[
        (&[3, 4], &[4, 2]),
        (&[2, 1, 3, 4], &[3, 4, 2]),
        (&[4], &[4, 2]),
        (&[3, 4], &[4]),
        (&[4], &[4]),
        (&[4], &[2, 4, 3]),
    ];
    let mut cases: Vec<Case> = shapes
        .iter()
        .map(|&(sa, sb)| case(format!("matmul {sa:?} @ {sb:?}"), mm, vec![r.signed(sa), r.signed(sb)]))
        .collect();
    cases.push(case("x @ x.T", |x| x[0].matmul(&x[0].t()), vec![r.signed(&[3, 2])]));
    cases.push(case("outer", |x| ct::outer(&x[0], &x[1]), vec![r.signed(&[3]), r.signed(&[4])]));
    cases.push(case(
        "tensordot pairs",
        |x| ct::tensordot(&x[0], &x[1], ([0, 2], [1, 0])),
        vec![r.signed(&[2, 3, 2]), r.signed(&[2, 2, 3])],
    ));
    cases.push(case("tensordot 1", |x| ct::tensordot(&x[0], &x[1], 1), vec![r.signed(&[2, 3]), r.signed(&[3, 2])]));
    cases.push(case(
        "einsum bij,bjk->bik",
        |x| ct::einsum("bij,bjk->bik", &[x[0].clone(), x[1].clone()]),
        vec![r.signed(&[2, 2, 3]), r.signed(&[2, 3, 2])],
    ));
    cases.push(case(
        "einsum bhqd,bhkd->bhqk",
        |x| ct::einsum("bhqd,bhkd->bhqk", &[x[0].clone(), x[1].clone()]),
        vec![r.signed(&[1, 2, 3, 2]), r.signed(&[1, 2, 2, 2])],
    ));
    cases.push(case("einsum ij->", |x| ct::einsum("ij->", &[x[0].square()]), vec![r.signed(&[2, 3])]));
    run(cases);
}

#[test]
fn custom_checkpoint_depends() {
    let mut r = Lcg(7);
    // softplus with a VJP rule written with ops (so it is differentiable again) and a JVP rule
    let softplus = ct::custom_function(|x: &[Array]| (x[0].exp() + 1.0).log())
        .vjp(|_p, c, o| vec![&c[0] * (1.0 - (-&o[0]).exp())])
        .jvp(|p, t| vec![&t[0] * p[0].sigmoid()])
        .build();
    // no rules at all: vjp and jvp fall back to transforming the forward
    let plain = ct::custom_function(|x: &[Array]| x[0].tanh() * &x[1]).build();
    let cp = ct::checkpoint(|x: &[Array]| vec![x[0].sin() * &x[1]]);
    let cases = vec![
        case("custom softplus", move |x| softplus(x).unwrap().remove(0), vec![r.array(&[2, 3], -2.0, 2.0)]),
        case("custom without rules", move |x| plain(x).unwrap().remove(0), vec![r.signed(&[2, 3]), r.signed(&[2, 1])]),
        case("checkpoint", move |x| cp(x).unwrap().remove(0), vec![r.signed(&[2, 3]), r.signed(&[3])]),
        case("depends", |x| ct::depends(&[x[0].tanh()], &[x[0].exp()]).remove(0) * &x[0], vec![r.signed(&[2, 3])]),
    ];
    run(cases);
}

#[test]
fn empty_and_vmapped() {
    let mut r = Lcg(8);
    let cases = vec![
        case("exp of an empty array", |x| x[0].exp(), vec![r.signed(&[0, 3])]),
        case("sum over an empty axis", |x| x[0].sum(&[0], false), vec![r.signed(&[0, 3])]),
        case("matmul with an empty contraction", |x| x[0].matmul(&x[1]), vec![r.signed(&[2, 0]), r.signed(&[0, 3])]),
        // ops under vmap: the batched rules are differentiated twice too
        case(
            "vmap of softmax",
            |x| ct::vmap(|y: &[Array]| y[0].softmax(&[0]), &[Some(1)], &[Some(0)])(x).unwrap().remove(0),
            vec![r.signed(&[3, 2])],
        ),
        case(
            "vmap of matmul",
            |x| ct::vmap(|y: &[Array]| y[0].matmul(&y[1]), &[Some(0), None], &[Some(0)])(x).unwrap().remove(0),
            vec![r.signed(&[2, 2, 3]), r.signed(&[3, 2])],
        ),
        case(
            "vmap of take_along_axis",
            |x| {
                let idx = Array::from_slice(&[2i32, 0, 0], &[3]);
                ct::vmap(move |y: &[Array]| y[0].take_along_axis(&idx, 0).exp(), &[Some(0)], &[Some(-1)])(x)
                    .unwrap()
                    .remove(0)
            },
            vec![r.signed(&[2, 3])],
        ),
        case(
            "vmap of prod",
            |x| ct::vmap(|y: &[Array]| y[0].prod_all(), &[Some(1)], &[Some(0)])(x).unwrap().remove(0),
            vec![r.array(&[3, 2], 0.5, 1.5)],
        ),
    ];
    run(cases);
}
