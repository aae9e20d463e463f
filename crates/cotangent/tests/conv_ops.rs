//! `conv1d` / `conv2d` against a direct f64 loop written here, over a grid of strides,
//! paddings, dilations and groups (depthwise included); gradients of input and weight by
//! finite differences; vmap against a loop.
mod common;
use common::{assert_close, check_grads, vals, Lcg};
use cotangent::{self as ct, Array, ConvOptions, DType};

/// The reference 2-D convolution (a 1-D one is `H = KH = 1`): `x` `[n, c, h, w]`, `wt`
/// `[o, c / g, kh, kw]`, row-major, PyTorch's definition summed in f64.
#[allow(clippy::too_many_arguments)]
fn reference(
    x: &[f64],
    xs: [usize; 4],
    wt: &[f64],
    ws: [usize; 4],
    stride: [usize; 2],
    pad: [usize; 2],
    dil: [usize; 2],
    groups: usize,
) -> (Vec<f64>, [usize; 4]) {
    let [n, c, h, w] = xs;
    let [o, cg, kh, kw] = ws;
    let oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) / stride[0] + 1;
    let ow = (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) / stride[1] + 1;
    let og = o / groups;
    let mut y = vec![0.0; n * o * oh * ow];
    for b in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = 0.0;
                    for ci in 0..cg {
                        let ic = g * cg + ci;
                        for p in 0..kh {
                            for q in 0..kw {
                                let hi = (i * stride[0] + p * dil[0]) as isize - pad[0] as isize;
                                let wi = (j * stride[1] + q * dil[1]) as isize - pad[1] as isize;
                                if hi < 0 || wi < 0 || hi >= h as isize || wi >= w as isize {
                                    continue;
                                }
                                let xv = x[((b * c + ic) * h + hi as usize) * w + wi as usize];
                                acc += xv * wt[((oc * cg + ci) * kh + p) * kw + q];
                            }
                        }
                    }
                    y[((b * o + oc) * oh + i) * ow + j] = acc;
                }
            }
        }
    }
    (y, [n, o, oh, ow])
}

#[test]
fn conv1d_matches_the_loop_over_a_grid_of_settings() {
    let mut rng = Lcg(1);
    let (n, c, l) = (2usize, 4usize, 9usize);
    let mut cases = 0;
    for groups in [1usize, 2, 4] {
        for k in [1usize, 3] {
            for stride in [1usize, 2, 3] {
                for pad in [0usize, 1, 2] {
                    for dil in [1usize, 2] {
                        let o = 2 * groups;
                        let x = rng.signed(&[n, c, l]);
                        let w = rng.signed(&[o, c / groups, k]);
                        let opts = ConvOptions { stride: [stride], padding: [pad], dilation: [dil], groups };
                        let y = ct::conv1d(&x, &w, opts);
                        let (want, ys) = reference(
                            &vals(&x),
                            [n, c, 1, l],
                            &vals(&w),
                            [o, c / groups, 1, k],
                            [1, stride],
                            [0, pad],
                            [1, dil],
                            groups,
                        );
                        assert_eq!(y.shape(), &[ys[0], ys[1], ys[3]], "{opts:?}");
                        assert_close(&vals(&y), &want, 1e-12, &format!("conv1d {opts:?} k {k}"));
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 108);
}

#[test]
fn conv2d_matches_the_loop_over_a_grid_of_settings_including_depthwise() {
    let mut rng = Lcg(2);
    let (n, c, h, w) = (2usize, 4usize, 7usize, 6usize);
    for groups in [1usize, 2, 4] {
        for (kh, kw) in [(1usize, 1usize), (3, 3), (2, 3)] {
            for (stride, pad, dil) in [([1, 1], [0, 0], [1, 1]), ([2, 1], [1, 0], [1, 2]), ([2, 2], [1, 2], [2, 1])] {
                let o = if groups == c { c } else { 3 * groups };
                let x = rng.signed(&[n, c, h, w]);
                let wt = rng.signed(&[o, c / groups, kh, kw]);
                let opts = ConvOptions { stride, padding: pad, dilation: dil, groups };
                let y = x.conv2d(&wt, opts);
                let (want, ys) =
                    reference(&vals(&x), [n, c, h, w], &vals(&wt), [o, c / groups, kh, kw], stride, pad, dil, groups);
                assert_eq!(y.shape(), &ys, "{opts:?}");
                assert_close(&vals(&y), &want, 1e-12, &format!("conv2d {opts:?} kernel {kh}x{kw}"));
            }
        }
    }
}

#[test]
fn conv2d_in_f32_and_bf16_is_close_to_the_f64_loop() {
    let mut rng = Lcg(3);
    let x = rng.signed(&[1, 3, 5, 5]);
    let w = rng.signed(&[2, 3, 3, 3]);
    let opts = ConvOptions::default().padding(1);
    let (want, _) = reference(&vals(&x), [1, 3, 5, 5], &vals(&w), [2, 3, 3, 3], [1, 1], [1, 1], [1, 1], 1);
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 3e-2)] {
        let y = ct::conv2d(&x.astype(dtype), &w.astype(dtype), opts);
        assert_eq!(y.dtype(), dtype);
        assert_close(&vals(&y), &want, tol, &format!("conv2d {dtype}"));
    }
}

#[test]
fn gradients_of_conv1d_and_conv2d_by_finite_differences() {
    let mut rng = Lcg(4);
    let x1 = rng.signed(&[2, 4, 7]);
    let w1 = rng.signed(&[4, 2, 3]);
    let o1 = ConvOptions { stride: [2], padding: [1], dilation: [2], groups: 2 };
    check_grads("conv1d", move |a: &[Array]| ct::conv1d(&a[0], &a[1], o1), &[x1, w1]);
    let x2 = rng.signed(&[1, 2, 5, 4]);
    let w2 = rng.signed(&[3, 2, 2, 3]);
    let o2 = ConvOptions { stride: [1, 2], padding: [1, 1], dilation: [2, 1], groups: 1 };
    check_grads("conv2d", move |a: &[Array]| ct::conv2d(&a[0], &a[1], o2), &[x2, w2]);
    let xd = rng.signed(&[1, 3, 4, 4]);
    let wd = rng.signed(&[3, 1, 3, 3]);
    let od = ConvOptions::default().padding(1).groups(3);
    check_grads("depthwise conv2d", move |a: &[Array]| ct::conv2d(&a[0], &a[1], od), &[xd, wd]);
}

#[test]
fn vmap_of_conv2d_over_inputs_and_weights_equals_a_loop() {
    let mut rng = Lcg(5);
    let xs = rng.signed(&[3, 2, 4, 5, 5]);
    // the weights batched along axis 1 of a transposed view
    let ws = rng.signed(&[6, 3, 2, 3, 3]).swapaxes(0, 1);
    let opts = ConvOptions::default().stride(2).padding(1).groups(2);
    let f = move |a: &[Array]| ct::conv2d(&a[0], &a[1], opts);
    // inputs batched, weights shared
    let w = ws.index(0);
    let batched = ct::vmap(f, &[Some(0), None], &[Some(0)])(&[xs.clone(), w.clone()]).unwrap();
    for b in 0..3 {
        assert_close(&vals(&batched[0].index(b)), &vals(&f(&[xs.index(b), w.clone()])), 1e-12, "vmap over x");
    }
    // both batched, the weights along axis 1 of the untransposed buffer, the result along axis 1
    let wb = ws.swapaxes(0, 1);
    let batched = ct::vmap(f, &[Some(0), Some(1)], &[Some(1)])(&[xs.clone(), wb.clone()]).unwrap();
    for b in 0..3 {
        let want = f(&[xs.index(b), wb.index_axis(1, b)]);
        assert_close(&vals(&batched[0].index_axis(1, b)), &vals(&want), 1e-12, "vmap over x and w");
    }
}

#[test]
#[should_panic(expected = "cotangent::conv2d: groups = 3 must be at least 1 and divide the input channels 4")]
fn conv2d_rejects_groups_that_do_not_divide_the_channels() {
    let _ = ct::conv2d(
        &ct::zeros(&[1, 4, 5, 5], DType::F32),
        &ct::zeros(&[3, 1, 3, 3], DType::F32),
        ConvOptions::default().groups(3),
    );
}

#[test]
#[should_panic(expected = "cotangent::conv1d: the weight of shape [2, 3, 3] has 3 input channels per group")]
fn conv1d_rejects_a_weight_with_the_wrong_channels() {
    let _ = ct::conv1d(&ct::zeros(&[1, 4, 5], DType::F32), &ct::zeros(&[2, 3, 3], DType::F32), ConvOptions::default());
}

#[test]
#[should_panic(expected = "cotangent::conv1d: the kernel of extent 3 (dilation 3) spans 7 positions")]
fn conv1d_rejects_a_kernel_longer_than_the_input() {
    let opts = ConvOptions::default().dilation(3);
    let _ = ct::conv1d(&ct::zeros(&[1, 1, 5], DType::F32), &ct::zeros(&[1, 1, 3], DType::F32), opts);
}

#[test]
#[should_panic(expected = "cotangent::conv2d: the input and weight must be floats of one dtype, got float32")]
fn conv2d_rejects_mixed_dtypes() {
    let _ = ct::conv2d(
        &ct::zeros(&[1, 1, 3, 3], DType::F32),
        &ct::zeros(&[1, 1, 3, 3], DType::F64),
        ConvOptions::default(),
    );
}

#[test]
fn compiled_gradient_of_conv2d_equals_the_eager_one() {
    let mut rng = Lcg(6);
    let (x, w) = (rng.signed(&[2, 4, 6, 5]), rng.signed(&[4, 2, 3, 3]));
    let opts = ConvOptions { stride: [2, 1], padding: [1, 1], dilation: [1, 2], groups: 2 };
    let loss = move |a: &[Array]| ct::conv2d(&a[0], &a[1], opts).square().sum_all();
    let eager = ct::grad_argnums(loss, &[0, 1])(&[x.clone(), w.clone()]).unwrap();
    let compiled = ct::compile(ct::grad_argnums(loss, &[0, 1]))(&[x, w]).unwrap();
    for k in 0..2 {
        assert_close(&vals(&compiled[k]), &vals(&eager[k]), 1e-12, &format!("gradient {k}"));
    }
}
