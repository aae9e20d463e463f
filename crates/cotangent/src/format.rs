//! `Display` for [`Array`]: the values, printed as numpy's `repr` prints them.
use crate::{Array, DType, Result};
use std::fmt;

/// numpy's defaults: `threshold`, `edgeitems`, `linewidth`.
const THRESHOLD: usize = 1000;
const EDGE_ITEMS: usize = 3;
const LINE_WIDTH: usize = 75;
const PREFIX: &str = "array(";

impl fmt::Display for Array {
    /// Evaluates the array and prints its values as numpy's `repr` does, e.g.
    /// `array([[1, 2],\n       [3, 4]], dtype=int32)`, with the shape added when the values do
    /// not show it (summarised or empty arrays). If evaluation fails, the error is printed in
    /// place of the values. ([`Debug`](fmt::Debug) does not evaluate.)
    ///
    /// Nested brackets, one row per line, the elements of a column aligned; rows longer than
    /// 75 characters wrap. Arrays of more than 1000 elements are summarised: every axis longer
    /// than 6 shows its first and last 3 entries around `...`, and only those elements are
    /// read. Floats print as numpy's default: at most 8 fractional digits, the fewest that give
    /// the value back in its dtype, padded to align the decimal points; scientific notation
    /// when the nonzero magnitudes reach `1e8`, go below `1e-4` or span more than a factor of
    /// 1000. A precision given to the formatter (`{:.3}`) replaces the 8.
    ///
    /// ```
    /// use cotangent::Array;
    /// let x = Array::from_slice(&[1i32, 2, 3, 4], &[2, 2]);
    /// assert_eq!(x.to_string(), "array([[1, 2],\n       [3, 4]], dtype=int32)");
    /// let y = Array::from_slice(&[1.5f32, 2.25, -3.0], &[3]);
    /// assert_eq!(format!("{y}"), "array([ 1.5 ,  2.25, -3.  ], dtype=float32)");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let precision = f.precision().unwrap_or(8);
        f.write_str(&repr(self, precision))
    }
}

/// The full text `Display` writes.
fn repr(x: &Array, precision: usize) -> String {
    let summarise = x.size() > THRESHOLD;
    let mut extras = Vec::new();
    if (x.size() == 0 && x.ndim() != 1) || summarise {
        extras.push(format!("shape={:?}", x.shape()));
    }
    extras.push(format!("dtype={}", x.dtype()));
    let extra = format!("{})", extras.join(", "));
    let body = match values(x, summarise, precision) {
        Ok(body) => body,
        // no values: the error, the shape and the dtype on one line
        Err(e) => return format!("{PREFIX}<{e}>, shape={:?}, dtype={})", x.shape(), x.dtype()),
    };
    let head = format!("{PREFIX}{body},");
    let last_line = head.len() - head.rfind('\n').map_or(0, |i| i + 1);
    let spacer =
        if last_line + extra.len() + 1 > LINE_WIDTH { format!("\n{}", " ".repeat(PREFIX.len())) } else { " ".into() };
    format!("{head}{spacer}{extra}")
}

/// The bracketed values (numpy's `array2string`), or the error evaluating them.
fn values(x: &Array, summarise: bool, precision: usize) -> Result<String> {
    if x.size() == 0 {
        return Ok("[]".into());
    }
    // The elements shown: on each summarised axis, the first and last EDGE_ITEMS entries.
    let mut shown = x.clone();
    let mut cut = vec![false; x.ndim()];
    for (a, cut) in cut.iter_mut().enumerate() {
        if summarise && x.shape()[a] > 2 * EDGE_ITEMS {
            *cut = true;
            let e = EDGE_ITEMS as isize;
            let head = shown.slice_axis(a as isize, None, Some(e), 1);
            let tail = shown.slice_axis(a as isize, Some(-e), None, 1);
            shown = crate::ops::concatenate(&[head, tail], a as isize);
        }
    }
    let words = words(&shown, precision)?;
    let layout = Layout { shape: shown.shape().to_vec(), cut, words };
    let next_line_prefix = " ".repeat(1 + PREFIX.len());
    // numpy leaves room for the closing `)`
    Ok(layout.recurse(&mut Vec::new(), &next_line_prefix, LINE_WIDTH - 1))
}

/// The shown elements formatted, row-major, all of one width.
fn words(x: &Array, precision: usize) -> Result<Vec<String>> {
    let words: Vec<String> = match x.dtype() {
        DType::Bool => x.to_vec::<bool>()?.into_iter().map(|b| if b { "True" } else { "False" }.to_string()).collect(),
        DType::I64 => x.to_vec::<i64>()?.iter().map(i64::to_string).collect(),
        d if d.is_int() => x.to_f64_vec()?.iter().map(|&v| (v as i64).to_string()).collect(),
        d => return Ok(FloatFormat::new(&x.to_f64_vec()?, d, precision).format_all()),
    };
    let width = words.iter().map(String::len).max().unwrap_or(0);
    Ok(words.into_iter().map(|w| format!("{w:>width$}")).collect())
}

/// numpy's `FloatingFormat` in its default mode (`floatmode='maxprec'`, sign `-`).
struct FloatFormat<'a> {
    values: &'a [f64],
    dtype: DType,
    precision: usize,
    exp: bool,
    pad_left: usize,
    pad_right: usize,
    /// Scientific notation: the digits after the mantissa's point, and the exponent's digits.
    mantissa_digits: usize,
    exp_digits: usize,
}

impl<'a> FloatFormat<'a> {
    fn new(values: &'a [f64], dtype: DType, precision: usize) -> FloatFormat<'a> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let nonzero: Vec<f64> = finite.iter().filter(|&&v| v != 0.0).map(|v| v.abs()).collect();
        let exp = match (nonzero.iter().copied().reduce(f64::max), nonzero.iter().copied().reduce(f64::min)) {
            (Some(max), Some(min)) => max >= 1e8 || min < 1e-4 || max / min > 1e3,
            _ => false,
        };
        let mut ff =
            FloatFormat { values, dtype, precision, exp, pad_left: 0, pad_right: 0, mantissa_digits: 0, exp_digits: 0 };
        if finite.is_empty() {
            // only nan and inf: no padding (numpy's pad 0 / 0)
        } else if exp {
            let parts: Vec<(String, String, i32)> = finite.iter().map(|&v| ff.scientific_unique(v)).collect();
            ff.mantissa_digits = parts.iter().map(|p| p.1.len()).max().unwrap_or(0);
            ff.exp_digits = parts.iter().map(|p| p.2.unsigned_abs().to_string().len()).max().unwrap_or(1).max(2);
            ff.pad_left = parts.iter().map(|p| p.0.len()).max().unwrap_or(1);
            ff.pad_right = ff.exp_digits + 2 + ff.mantissa_digits;
        } else {
            let parts: Vec<(String, String)> = finite.iter().map(|&v| ff.positional_unique(v)).collect();
            ff.pad_left = parts.iter().map(|p| p.0.len()).max().unwrap_or(1);
            ff.pad_right = parts.iter().map(|p| p.1.len()).max().unwrap_or(0);
        }
        if finite.len() != values.len() {
            let neginf = values.contains(&f64::NEG_INFINITY) as usize;
            let offset = ff.pad_right + 1;
            ff.pad_left = ff.pad_left.max(3usize.saturating_sub(offset)).max((3 + neginf).saturating_sub(offset));
        }
        ff
    }

    /// Whether the decimal `text` read back in the dtype is `v`.
    fn gives_back(&self, text: &str, v: f64) -> bool {
        use crate::dtype::Element;
        let Ok(parsed) = text.parse::<f64>() else { return false };
        crate::dispatch_dtype!(self.dtype, T => <T as Element>::from_f64(parsed).to_f64() == v)
    }

    /// The fewest fractional digits (at most `precision`) that give `v` back, as integer and
    /// fractional parts (`"-1"`, `"25"`; no trailing zeros).
    fn positional_unique(&self, v: f64) -> (String, String) {
        let p = self.precision;
        let text =
            (0..=p).map(|d| format!("{v:.d$}")).find(|t| self.gives_back(t, v)).unwrap_or_else(|| format!("{v:.p$}"));
        let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
        (int.to_string(), frac.trim_end_matches('0').to_string())
    }

    /// Scientific: mantissa integer part, fractional digits (fewest that give `v` back, at
    /// most `precision`) and exponent.
    fn scientific_unique(&self, v: f64) -> (String, String, i32) {
        let p = self.precision;
        let text =
            (0..=p).map(|d| format!("{v:.d$e}")).find(|t| self.gives_back(t, v)).unwrap_or_else(|| format!("{v:.p$e}"));
        split_scientific(&text)
    }

    fn format_all(&self) -> Vec<String> {
        self.values.iter().map(|&v| self.format(v)).collect()
    }

    fn format(&self, v: f64) -> String {
        let width = self.pad_left + self.pad_right + 1;
        if !v.is_finite() {
            let s = if v.is_nan() {
                "nan"
            } else if v > 0.0 {
                "inf"
            } else {
                "-inf"
            };
            return format!("{s:>width$}");
        }
        if self.exp {
            let d = self.mantissa_digits;
            let (int, frac, e) = split_scientific(&format!("{v:.d$e}"));
            let sign = if e < 0 { '-' } else { '+' };
            let digits = self.exp_digits;
            let mantissa = format!("{int}.{frac:0<d$}");
            let mantissa = format!("{mantissa:>w$}", w = self.pad_left + 1 + d);
            format!("{mantissa}e{sign}{:0>digits$}", e.unsigned_abs())
        } else {
            let (int, frac) = self.positional_unique(v);
            format!("{int:>l$}.{frac:<r$}", l = self.pad_left, r = self.pad_right)
        }
    }
}

/// `"-1.25e-5"` as `("-1", "25", -5)`.
fn split_scientific(text: &str) -> (String, String, i32) {
    let (mantissa, e) = text.split_once('e').unwrap_or((text, "0"));
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    (int.to_string(), frac.to_string(), e.parse().unwrap_or(0))
}

/// The shown elements and how to lay them out (numpy's `_formatArray`).
struct Layout {
    /// The shape of the shown elements (a summarised axis has `2 * EDGE_ITEMS` entries).
    shape: Vec<usize>,
    /// Which axes are summarised (`...` between their halves).
    cut: Vec<bool>,
    words: Vec<String>,
}

impl Layout {
    fn word(&self, index: &[usize]) -> &str {
        let mut flat = 0;
        for (i, &k) in index.iter().enumerate() {
            flat = flat * self.shape[i] + k;
        }
        &self.words[flat]
    }

    /// The text of the sub-array at `index`, its first line starting at `hanging_indent`'s end.
    fn recurse(&self, index: &mut Vec<usize>, hanging_indent: &str, width: usize) -> String {
        let axis = index.len();
        if axis == self.shape.len() {
            return self.word(index).to_string();
        }
        let axes_left = self.shape.len() - axis;
        let next_indent = format!("{hanging_indent} ");
        let next_width = width - 1;
        let n = self.shape[axis];
        let summary = self.cut[axis];
        // the positions shown before and after `...` (all of them after when not summarised)
        let (leading, trailing): (Vec<usize>, Vec<usize>) = if summary {
            ((0..EDGE_ITEMS).collect(), (n - EDGE_ITEMS..n).collect())
        } else {
            (vec![], (0..n).collect())
        };
        let child = |k: usize, index: &mut Vec<usize>| {
            index.push(k);
            let s = self.recurse(index, &next_indent, next_width);
            index.pop();
            s
        };
        let mut s = String::new();
        if axes_left == 1 {
            let elem_width = width - 1; // room for the separator's `,` or the closing `]`
            let mut line = hanging_indent.to_string();
            for &k in &leading {
                let word = child(k, index);
                extend_line(&mut s, &mut line, &word, elem_width, hanging_indent);
                line.push_str(", ");
            }
            if summary {
                extend_line(&mut s, &mut line, "...", elem_width, hanging_indent);
                line.push_str(", ");
            }
            let (last, rest) = trailing.split_last().expect("a non-empty axis");
            for &k in rest {
                let word = child(k, index);
                extend_line(&mut s, &mut line, &word, elem_width, hanging_indent);
                line.push_str(", ");
            }
            let word = child(*last, index);
            extend_line(&mut s, &mut line, &word, elem_width, hanging_indent);
            s.push_str(&line);
        } else {
            let line_sep = format!(",{}", "\n".repeat(axes_left - 1));
            for &k in &leading {
                let nested = child(k, index);
                s.push_str(&format!("{hanging_indent}{nested}{line_sep}"));
            }
            if summary {
                s.push_str(&format!("{hanging_indent}...{line_sep}"));
            }
            let (last, rest) = trailing.split_last().expect("a non-empty axis");
            for &k in rest {
                let nested = child(k, index);
                s.push_str(&format!("{hanging_indent}{nested}{line_sep}"));
            }
            let nested = child(*last, index);
            s.push_str(&format!("{hanging_indent}{nested}"));
        }
        format!("[{}]", &s[hanging_indent.len()..])
    }
}

/// Appends `word` to `line`, first moving `line` into `s` and starting a new line when the
/// word would pass `width` (unless the line holds nothing yet).
fn extend_line(s: &mut String, line: &mut String, word: &str, width: usize, next_line_prefix: &str) {
    if line.len() + word.len() > width && line.len() > next_line_prefix.len() {
        s.push_str(line.trim_end());
        s.push('\n');
        *line = next_line_prefix.to_string();
    }
    line.push_str(word);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scientific_parts() {
        assert_eq!(split_scientific("-1.25e-5"), ("-1".into(), "25".into(), -5));
        assert_eq!(split_scientific("1e10"), ("1".into(), "".into(), 10));
    }
}
