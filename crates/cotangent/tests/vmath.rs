//! Accuracy of the vectorised f32 kernels (backend/cpu/vmath.rs) against the f64 standard
//! library, special values, every instruction-set variant this CPU has, and the wiring into
//! the unary ops (contiguous, small, strided, donated, f16).
use cotangent::backend::cpu::vmath::{self, Func, Isa};
use cotangent::{self as ct, Array, DType};

fn reference(f: Func, x: f32) -> f64 {
    let x = x as f64;
    match f {
        Func::Exp => x.exp(),
        Func::Expm1 => x.exp_m1(),
        Func::Ln => x.ln(),
        Func::Ln1p => x.ln_1p(),
        Func::Tanh => x.tanh(),
        Func::Sigmoid => 1.0 / (1.0 + (-x).exp()),
    }
}

fn bound(f: Func) -> f64 {
    match f {
        Func::Tanh | Func::Sigmoid => 3.0,
        _ => 2.0,
    }
}

/// Error of `got` in units of the last place of the f32 grid at `want` (subnormal results in
/// units of the smallest subnormal; ±inf counts as ±2^128). Expectations that round to ±inf in
/// f32, and NaN, must be matched exactly (`f64::INFINITY` error otherwise).
fn ulp_error(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        return if got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    if (want as f32).is_infinite() {
        // the correctly rounded result overflows
        return if got == want as f32 { 0.0 } else { f64::INFINITY };
    }
    if got.is_nan() {
        return f64::INFINITY;
    }
    let g = if got.is_infinite() { 2f64.powi(128).copysign(got as f64) } else { got as f64 };
    let e = if want == 0.0 { -126 } else { (want.abs().log2().floor() as i32).max(-126) };
    (g - want).abs() / 2f64.powi(e - 23)
}

/// Applies `f` with `isa` to `xs` (in place and out of place; they must agree) and returns the
/// largest ulp error and its input.
fn max_error(isa: Isa, f: Func, xs: &[f32]) -> (f64, f32) {
    let mut out = vec![0f32; xs.len()];
    vmath::apply_with(isa, f, xs, &mut out);
    let mut inplace = xs.to_vec();
    vmath::apply_in_place_with(isa, f, &mut inplace);
    let mut worst = (0.0, 0.0);
    for (i, &x) in xs.iter().enumerate() {
        assert_eq!(out[i].to_bits(), inplace[i].to_bits(), "{f:?} {isa:?}: in place differs at {x:e}");
        let e = ulp_error(out[i], reference(f, x));
        if e > worst.0 || e.is_nan() {
            worst = (e, x);
        }
    }
    worst
}

fn strided_bit_patterns() -> Vec<f32> {
    (0..=u32::MAX / 4097).map(|i| f32::from_bits(i * 4097)).collect()
}

/// `n` points spread evenly between `lo` and `hi`, plus the f32 neighbours of the ends.
fn dense(lo: f32, hi: f32, n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..=n).map(|i| lo + (hi - lo) * (i as f32 / n as f32)).collect();
    for b in [lo, hi] {
        for k in -64i32..=64 {
            v.push(f32::from_bits((b.to_bits() as i32 + k) as u32));
        }
    }
    v
}

/// Geometrically spaced magnitudes in `[lo, hi]` of both signs.
fn geometric(lo: f32, hi: f32, n: usize) -> Vec<f32> {
    let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
    (0..=n)
        .flat_map(|i| {
            let v = (a + (b - a) * i as f64 / n as f64).exp() as f32;
            [v, -v]
        })
        .collect()
}

fn hard_regions(f: Func) -> Vec<f32> {
    let mut v = geometric(1e-45, 1e-3, 100_000); // tiny |x|, subnormals included
    v.extend(dense(-1e-3, 1e-3, 100_000));
    v.extend(dense(-1.0, 1.0, 100_000));
    match f {
        Func::Exp | Func::Expm1 | Func::Sigmoid | Func::Tanh => {
            v.extend(dense(88.0, 89.5, 100_000)); // overflow
            v.extend(dense(-104.5, -86.5, 100_000)); // underflow and subnormal results
            v.extend(dense(-20.0, 20.0, 100_000));
        }
        Func::Ln => {
            v.extend(dense(0.99, 1.01, 100_000));
            v.extend(dense(0.5, 2.0, 100_000));
            v.extend(geometric(1e-45, 1.2e-38, 100_000)); // subnormal inputs
        }
        Func::Ln1p => {
            v.extend(dense(-1.0, -0.99, 100_000));
            v.extend(dense(-0.3, 0.42, 100_000));
            v.extend(geometric(1e-3, 3e38, 100_000));
        }
    }
    v
}

#[test]
fn ulp_bounds_on_all_variants() {
    let all = strided_bit_patterns();
    assert!(all.len() > 1_000_000);
    for isa in Isa::available() {
        for f in Func::ALL {
            let (e1, x1) = max_error(isa, f, &all);
            let (e2, x2) = max_error(isa, f, &hard_regions(f));
            println!("{isa:?} {f:?}: max ulp error {e1:.3} at {x1:e} (bit patterns), {e2:.3} at {x2:e} (hard regions)");
            assert!(e1 <= bound(f), "{isa:?} {f:?}: {e1} ulp at {x1:e} ({:#x})", x1.to_bits());
            assert!(e2 <= bound(f), "{isa:?} {f:?}: {e2} ulp at {x2:e} ({:#x})", x2.to_bits());
        }
    }
}

#[test]
fn special_values_exact() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let cases: Vec<(Func, f32, f32)> = vec![
        (Func::Exp, 0.0, 1.0),
        (Func::Exp, -0.0, 1.0),
        (Func::Exp, inf, inf),
        (Func::Exp, -inf, 0.0),
        (Func::Exp, 89.0, inf),
        (Func::Exp, 88.72284, inf),
        (Func::Exp, -104.0, 0.0),
        (Func::Exp, -103.0, 1.8e-45), // subnormal result: 1 ulp = 1.4e-45
        (Func::Exp, f32::from_bits(1), 1.0),
        (Func::Expm1, 0.0, 0.0),
        (Func::Expm1, -0.0, -0.0),
        (Func::Expm1, inf, inf),
        (Func::Expm1, -inf, -1.0),
        (Func::Expm1, -20.0, -1.0),
        (Func::Expm1, 89.0, inf),
        (Func::Expm1, 1e-30, 1e-30),
        (Func::Expm1, f32::from_bits(1), f32::from_bits(1)),
        (Func::Expm1, -f32::from_bits(1), -f32::from_bits(1)),
        (Func::Ln, 0.0, -inf),
        (Func::Ln, -0.0, -inf),
        (Func::Ln, 1.0, 0.0),
        (Func::Ln, inf, inf),
        (Func::Ln, -1.0, nan),
        (Func::Ln, -inf, nan),
        (Func::Ln, -f32::from_bits(1), nan),
        (Func::Ln, f32::from_bits(1), -103.27893),
        (Func::Ln1p, 0.0, 0.0),
        (Func::Ln1p, -0.0, -0.0),
        (Func::Ln1p, -1.0, -inf),
        (Func::Ln1p, -1.000001, nan),
        (Func::Ln1p, -inf, nan),
        (Func::Ln1p, inf, inf),
        (Func::Ln1p, 1e-30, 1e-30),
        (Func::Ln1p, f32::from_bits(1), f32::from_bits(1)),
        (Func::Ln1p, f32::MAX, 88.72284),
        (Func::Tanh, 0.0, 0.0),
        (Func::Tanh, -0.0, -0.0),
        (Func::Tanh, inf, 1.0),
        (Func::Tanh, -inf, -1.0),
        (Func::Tanh, 20.0, 1.0),
        (Func::Tanh, -1e-30, -1e-30),
        (Func::Tanh, f32::from_bits(1), f32::from_bits(1)),
        (Func::Sigmoid, 0.0, 0.5),
        (Func::Sigmoid, -0.0, 0.5),
        (Func::Sigmoid, inf, 1.0),
        (Func::Sigmoid, -inf, 0.0),
        (Func::Sigmoid, -200.0, 0.0),
        (Func::Sigmoid, 200.0, 1.0),
    ];
    for isa in Isa::available() {
        for &(f, x, want) in &cases {
            let mut out = [0f32; 1];
            vmath::apply_with(isa, f, &[x], &mut out);
            let ok = if want.is_nan() { out[0].is_nan() } else { out[0].to_bits() == want.to_bits() };
            assert!(ok, "{isa:?} {f:?}({x:e}) = {:e}, want {want:e}", out[0]);
        }
        for f in Func::ALL {
            let mut out = [0f32; 2];
            vmath::apply_with(isa, f, &[nan, -nan], &mut out);
            assert!(out[0].is_nan() && out[1].is_nan(), "{isa:?} {f:?}(NaN) = {out:?}");
        }
    }
}

#[test]
fn variants_agree_on_odd_lengths() {
    // lengths that leave vector remainders; every variant must give each element the same
    // value as it gives that element alone
    for isa in Isa::available() {
        for n in [0usize, 1, 7, 15, 16, 17, 33, 1000] {
            let xs: Vec<f32> = (0..n).map(|i| (i as f32 - 500.0) * 0.173).collect();
            for f in Func::ALL {
                let mut out = vec![0f32; n];
                vmath::apply_with(isa, f, &xs, &mut out);
                for (i, &x) in xs.iter().enumerate() {
                    let mut one = [0f32];
                    vmath::apply_with(isa, f, &[x], &mut one);
                    assert_eq!(out[i].to_bits(), one[0].to_bits(), "{isa:?} {f:?} n={n} i={i}");
                }
            }
        }
    }
}

fn op(f: Func, x: &Array) -> Array {
    match f {
        Func::Exp => ct::exp(x),
        Func::Expm1 => ct::expm1(x),
        Func::Ln => ct::log(x),
        Func::Ln1p => ct::log1p(x),
        Func::Tanh => ct::tanh(x),
        Func::Sigmoid => ct::sigmoid(x),
    }
}

/// Inputs in each function's domain, deterministic.
fn inputs(f: Func, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let t = ((i as u64 * 2654435761) % 1_000_003) as f32 / 1_000_003.0; // [0, 1)
            match f {
                Func::Ln => 1e-3 + 50.0 * t,
                Func::Ln1p => -0.999 + 30.0 * t,
                _ => -30.0 + 60.0 * t,
            }
        })
        .collect()
}

fn check_values(f: Func, xs: &[f32], got: &[f32]) {
    assert_eq!(xs.len(), got.len());
    for (&x, &g) in xs.iter().zip(got) {
        let e = ulp_error(g, reference(f, x));
        assert!(e <= bound(f), "{f:?}({x:e}) = {g:e}: {e} ulp");
    }
}

#[test]
fn public_ops_contiguous_small_and_large() {
    for f in Func::ALL {
        for n in [5usize, 70_001] {
            let xs = inputs(f, n);
            let x = Array::from_vec(xs.clone(), &[n]);
            let y = op(f, &x).to_vec::<f32>().unwrap();
            check_values(f, &xs, &y);
            // on the CPU: the kernel result, bit for bit (the large one is split over threads)
            if x.device() != cotangent::Device::Cpu {
                continue;
            }
            let mut want = vec![0f32; n];
            vmath::apply(f, &xs, &mut want);
            assert!(y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{f:?} n={n}");
            // a donated input (the temporary `x * 1` is uniquely owned), same values
            let d = op(f, &(&x * 1.0)).to_vec::<f32>().unwrap();
            assert!(d.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{f:?} n={n} donated");
        }
    }
}

#[test]
fn public_ops_strided_views() {
    for f in Func::ALL {
        let (r, c) = (300usize, 257usize); // > the parallel threshold
        let xs = inputs(f, r * c);
        let x = Array::from_vec(xs.clone(), &[r, c]);
        let t = x.t(); // strided view, shape [c, r]
        let y = op(f, &t).to_vec::<f32>().unwrap();
        let mut want_t = Vec::with_capacity(r * c);
        for j in 0..c {
            for i in 0..r {
                want_t.push(xs[i * c + j]);
            }
        }
        check_values(f, &want_t, &y);
        // same bits as the contiguous result, transposed
        let yc = op(f, &x).to_vec::<f32>().unwrap();
        for j in 0..c {
            for i in 0..r {
                assert_eq!(y[j * r + i].to_bits(), yc[i * c + j].to_bits(), "{f:?} [{j}, {i}]");
            }
        }
        // a small strided slice (step 3)
        let s = Array::from_vec(xs[..30].to_vec(), &[30]).slice_axis(0, Some(1), Some(30), 3);
        let ys = op(f, &s).to_vec::<f32>().unwrap();
        let want: Vec<f32> = xs[..30].iter().skip(1).step_by(3).copied().collect();
        check_values(f, &want, &ys);
    }
}

#[test]
fn half_precision_goes_through_the_kernels() {
    for f in Func::ALL {
        let xs = inputs(f, 1000);
        let x = Array::from_vec(xs.clone(), &[1000]).astype(DType::F16);
        let y = op(f, &x).astype(DType::F32).to_vec::<f32>().unwrap();
        let xh = x.astype(DType::F32).to_vec::<f32>().unwrap();
        for (&xv, &yv) in xh.iter().zip(&y) {
            let want = half::f16::from_f64(reference(f, xv)).to_f32();
            // one f16 rounding of a result within 2-3 f32 ulp: equal, or one f16 ulp off
            // at a rounding tie
            let tol = (want.abs() * 2f32.powi(-10)).max(6e-8);
            assert!(yv == want || (yv - want).abs() <= tol, "{f:?}({xv}) f16 = {yv}, want {want}");
        }
    }
}
