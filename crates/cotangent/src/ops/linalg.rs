//! Linear algebra ops: [`matmul`] (numpy semantics), [`outer`], [`tensordot`] and a two-operand
//! [`einsum`], all built on the one [`Matmul`] primitive plus reshapes, transposes and sums.
use crate::primitives::matmul::Matmul;
use crate::shape::{broadcast_shapes, Shape};
use crate::Array;

impl Array {
    /// Matrix product with numpy's `matmul` semantics; see [`matmul`].
    #[track_caller]
    pub fn matmul(&self, other: &Array) -> Array {
        let _op = crate::array::OpScope::enter("matmul");
        matmul(self, other)
    }
}

/// Matrix product with numpy's `matmul` semantics.
///
/// * 2-D × 2-D: the matrix product `[m, k] × [k, n] -> [m, n]`;
/// * more axes: a stack of matrices in the last two axes; the leading (batch) axes broadcast;
/// * a 1-D first operand is a row vector (`[k] -> [1, k]`, the unit axis removed afterwards), a
///   1-D second operand a column vector (`[k] -> [k, 1]`, removed afterwards); 1-D × 1-D is
///   the inner product (a 0-d array).
///
/// Dtypes promote as for arithmetic; integer products wrap as in numpy.
///
/// ```
/// use cotangent::{self as ct, Array};
/// let a = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
/// let v = Array::from_slice(&[1.0f32, 1.0], &[2]);
/// assert_eq!(a.matmul(&v).to_vec::<f32>().unwrap(), vec![3.0, 7.0]);
/// assert_eq!(ct::matmul(&v, &a).to_vec::<f32>().unwrap(), vec![4.0, 6.0]);
/// ```
///
/// # Panics
/// If an operand is 0-d, the contracted extents differ or the batch axes do not broadcast.
#[track_caller]
pub fn matmul(a: &Array, b: &Array) -> Array {
    let _op = crate::array::OpScope::enter("matmul");
    assert!(
        a.ndim() >= 1 && b.ndim() >= 1,
        "cotangent::matmul: operands must have at least one axis, got shapes {:?} ({}) and {:?} ({})",
        a.shape(),
        a.dtype(),
        b.shape(),
        b.dtype()
    );
    let dtype = a.dtype().promote(b.dtype());
    let (a1, b1) = (a.ndim() == 1, b.ndim() == 1);
    let am = if a1 { a.reshape_exact(&[1, a.shape()[0]]) } else { a.clone() }.astype(dtype);
    let bm = if b1 { b.reshape_exact(&[b.shape()[0], 1]) } else { b.clone() }.astype(dtype);
    let (sa, sb) = (am.shape(), bm.shape());
    let (na, nb) = (sa.len(), sb.len());
    let k = sa[na - 1];
    assert!(
        k == sb[nb - 2],
        "cotangent::matmul: contracted extents differ: shapes {:?} ({}) and {:?} ({}) (last axis of the first \
         must equal the {} axis of the second)",
        a.shape(),
        a.dtype(),
        b.shape(),
        b.dtype(),
        if b1 { "only" } else { "second-to-last" }
    );
    let Some(batch) = broadcast_shapes(&sa[..na - 2], &sb[..nb - 2]) else {
        panic!(
            "cotangent::matmul: batch axes {:?} and {:?} of shapes {:?} ({}) and {:?} ({}) do not broadcast",
            &sa[..na - 2],
            &sb[..nb - 2],
            a.shape(),
            a.dtype(),
            b.shape(),
            b.dtype()
        )
    };
    let mut out: Shape = batch.clone();
    out.push(sa[na - 2]);
    out.push(sb[nb - 1]);
    let y = Array::from_primitive(Matmul, vec![am, bm], &out, dtype);
    let mut final_shape: Shape = batch;
    if !a1 {
        final_shape.push(out[out.len() - 2]);
    }
    if !b1 {
        final_shape.push(out[out.len() - 1]);
    }
    y.reshape_exact(&final_shape)
}

/// The outer product of two arrays (flattened first, as numpy): `out[i, j] = a[i] * b[j]`.
#[track_caller]
pub fn outer(a: &Array, b: &Array) -> Array {
    let _op = crate::array::OpScope::enter("outer");
    let a = a.reshape_exact(&[a.size(), 1]);
    let b = b.reshape_exact(&[1, b.size()]);
    a * b
}

/// Which axes [`tensordot`] contracts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensordotAxes {
    /// The last `n` axes of `a` with the first `n` axes of `b` (numpy's `axes=n`).
    N(usize),
    /// Explicit axis lists: `a`'s axis `.0[i]` contracts with `b`'s axis `.1[i]`.
    Pairs(Vec<isize>, Vec<isize>),
}

impl From<usize> for TensordotAxes {
    fn from(n: usize) -> Self {
        TensordotAxes::N(n)
    }
}
impl From<(&[isize], &[isize])> for TensordotAxes {
    fn from((a, b): (&[isize], &[isize])) -> Self {
        TensordotAxes::Pairs(a.to_vec(), b.to_vec())
    }
}
impl<const N: usize> From<([isize; N], [isize; N])> for TensordotAxes {
    fn from((a, b): ([isize; N], [isize; N])) -> Self {
        TensordotAxes::Pairs(a.to_vec(), b.to_vec())
    }
}
impl From<(Vec<isize>, Vec<isize>)> for TensordotAxes {
    fn from((a, b): (Vec<isize>, Vec<isize>)) -> Self {
        TensordotAxes::Pairs(a, b)
    }
}

/// Sum of products over the given axes, as numpy's `tensordot`: the result has `a`'s free axes
/// followed by `b`'s free axes. `axes` is a count `n` (`a`'s last `n` with `b`'s first `n`) or
/// a pair of axis lists, e.g. `([1, 0], [0, 1])`.
///
/// # Panics
/// On bad or repeated axes, or contracted extents that differ.
#[track_caller]
pub fn tensordot(a: &Array, b: &Array, axes: impl Into<TensordotAxes>) -> Array {
    let _op = crate::array::OpScope::enter("tensordot");
    let (ax_a, ax_b): (Vec<usize>, Vec<usize>) = match axes.into() {
        TensordotAxes::N(n) => {
            assert!(
                n <= a.ndim() && n <= b.ndim(),
                "cotangent::tensordot: cannot contract {n} axes of shapes {:?} and {:?}",
                a.shape(),
                b.shape()
            );
            ((a.ndim() - n..a.ndim()).collect(), (0..n).collect())
        }
        TensordotAxes::Pairs(pa, pb) => {
            assert!(pa.len() == pb.len(), "cotangent::tensordot: axis lists {pa:?} and {pb:?} have different lengths");
            (
                super::shape::axes_for("tensordot", &pa, a.shape(), a.ndim()),
                super::shape::axes_for("tensordot", &pb, b.shape(), b.ndim()),
            )
        }
    };
    for (list, x) in [(&ax_a, a), (&ax_b, b)] {
        let mut s = list.clone();
        s.sort_unstable();
        s.dedup();
        assert!(s.len() == list.len(), "cotangent::tensordot: repeated axis in {list:?} for shape {:?}", x.shape());
    }
    for (&i, &j) in ax_a.iter().zip(&ax_b) {
        assert!(
            a.shape()[i] == b.shape()[j],
            "cotangent::tensordot: axis {i} of {:?} and axis {j} of {:?} differ in extent",
            a.shape(),
            b.shape()
        );
    }
    let free_a: Vec<usize> = (0..a.ndim()).filter(|i| !ax_a.contains(i)).collect();
    let free_b: Vec<usize> = (0..b.ndim()).filter(|i| !ax_b.contains(i)).collect();
    let ksize: usize = ax_a.iter().map(|&i| a.shape()[i]).product();
    let m: usize = free_a.iter().map(|&i| a.shape()[i]).product();
    let n: usize = free_b.iter().map(|&i| b.shape()[i]).product();
    let pa: Vec<usize> = free_a.iter().chain(&ax_a).copied().collect();
    let pb: Vec<usize> = ax_b.iter().chain(&free_b).copied().collect();
    let am = a.permute(&pa).reshape_exact(&[m, ksize]);
    let bm = b.permute(&pb).reshape_exact(&[ksize, n]);
    let out: Vec<usize> = free_a.iter().map(|&i| a.shape()[i]).chain(free_b.iter().map(|&i| b.shape()[i])).collect();
    matmul(&am, &bm).reshape_exact(&out)
}

/// Parse one operand's subscripts (letters only).
#[track_caller]
fn parse_term(spec: &str, term: &str) -> Vec<char> {
    assert!(
        !term.contains('.'),
        "cotangent::einsum: ellipsis (`...`) is not supported yet in {spec:?}; use explicit subscripts"
    );
    let v: Vec<char> = term.chars().filter(|c| !c.is_whitespace()).collect();
    for &c in &v {
        assert!(c.is_ascii_alphabetic(), "cotangent::einsum: bad subscript {c:?} in {spec:?}");
    }
    v
}

/// Einstein summation for one or two operands, e.g. `"ij,jk->ik"`, `"bij,bjk->bik"`,
/// `"ij->ji"`, `"i,i->"`, `"bhqd,bhkd->bhqk"`, `"ij->"`, `"i,j->ij"`. Without `->` the output
/// is the letters that appear exactly once, in alphabetical order (numpy's rule).
///
/// Two operands are contracted with one batched [`matmul`]: letters in both inputs and the output
/// are batch axes, letters in both inputs only are summed by the product, letters of a single input
/// that are not in the output are summed first.
///
/// # Panics
/// With a clear message for what is not supported: more than two operands, ellipsis, a letter
/// repeated within one operand (diagonals) or in the output, an output letter that no input has,
/// extents that disagree for one letter, or a subscript count that differs from an operand's rank.
#[track_caller]
pub fn einsum(spec: &str, operands: &[Array]) -> Array {
    let _op = crate::array::OpScope::enter("einsum");
    let (lhs, out_spec) = match spec.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (spec, None),
    };
    let mut terms: Vec<Vec<char>> = Vec::new();
    for t in lhs.split(',') {
        terms.push(parse_term(spec, t));
    }
    assert!(
        terms.len() == operands.len(),
        "cotangent::einsum: {spec:?} names {} operands but {} were given",
        terms.len(),
        operands.len()
    );
    assert!(
        (1..=2).contains(&terms.len()),
        "cotangent::einsum: only one or two operands are supported, {spec:?} has {}",
        terms.len()
    );
    let out: Vec<char> = match out_spec {
        Some(o) => parse_term(spec, o),
        None => {
            let mut all: Vec<char> = terms.iter().flatten().copied().collect();
            all.sort_unstable();
            let mut once: Vec<char> =
                all.iter().copied().filter(|c| all.iter().filter(|d| *d == c).count() == 1).collect();
            once.dedup();
            once
        }
    };
    // sizes per letter, checks
    let mut size = std::collections::BTreeMap::new();
    for (t, x) in terms.iter().zip(operands) {
        assert!(
            t.len() == x.ndim(),
            "cotangent::einsum: subscripts {:?} do not match operand shape {:?} in {spec:?}",
            t.iter().collect::<String>(),
            x.shape()
        );
        for (i, &c) in t.iter().enumerate() {
            assert!(
                t.iter().filter(|&&d| d == c).count() == 1,
                "cotangent::einsum: repeated subscript {c:?} within one operand (diagonals) is not supported: {spec:?}"
            );
            let d = x.shape()[i];
            let prev = *size.entry(c).or_insert(d);
            assert!(
                prev == d,
                "cotangent::einsum: subscript {c:?} has extents {prev} and {d} in {spec:?} (shapes {:?})",
                operands.iter().map(|o| o.shape().to_vec()).collect::<Vec<_>>()
            );
        }
    }
    for &c in &out {
        assert!(
            out.iter().filter(|&&d| d == c).count() == 1,
            "cotangent::einsum: subscript {c:?} repeated in the output of {spec:?}"
        );
        assert!(size.contains_key(&c), "cotangent::einsum: output subscript {c:?} is in no input of {spec:?}");
    }
    let in_out = |c: &char| out.contains(c);

    // Sum away letters of one operand that appear neither in the output nor in the other operand.
    let mut reduced: Vec<(Vec<char>, Array)> = Vec::new();
    for (i, (t, x)) in terms.iter().zip(operands).enumerate() {
        let other: &[char] = if terms.len() == 2 { &terms[1 - i] } else { &[] };
        let drop: Vec<isize> =
            (0..t.len()).filter(|&j| !in_out(&t[j]) && !other.contains(&t[j])).map(|j| j as isize).collect();
        let keep: Vec<char> = t.iter().copied().filter(|c| in_out(c) || other.contains(c)).collect();
        let y = if drop.is_empty() { x.clone() } else { x.sum(&drop, false) };
        reduced.push((keep, y));
    }

    let (letters, y) = if reduced.len() == 1 {
        reduced.pop().unwrap()
    } else {
        let (tb, b) = reduced.pop().unwrap();
        let (ta, a) = reduced.pop().unwrap();
        let batch: Vec<char> = ta.iter().copied().filter(|c| tb.contains(c) && in_out(c)).collect();
        let contract: Vec<char> = ta.iter().copied().filter(|c| tb.contains(c) && !in_out(c)).collect();
        let free_a: Vec<char> = ta.iter().copied().filter(|c| !tb.contains(c)).collect();
        let free_b: Vec<char> = tb.iter().copied().filter(|c| !ta.contains(c)).collect();
        let pos = |t: &[char], c: char| t.iter().position(|&d| d == c).unwrap();
        let ext = |cs: &[char]| cs.iter().map(|c| size[c]).product::<usize>();
        let pa: Vec<usize> = batch.iter().chain(&free_a).chain(&contract).map(|&c| pos(&ta, c)).collect();
        let pb: Vec<usize> = batch.iter().chain(&contract).chain(&free_b).map(|&c| pos(&tb, c)).collect();
        let (nb, m, k, n) = (ext(&batch), ext(&free_a), ext(&contract), ext(&free_b));
        let am = a.permute(&pa).reshape_exact(&[nb, m, k]);
        let bm = b.permute(&pb).reshape_exact(&[nb, k, n]);
        let prod = matmul(&am, &bm);
        let letters: Vec<char> = batch.iter().chain(&free_a).chain(&free_b).copied().collect();
        let shape: Vec<usize> = letters.iter().map(|c| size[c]).collect();
        (letters, prod.reshape_exact(&shape))
    };
    // every remaining letter is an output letter (the others were summed); order them
    let perm: Vec<usize> = out.iter().map(|c| letters.iter().position(|d| d == c).unwrap()).collect();
    y.permute(&perm)
}
