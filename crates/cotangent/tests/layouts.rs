//! Copies of strided views and products of transposed operands: the tiled transposed-copy path
//! (a view whose last two axes are swapped) and the matrix product that copies a column-major
//! right operand first, checked element by element against index arithmetic and an f64 loop.
use cotangent::{Array, DType};

/// Values that identify their position: element `i` of a dense array is `i`.
fn iota(shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::from_vec((0..n).map(|i| i as f32).collect::<Vec<f32>>(), shape)
}

#[test]
fn transposed_views_copy_exactly() {
    // sizes around and across the copy's tile size, batched, and sliced (non-zero offset)
    for &(b, r, c) in &[(1, 2, 3), (1, 16, 16), (3, 37, 45), (2, 64, 33), (1, 129, 70), (2, 300, 261)] {
        let x = iota(&[b, r, c]);
        // t: [b, c, r] with strides (r*c, 1, c)
        let t = x.transpose(&[0, 2, 1]);
        // the transposed view's elements from column `j0` and row `i0` on, in row-major order
        let expected = |j0: usize, i0: usize| -> Vec<f32> {
            let mut want = Vec::new();
            for bi in 0..b {
                for j in j0..c {
                    for i in i0..r {
                        want.push((bi * r * c + i * c + j) as f32);
                    }
                }
            }
            want
        };
        assert_eq!(t.to_vec::<f32>().unwrap(), expected(0, 0), "transpose of [{b}, {r}, {c}]");
        // a slice of the transposed view (non-zero offset)
        let s = t.slice(&[0, 1, 2], &[b as isize, c as isize, r as isize], &[1, 1, 1]);
        let (got, want) = (s.to_vec::<f32>().unwrap(), expected(1, 2));
        assert_eq!(got, want, "sliced transpose of [{b}, {r}, {c}]");
    }
}

#[test]
fn products_with_a_transposed_right_operand_match_an_f64_loop() {
    for &(m, k, n) in &[(128, 512, 96), (70, 90, 130), (5, 300, 200)] {
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 104729) % 997) as f32 / 498.5 - 1.0).collect();
        let aa = Array::from_vec(a.clone(), &[m, k]);
        let ww = Array::from_vec(w.clone(), &[n, k]);
        let c = aa.matmul(&ww.transpose(&[1, 0])).to_vec::<f32>().unwrap();
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|p| a[i * k + p] as f64 * w[j * k + p] as f64).sum();
                let got = c[i * n + j] as f64;
                assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "({m},{k},{n}) [{i},{j}]: {got} vs {want}");
            }
        }
    }
}

/// A dense array of `values` converted to `dtype` (f32 or f64), stored in row-major order.
fn stored_as(values: &[f64], shape: &[usize], dtype: DType) -> Array {
    match dtype {
        DType::F32 => Array::from_vec(values.iter().map(|&v| v as f32).collect::<Vec<f32>>(), shape),
        _ => Array::from_vec(values.to_vec(), shape),
    }
}

/// Every element of the product `c` (`[batch, m, n]`, f32 or f64) within rounding of `want`.
fn assert_product_matches(
    c: &Array,
    (batch, m, n): (usize, usize, usize),
    want: impl Fn(usize, usize, usize) -> f64,
    label: &str,
) {
    let dtype = c.dtype();
    let c = c.astype(DType::F64).to_vec::<f64>().unwrap();
    assert_eq!(c.len(), batch * m * n, "{label}");
    let tol = if dtype == DType::F64 { 1e-10 } else { 1e-4 };
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let (got, expect) = (c[(bi * m + i) * n + j], want(bi, i, j));
                assert!(
                    (got - expect).abs() <= tol * (1.0 + expect.abs()),
                    "{dtype:?} batch {batch} {label} [{bi},{i},{j}]: {got} vs {expect}"
                );
            }
        }
    }
}

/// Short products (m < 64) with a column-major right operand are computed column-major and
/// transposed into the output; cover a row-major and a column-major left operand, a batch whose
/// right operand is broadcast, and f64.
#[test]
fn short_products_with_column_major_operands_match_an_f64_loop() {
    let value = |i: usize, salt: usize| ((i * salt) % 1009) as f64 / 504.5 - 1.0;
    for &(batch, m, k, n) in &[(1, 32, 256, 256), (1, 2, 64, 48), (3, 17, 40, 100), (2, 40, 128, 33)] {
        let a: Vec<f64> = (0..batch * m * k).map(|i| value(i, 7919)).collect();
        let w: Vec<f64> = (0..n * k).map(|i| value(i, 104729)).collect();
        // w is stored [n, k]; its transpose is the column-major [k, n] right operand
        let wt = |dtype| stored_as(&w, &[n, k], dtype).transpose(&[1, 0]);
        let want =
            |bi: usize, i: usize, j: usize| -> f64 { (0..k).map(|p| a[(bi * m + i) * k + p] * w[j * k + p]).sum() };
        for (column_major_left, dtype) in
            [(false, DType::F64), (true, DType::F64), (false, DType::F32), (true, DType::F32)]
        {
            let left = if column_major_left {
                // the same values stored [batch, k, m], viewed as [batch, m, k]
                let mut transposed = vec![0.0; batch * m * k];
                for bi in 0..batch {
                    for i in 0..m {
                        for p in 0..k {
                            transposed[(bi * k + p) * m + i] = a[(bi * m + i) * k + p];
                        }
                    }
                }
                stored_as(&transposed, &[batch, k, m], dtype).transpose(&[0, 2, 1])
            } else {
                stored_as(&a, &[batch, m, k], dtype)
            };
            let label = format!("({m},{k},{n}) left column-major {column_major_left}");
            assert_product_matches(&left.matmul(&wt(dtype)), (batch, m, n), want, &label);
        }
    }
}

/// Narrow products (n < 16 output columns, m ≥ 64 rows) with a column-major left operand, the
/// weight gradient `hᵀ @ g` of a classifier head, are computed column-major and transposed;
/// with a row-major left operand they are not. Both against an f64 loop, f32 and f64, batched.
#[test]
fn narrow_products_match_an_f64_loop() {
    let value = |i: usize, salt: usize| ((i * salt) % 1013) as f64 / 506.5 - 1.0;
    for &(batch, m, k, n) in &[(1, 512, 128, 10), (2, 64, 33, 1), (1, 100, 7, 15), (3, 80, 64, 3)] {
        // the left operand stored [batch, k, m] (its transpose is the column-major [m, k] view)
        let at: Vec<f64> = (0..batch * k * m).map(|i| value(i, 7919)).collect();
        let b: Vec<f64> = (0..batch * k * n).map(|i| value(i, 104729)).collect();
        let want = |bi: usize, i: usize, j: usize| -> f64 {
            (0..k).map(|p| at[(bi * k + p) * m + i] * b[(bi * k + p) * n + j]).sum()
        };
        for dtype in [DType::F64, DType::F32] {
            let column_major = stored_as(&at, &[batch, k, m], dtype).transpose(&[0, 2, 1]);
            // the same values copied row-major: the other orientation
            let row_major = column_major.astype(DType::F64).to_vec::<f64>().unwrap();
            let row_major = stored_as(&row_major, &[batch, m, k], dtype);
            for (left, layout) in [(column_major, "column-major"), (row_major, "row-major")] {
                let c = left.matmul(&stored_as(&b, &[batch, k, n], dtype));
                assert_product_matches(&c, (batch, m, n), want, &format!("({m},{k},{n}) left {layout}"));
            }
        }
    }
}

/// A row broadcast over the rows of an owned (donated) matrix, and a sum over the leading axis
/// (a dense layer's bias add and bias gradient), against f64 loops; also with a sliced row.
#[test]
fn row_broadcasts_and_leading_axis_sums_match_loops() {
    let (m, n) = (37, 300);
    let x: Vec<f32> = (0..m * n).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    let bias: Vec<f32> = (0..n + 5).map(|i| ((i * 104729) % 997) as f32 / 498.5 - 1.0).collect();
    let full_bias = Array::from_vec(bias.clone(), &[n + 5]);
    for offset in [0, 5] {
        let b = full_bias.slice_axis(0, Some(offset as isize), Some((offset + n) as isize), 1);
        // `x * 1.0` is an unevaluated temporary: its buffer is donated to the addition
        let y = (Array::from_vec(x.clone(), &[m, n]) * 1.0 + &b).to_vec::<f32>().unwrap();
        for i in 0..m {
            for j in 0..n {
                assert_eq!(y[i * n + j], x[i * n + j] + bias[offset + j], "bias add [{i},{j}]");
            }
        }
    }
    let sums = Array::from_vec(x.clone(), &[m, n]).sum(&[0], false).to_vec::<f32>().unwrap();
    for j in 0..n {
        let want: f64 = (0..m).map(|i| x[i * n + j] as f64).sum();
        assert!((sums[j] as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()), "sum[{j}]: {} vs {want}", sums[j]);
    }
}

/// Binary ops on long rows (≥ 16) whose operands are strided or broadcast (a slice of a
/// larger array, a column of a matrix, a per-row scalar), on inputs that are kept alive so no
/// buffer is donated, small and large enough to be split over threads: exact against loops.
#[test]
fn strided_and_broadcast_rows_match_loops() {
    for (batch, rows, cols) in [(3, 5, 40), (64, 40, 48)] {
        let big: Vec<f32> = (0..batch * (rows + 2) * cols).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let table: Vec<f32> = (0..cols * 4).map(|i| ((i * 104729) % 997) as f32 / 498.5 - 1.0).collect();
        let per_row: Vec<f32> = (0..batch * rows).map(|i| (i % 13) as f32 - 6.0).collect();
        let full = Array::from_vec(big.clone(), &[batch, rows + 2, cols]);
        // rows 1 .. rows + 1 of each batch: row stride cols, batch stride (rows + 2) * cols
        let a = full.slice_axis(1, Some(1), Some(rows as isize + 1), 1);
        let a_at = |b: usize, i: usize, j: usize| big[(b * (rows + 2) + i + 1) * cols + j];
        // column 2 of a [cols, 4] table as a [1, cols] row: element stride 4
        let column = Array::from_vec(table.clone(), &[cols, 4]).slice_axis(1, Some(2), Some(3), 1).transpose(&[1, 0]);
        let scalars = Array::from_vec(per_row.clone(), &[batch, rows, 1]);
        let dense = a.multiply(1.0);
        dense.eval().unwrap();
        let products = a.multiply(&column).to_vec::<f32>().unwrap();
        let sums = dense.add(&column).to_vec::<f32>().unwrap();
        let differences = a.subtract(&scalars).to_vec::<f32>().unwrap();
        let flipped = scalars.subtract(&a).to_vec::<f32>().unwrap();
        for b in 0..batch {
            for i in 0..rows {
                for j in 0..cols {
                    let k = (b * rows + i) * cols + j;
                    let (x, c, s) = (a_at(b, i, j), table[j * 4 + 2], per_row[b * rows + i]);
                    assert_eq!(products[k], x * c, "a * column [{b},{i},{j}]");
                    assert_eq!(sums[k], x + c, "dense + column [{b},{i},{j}]");
                    assert_eq!(differences[k], x - s, "a - per-row [{b},{i},{j}]");
                    assert_eq!(flipped[k], s - x, "per-row - a [{b},{i},{j}]");
                }
            }
        }
    }
}
