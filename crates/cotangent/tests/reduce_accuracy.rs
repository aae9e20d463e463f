//! Accuracy of long floating-point reductions (issue 13, item 3): sums, means, variances,
//! softmax's and logsumexp's normalisers and cumulative sums over 10^7 and more elements,
//! against `f64` references computed here from the same `f32` values; and bit-identical results
//! whatever the number of threads of the kernel pool (`COTANGENT_NUM_THREADS`, fixed per
//! process, so the test runs itself as a child process with different pool sizes).
//!
//! The bound checked is the documented one for blocked pairwise summation
//! (`backend::cpu::sum`): `|ŝ - Σx| ≤ k·u·Σ|x|` with `k = 16 + 4 + ceil(log2(n / 256))` for
//! rows, `128 + ceil(log2(n / 128))` for sums over a leading axis, `u = 2^-24` — where a plain
//! left-to-right loop (the old kernels) was off by up to 8.8 % on these inputs.
use cotangent::{self as ct, Array, DType};

const U: f64 = f32::EPSILON as f64 / 2.0;

/// The documented error factor `k` of a sum of `n` elements (row or column case).
fn k_row(n: usize) -> f64 {
    16.0 + 4.0 + (n as f64 / 256.0).log2().ceil().max(0.0)
}
fn k_col(n: usize) -> f64 {
    128.0 + (n as f64 / 128.0).log2().ceil().max(0.0)
}

/// `got` is within `k·u·Σ|x|` of the exact (f64) sum `want` of values with `abs_sum = Σ|x|`.
#[track_caller]
fn assert_sum(got: f64, want: f64, abs_sum: f64, k: f64, what: &str) {
    let bound = k * U * abs_sum;
    assert!(
        (got - want).abs() <= bound,
        "{what}: got {got}, exact {want}, error {} > bound {bound}",
        (got - want).abs()
    );
}

/// A deterministic f32 sequence with values in [lo, hi).
fn values(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

#[test]
fn sum_of_ten_million_tenths() {
    let n = 10_000_000;
    let x = Array::from_vec(vec![0.1f32; n], &[n]);
    let want = n as f64 * 0.1f32 as f64;
    let got = x.sum_all().item::<f32>().unwrap() as f64;
    assert_sum(got, want, want, k_row(n), "sum of 10^7 x 0.1f32");
    // in practice far inside the bound
    assert!((got - want).abs() / want < 1e-6, "{got} vs {want}");
    // also as a sum over the one axis, and over a [n/8, 8] reshape in both directions
    let got = x.sum(&[0], false).item::<f32>().unwrap() as f64;
    assert_sum(got, want, want, k_row(n), "sum(&[0])");
    let m = x.reshape(&[-1, 8]);
    let rows = m.sum(&[0], false).to_vec::<f32>().unwrap();
    for (j, &r) in rows.iter().enumerate() {
        let w = (n / 8) as f64 * 0.1f32 as f64;
        assert_sum(r as f64, w, w, k_col(n / 8), &format!("column {j} of [n/8, 8]"));
    }
}

#[test]
fn mean_of_twenty_million_ones() {
    let n = 20_000_000;
    let x = ct::ones(&[n], DType::F32);
    let m = x.mean_all().item::<f32>().unwrap();
    assert!((m - 1.0).abs() <= 1e-6, "mean of 2e7 ones is {m}");
    // 2^25 ones: every partial sum is exact
    let n = 1 << 25;
    let s = ct::ones(&[n], DType::F32).sum_all().item::<f32>().unwrap();
    assert_eq!(s, n as f32, "sum of 2^25 ones");
}

#[test]
fn softmax_and_logsumexp_of_two_to_the_25_zeros() {
    let n = 1usize << 25;
    let z = ct::zeros(&[n], DType::F32);
    let p = z.softmax(&[0]);
    let total = p.sum_all().item::<f32>().unwrap();
    assert!((total - 1.0).abs() <= 1e-5, "softmax of 2^25 zeros sums to {total}");
    let v = p.to_vec::<f32>().unwrap();
    assert!(v.iter().all(|&e| e == 1.0 / n as f32), "every probability is 2^-25");
    let l = z.logsumexp_all().item::<f32>().unwrap() as f64;
    let want = 25.0 * std::f64::consts::LN_2;
    assert!((l - want).abs() <= 1e-6 * want, "logsumexp of 2^25 zeros: {l} vs {want}");
}

#[test]
fn variance_of_data_with_a_large_offset() {
    // 10^7 values 1e4 + uniform[-1, 1): the mean must be accurate for the deviations to be
    let n = 10_000_000;
    let v = values(n, 3, 9999.0, 10001.0);
    let mean: f64 = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
    let var: f64 = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
    let x = Array::from_vec(v, &[n]);
    let got_mean = x.mean_all().item::<f32>().unwrap() as f64;
    assert!((got_mean - mean).abs() <= k_row(n) * U * mean, "mean {got_mean} vs {mean}");
    let got = x.var_all(0).item::<f32>().unwrap() as f64;
    assert!((got - var).abs() / var < 1e-3, "var {got} vs {var}");
    let sd = x.std_all(1).item::<f32>().unwrap() as f64;
    let want_sd = (var * n as f64 / (n - 1) as f64).sqrt();
    assert!((sd - want_sd).abs() / want_sd < 1e-3, "std {sd} vs {want_sd}");
}

/// Reference sums of `v` (row-major `[rows, cols]`) over axis 1 and axis 0.
fn ref_sums(v: &[f32], rows: usize, cols: usize) -> (Vec<f64>, Vec<f64>) {
    let mut r = vec![0f64; rows];
    let mut c = vec![0f64; cols];
    for i in 0..rows {
        for j in 0..cols {
            let x = v[i * cols + j] as f64;
            r[i] += x;
            c[j] += x;
        }
    }
    (r, c)
}

#[test]
fn axis_sums_over_a_long_axis() {
    // [3, 4e6]: rows of 4e6 (contiguous rows); its transpose [4e6, 3] summed over axis 0
    // (the same rows, read through a view); [4e6, 3] contiguous summed over axis 0 (outputs
    // along the fast axis) and its transpose over axis 1
    let (a, b) = (3usize, 4_000_000usize);
    let v = values(a * b, 5, 0.0, 1.0);
    let (rs, _) = ref_sums(&v, a, b);
    let x = Array::from_vec(v.clone(), &[a, b]);
    for (what, got) in [
        ("[3, 4e6].sum(1)", x.sum(&[1], false)),
        ("[3, 4e6].t().sum(0)", x.t().sum(&[0], false)),
        ("[3, 4e6].mean(1) * n", x.mean(&[1], false) * b as f64),
    ] {
        let got = got.to_vec::<f32>().unwrap();
        for i in 0..a {
            assert_sum(got[i] as f64, rs[i], rs[i], k_row(b) + 2.0, &format!("{what}[{i}]"));
        }
    }
    let y = Array::from_vec(v.clone(), &[b, a]);
    let (_, cs) = ref_sums(&v, b, a);
    for (what, got) in [("[4e6, 3].sum(0)", y.sum(&[0], false)), ("[4e6, 3].t().sum(1)", y.t().sum(&[1], false))] {
        let got = got.to_vec::<f32>().unwrap();
        for j in 0..a {
            assert_sum(got[j] as f64, cs[j], cs[j], k_col(b), &format!("{what}[{j}]"));
        }
    }
    // a strided view: every other column of [4e6, 3] ... as rows: [3, 4e6] sliced with step 2
    let s = x.slice(&[0, 0], &[3, b as isize], &[1, 2]);
    let got = s.sum(&[1], false).to_vec::<f32>().unwrap();
    for i in 0..a {
        let want: f64 = (0..b).step_by(2).map(|j| v[i * b + j] as f64).sum();
        assert_sum(got[i] as f64, want, want, k_row(b / 2), &format!("strided row {i}"));
    }
    // a whole-array sum of a transposed, non-contiguous view
    let want: f64 = v.iter().map(|&x| x as f64).sum();
    let got = y.t().sum_all().item::<f32>().unwrap() as f64;
    assert_sum(got, want, want, k_row(a * b), "sum_all of a transposed view");
}

#[test]
fn sums_over_a_middle_axis_and_several_axes() {
    // [4, 2^20, 5]: over axis 1 (outputs along the fast axis), over axes (0, 2) (gathered
    // rows), over everything
    let (a, b, c) = (4usize, 1usize << 20, 5usize);
    let v = values(a * b * c, 11, -1.0, 1.0);
    let x = Array::from_vec(v.clone(), &[a, b, c]);
    let at = |i: usize, j: usize, k: usize| v[(i * b + j) * c + k] as f64;
    let got = x.sum(&[1], false).to_vec::<f32>().unwrap();
    for i in 0..a {
        for k in 0..c {
            let want: f64 = (0..b).map(|j| at(i, j, k)).sum();
            let abs: f64 = (0..b).map(|j| at(i, j, k).abs()).sum();
            assert_sum(got[i * c + k] as f64, want, abs, k_col(b), &format!("sum(1)[{i}, {k}]"));
        }
    }
    let got = x.sum(&[0, 2], false).to_vec::<f32>().unwrap();
    for j in (0..b).step_by(4099) {
        let want: f64 = (0..a).flat_map(|i| (0..c).map(move |k| (i, k))).map(|(i, k)| at(i, j, k)).sum();
        let abs: f64 = (0..a).flat_map(|i| (0..c).map(move |k| (i, k))).map(|(i, k)| at(i, j, k).abs()).sum();
        assert_sum(got[j] as f64, want, abs, k_row(a * c), &format!("sum(0, 2)[{j}]"));
    }
    let want: f64 = v.iter().map(|&x| x as f64).sum();
    let abs: f64 = v.iter().map(|&x| (x as f64).abs()).sum();
    assert_sum(x.sum_all().item::<f32>().unwrap() as f64, want, abs, k_row(v.len()), "sum_all");
}

#[test]
fn cumsum_over_ten_million() {
    let n = 10_000_000;
    let x = Array::from_vec(vec![0.1f32; n], &[n]);
    let t = 0.1f32 as f64;
    // documented: at most 2·256 + n/65536 + 1 roundings per output
    let k = 512.0 + (n / 65536) as f64 + 1.0;
    for (reverse, inclusive) in [(false, true), (true, true), (false, false), (true, false)] {
        let c = x.cumsum_opts(0, reverse, inclusive).to_vec::<f32>().unwrap();
        for i in [0, 1, 255, 256, 65535, 65536, 1_234_567, n / 2, n - 2, n - 1] {
            let before = if reverse { n - 1 - i } else { i };
            let count = before + inclusive as usize;
            let want = count as f64 * t;
            let got = c[i] as f64;
            assert!(
                (got - want).abs() <= k * U * want + f64::MIN_POSITIVE,
                "cumsum reverse={reverse} inclusive={inclusive} [{i}]: {got} vs {want}"
            );
        }
    }
    // the last running sum is the total, within the blocked bound (a plain loop was 8.8 % off)
    let last = x.cumsum(0).slice(&[n as isize - 1], &[n as isize], &[1]).item::<f32>().unwrap() as f64;
    assert!((last - n as f64 * t).abs() / (n as f64 * t) < 1e-4, "{last}");
}

#[test]
fn half_precision_sums_accumulate_in_f32() {
    let n = 100_000;
    for dt in [DType::F16, DType::BF16] {
        let x = ct::full(&[n], 0.1, dt);
        let one = x.slice(&[0], &[1], &[1]).astype(DType::F64).sum_all().item::<f64>().unwrap();
        let want = n as f64 * one;
        let got = x.sum_all().astype(DType::F64).item::<f64>().unwrap();
        // rounded once to the half type at the end
        let ulp = if dt == DType::F16 { 2f64.powi(-10) } else { 2f64.powi(-7) };
        assert!((got - want).abs() <= want * ulp, "{dt}: {got} vs {want}");
        let m = x.reshape(&[-1, 10]).sum(&[0], false).astype(DType::F64).to_vec::<f64>().unwrap();
        for &c in &m {
            assert!((c - want / 10.0).abs() <= want / 10.0 * ulp, "{dt} column sum {c}");
        }
    }
}

#[test]
fn f64_sums_are_accurate_too() {
    let n = 10_000_000;
    let x = Array::from_vec(vec![0.1f64; n], &[n]);
    let got = x.sum_all().item::<f64>().unwrap();
    assert!((got - 1e6).abs() <= k_row(n) * f64::EPSILON * 1e6, "{got}");
}

// ----- bit-identical across thread counts ------------------------------------------------------

const CHILD: &str = "COTANGENT_REDUCE_ACCURACY_CHILD";

/// The reductions whose bits the child processes print.
fn fingerprints() -> Vec<(String, Vec<u32>)> {
    let n = 3_000_017; // not a multiple of any block size
    let v = values(n, 17, -1.0, 1.0);
    let x = Array::from_vec(v, &[n]);
    let m = x.slice(&[0], &[3_000_000], &[1]).reshape(&[1000, 3000]);
    let bits = |a: Array| a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    let hash = |a: Array| {
        // long outputs: a checksum of the bits (order-sensitive)
        let mut h = 0xcbf29ce484222325u64;
        for w in bits(a) {
            h = (h ^ w as u64).wrapping_mul(0x100000001b3);
        }
        vec![h as u32, (h >> 32) as u32]
    };
    vec![
        ("sum_all".into(), bits(x.sum_all())),
        ("mean_all".into(), bits(x.mean_all())),
        ("var_all".into(), bits(x.var_all(1))),
        ("rows".into(), hash(m.sum(&[1], false))),
        ("columns".into(), hash(m.sum(&[0], false))),
        ("transposed".into(), hash(m.t().sum(&[1], false))),
        ("strided".into(), hash(m.slice(&[0, 1], &[1000, 3000], &[3, 2]).sum(&[0], false))),
        ("logsumexp".into(), bits(x.logsumexp_all())),
        ("softmax".into(), hash(x.softmax(&[0]))),
        ("softmax rows".into(), hash(m.softmax(&[1]))),
        ("cumsum".into(), hash(x.cumsum(0))),
        (
            "matmul".into(),
            hash(m.slice(&[0, 0], &[64, 3000], &[1, 1]).matmul(&m.t().slice(&[0, 0], &[3000, 64], &[1, 1]))),
        ),
    ]
}

/// Prints the fingerprints when run as a child of `bit_identical_across_thread_counts`.
#[test]
fn print_fingerprints_in_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    for (name, bits) in fingerprints() {
        println!("FINGERPRINT {name}: {bits:?}");
    }
}

#[test]
fn bit_identical_across_thread_counts() {
    let exe = std::env::current_exe().unwrap();
    let run = |threads: usize| -> Vec<String> {
        let out = std::process::Command::new(&exe)
            .args(["--exact", "print_fingerprints_in_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("COTANGENT_NUM_THREADS", threads.to_string())
            .output()
            .expect("run the test binary as a child");
        assert!(out.status.success(), "child with {threads} threads failed: {}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            // the harness may print "test name ... " on the same line first
            .filter_map(|l| l.find("FINGERPRINT ").map(|i| l[i..].to_string()))
            .collect();
        assert_eq!(lines.len(), 12, "child with {threads} threads printed {lines:?}");
        lines
    };
    let one = run(1);
    for threads in [2, 3, 4, 8] {
        assert_eq!(run(threads), one, "{threads} threads vs 1");
    }
    // and this process (the default pool) agrees
    let here: Vec<String> =
        fingerprints().into_iter().map(|(name, bits)| format!("FINGERPRINT {name}: {bits:?}")).collect();
    assert_eq!(here, one, "default pool vs 1 thread");
}

#[test]
fn plain_loop_matmul_inner_products_are_blocked() {
    // products below gemm's threshold (m·n·k < 4096) run a plain loop; a long inner dimension
    // is summed in blocks of 128 combined pairwise: error factor 128 + log2(k / 128)
    for (m, k, n) in [(1usize, 4000usize, 1usize), (3, 1300, 1), (1, 1000, 4)] {
        let av = values(m * k, 23, 0.0, 1.0);
        let bv = values(k * n, 29, 0.0, 1.0);
        let c = Array::from_vec(av.clone(), &[m, k]).matmul(&Array::from_vec(bv.clone(), &[k, n]));
        let c = c.to_vec::<f32>().unwrap();
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|p| av[i * k + p] as f64 * bv[p * n + j] as f64).sum();
                // one more rounding per product
                assert_sum(c[i * n + j] as f64, want, want, k_col(k) + 1.0, &format!("[{m},{k}]x[{k},{n}] ({i},{j})"));
            }
        }
    }
    // 0.1 · 1 summed 4000 times: a plain left-to-right loop is off by 3.8e-5 (640 u)
    let k = 4000;
    let c = Array::from_vec(vec![0.1f32; k], &[1, k]).matmul(&ct::ones(&[k, 1], DType::F32)).item::<f32>().unwrap();
    let want = k as f64 * 0.1f32 as f64;
    assert_sum(c as f64, want, want, k_col(k) + 1.0, "0.1 x 4000");
    let ones = |s: &[usize]| ct::ones(s, DType::I32);
    assert_eq!(ones(&[1, 5000]).matmul(&ones(&[5000, 1])).item::<i32>().unwrap(), 5000);
}

#[test]
fn every_layout_and_axis_set_matches_f64() {
    // views with permuted, negative, stepped and zero strides, summed over every axis set;
    // each output against an f64 loop over the view's elements in logical order
    let (a, b, c) = (6usize, 300usize, 7usize);
    let base = Array::from_vec(values(a * b * c, 31, -1.0, 1.0), &[a, b, c]);
    let views: Vec<(&str, Array)> = vec![
        ("contiguous", base.clone()),
        ("transposed", base.transpose(&[2, 0, 1])),
        ("flipped", base.flip(&[1])),
        ("flipped all", base.flip(&[])),
        ("stepped", base.slice(&[1, 0, 0], &[6, 300, 7], &[2, 3, 2])),
        ("broadcast", base.slice(&[0, 0, 0], &[1, 300, 7], &[1, 1, 1]).broadcast_to(&[4, 300, 7])),
        ("swapped flipped", base.swapaxes(0, 1).flip(&[2])),
    ];
    for (what, x) in views {
        let shape = x.shape().to_vec();
        let v = x.to_vec::<f32>().unwrap();
        for axes in [vec![0], vec![1], vec![2], vec![0, 1], vec![0, 2], vec![1, 2], vec![0, 1, 2]] {
            let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
            let got = x.sum(&ax, true).to_vec::<f32>().unwrap();
            let oshape: Vec<usize> = (0..3).map(|i| if axes.contains(&i) { 1 } else { shape[i] }).collect();
            let mut want = vec![0f64; got.len()];
            let mut abs = vec![0f64; got.len()];
            for (i, &e) in v.iter().enumerate() {
                let idx = [i / (shape[1] * shape[2]), (i / shape[2]) % shape[1], i % shape[2]];
                let o = (0..3).fold(0, |acc, d| acc * oshape[d] + if axes.contains(&d) { 0 } else { idx[d] });
                want[o] += e as f64;
                abs[o] += (e as f64).abs();
            }
            let n: usize = axes.iter().map(|&d| shape[d]).product();
            for o in 0..got.len() {
                assert_sum(
                    got[o] as f64,
                    want[o],
                    abs[o],
                    k_col(n).max(k_row(n)),
                    &format!("{what} axes {axes:?} [{o}]"),
                );
            }
        }
    }
}
