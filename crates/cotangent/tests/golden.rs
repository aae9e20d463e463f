//! Forward values of every op against golden data computed with numpy / JAX.
//!
//! The data lives in `tests/golden/golden.json`, written by `tests/golden/gen_golden.py` (see its
//! header for how to regenerate it). Each case names an op, its inputs (arrays or weakly typed
//! Rust scalars), optional `pre` view ops applied to the inputs first (so ops see transposed or
//! broadcast strided views), parameters, and the expected output with a tolerance.
//!
//! All cases run; every failure (op, params, max error, first mismatches) is reported in one
//! assertion message. Ops present in the data but not wired in [`apply`] (not implemented yet)
//! are listed as "not yet covered"; set `GOLDEN_STRICT=1` to make that an error too.
#[path = "golden/json.rs"]
mod json;

use cotangent::{self as ct, Array, DType};
use json::Json;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An operand: an array or a weakly typed Rust scalar.
#[derive(Clone, Debug)]
enum Opnd {
    A(Array),
    F(f64),
    I(i64),
    B(bool),
}

impl Opnd {
    fn arr(&self) -> &Array {
        match self {
            Opnd::A(a) => a,
            other => panic!("expected an array operand, got {other:?}"),
        }
    }
}

/// Call `$body` with `$v` bound to the operand's concrete value (Array, f64, i64 or bool).
macro_rules! with_opnd {
    ($o:expr, $v:ident => $body:expr) => {
        match $o {
            Opnd::A($v) => $body,
            Opnd::F($v) => $body,
            Opnd::I($v) => $body,
            Opnd::B($v) => $body,
        }
    };
}

fn dtype_of(name: &str) -> DType {
    match name {
        "bool" => DType::Bool,
        "uint8" => DType::U8,
        "uint32" => DType::U32,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "float16" => DType::F16,
        "bfloat16" => DType::BF16,
        "float32" => DType::F32,
        "float64" => DType::F64,
        other => panic!("unknown dtype {other}"),
    }
}

fn shape_of(j: &Json) -> Vec<usize> {
    j.arr().iter().map(|v| v.int() as usize).collect()
}

/// Build an array from its JSON description (values are parsed exactly for their dtype).
fn build_array(j: &Json) -> Array {
    let shape = shape_of(j.get("shape").expect("shape"));
    let dt = dtype_of(j.get("dtype").expect("dtype").str());
    let data = j.get("data").expect("data").arr();
    let a = match dt {
        DType::Bool => Array::from_vec(data.iter().map(|v| v.bool()).collect::<Vec<_>>(), &shape),
        DType::U8 => Array::from_vec(data.iter().map(|v| v.int() as u8).collect::<Vec<_>>(), &shape),
        DType::U32 => Array::from_vec(data.iter().map(|v| v.int() as u32).collect::<Vec<_>>(), &shape),
        DType::I32 => Array::from_vec(data.iter().map(|v| v.int() as i32).collect::<Vec<_>>(), &shape),
        DType::I64 => Array::from_vec(data.iter().map(|v| v.int() as i64).collect::<Vec<_>>(), &shape),
        DType::F32 => Array::from_vec(data.iter().map(|v| v.f32()).collect::<Vec<_>>(), &shape),
        DType::F64 => Array::from_vec(data.iter().map(|v| v.f64()).collect::<Vec<_>>(), &shape),
        // float16 / bfloat16 values are written exactly as f64: the cast is exact.
        DType::F16 | DType::BF16 => {
            Array::from_vec(data.iter().map(|v| v.f64()).collect::<Vec<_>>(), &shape).astype(dt)
        }
    };
    a.eval().expect("building an input");
    a
}

fn build_input(j: &Json) -> Option<Opnd> {
    if *j == Json::Null {
        return None;
    }
    if let Some(s) = j.get("scalar") {
        return Some(match j.get("kind").expect("kind").str() {
            "float" => Opnd::F(s.f64()),
            "int" => Opnd::I(s.int() as i64),
            "bool" => Opnd::B(s.bool()),
            k => panic!("unknown scalar kind {k}"),
        });
    }
    Some(Opnd::A(build_array(j)))
}

fn apply_pre(x: Opnd, pre: &Json) -> Opnd {
    if *pre == Json::Null {
        return x;
    }
    let a = x.arr();
    Opnd::A(if let Some(p) = pre.get("transpose") {
        a.transpose(&p.arr().iter().map(|v| v.int() as isize).collect::<Vec<_>>())
    } else if let Some(s) = pre.get("slice") {
        let l = |k: &str| s.get(k).unwrap().arr().iter().map(|v| v.int() as isize).collect::<Vec<_>>();
        a.slice(&l("starts"), &l("stops"), &l("steps"))
    } else if let Some(s) = pre.get("broadcast_to") {
        a.broadcast_to(&shape_of(s))
    } else {
        panic!("unknown pre op {pre}")
    })
}

/// Parameter accessors.
struct P<'a>(&'a Json);
impl P<'_> {
    fn get(&self, k: &str) -> &Json {
        self.0.get(k).unwrap_or_else(|| panic!("missing parameter {k:?} in {}", self.0))
    }
    fn isizes(&self, k: &str) -> Vec<isize> {
        self.get(k).arr().iter().map(|v| v.int() as isize).collect()
    }
    fn usizes(&self, k: &str) -> Vec<usize> {
        shape_of(self.get(k))
    }
    fn isize(&self, k: &str) -> isize {
        self.get(k).int() as isize
    }
    fn usize(&self, k: &str) -> usize {
        self.get(k).int() as usize
    }
    fn f64(&self, k: &str) -> f64 {
        self.get(k).f64()
    }
    fn bool(&self, k: &str) -> bool {
        self.get(k).bool()
    }
    fn dtype(&self, k: &str) -> DType {
        dtype_of(self.get(k).str())
    }
}

/// Apply `op` to the inputs. `None`: the op is not wired here (not implemented in the crate yet).
fn apply(op: &str, ins: &[Option<Opnd>], p: &P) -> Option<Array> {
    let x = || ins[0].as_ref().expect("input 0").arr();
    let arr = |i: usize| ins[i].as_ref().expect("array input").arr();
    let all_arrays = || ins.iter().map(|o| o.as_ref().expect("array input").arr().clone()).collect::<Vec<_>>();
    macro_rules! unary {
        ($($name:ident),*) => {
            match op {
                $(stringify!($name) => return Some(ct::$name(x())),)*
                _ => {}
            }
        };
    }
    unary!(
        negative,
        abs,
        sign,
        exp,
        expm1,
        log,
        log1p,
        log2,
        sqrt,
        rsqrt,
        square,
        reciprocal,
        sin,
        cos,
        tan,
        tanh,
        sinh,
        cosh,
        arcsin,
        arccos,
        arctan,
        sigmoid,
        erf,
        erfinv,
        floor,
        ceil,
        round,
        logical_not,
        isnan,
        isinf
    );
    macro_rules! binary {
        ($($name:ident),*) => {
            match op {
                $(stringify!($name) => {
                    let (a, b) = (ins[0].clone().expect("lhs"), ins[1].clone().expect("rhs"));
                    return Some(with_opnd!(a, a => with_opnd!(b, b => ct::$name(a, b))));
                })*
                _ => {}
            }
        };
    }
    binary!(
        add,
        subtract,
        multiply,
        divide,
        floor_divide,
        remainder,
        power,
        maximum,
        minimum,
        arctan2,
        logaddexp,
        equal,
        not_equal,
        less,
        less_equal,
        greater,
        greater_equal,
        logical_and,
        logical_or
    );
    let axes_kd = || (p.isizes("axes"), p.bool("keepdims"));
    Some(match op {
        "select" => {
            let (a, b) = (ins[1].clone().expect("a"), ins[2].clone().expect("b"));
            let c = x();
            with_opnd!(a, a => with_opnd!(b, b => ct::select(c, a, b)))
        }
        "clip" => {
            let (lo, hi) = (ins[1].clone(), ins[2].clone());
            let x = x();
            match (lo, hi) {
                (Some(lo), Some(hi)) => with_opnd!(lo, lo => with_opnd!(hi, hi => ct::clip(x, Some(lo), Some(hi)))),
                (Some(lo), None) => with_opnd!(lo, lo => ct::clip(x, Some(lo), None::<f64>)),
                (None, Some(hi)) => with_opnd!(hi, hi => ct::clip(x, None::<f64>, Some(hi))),
                (None, None) => ct::clip(x, None::<f64>, None::<f64>),
            }
        }
        "astype" => x().astype(p.dtype("dtype")),
        "sum" => {
            let (a, k) = axes_kd();
            x().sum(&a, k)
        }
        "prod" => {
            let (a, k) = axes_kd();
            x().prod(&a, k)
        }
        "max" => {
            let (a, k) = axes_kd();
            x().max(&a, k)
        }
        "min" => {
            let (a, k) = axes_kd();
            x().min(&a, k)
        }
        "mean" => {
            let (a, k) = axes_kd();
            x().mean(&a, k)
        }
        "reshape" => x().reshape(&p.isizes("shape")),
        "transpose" => x().transpose(&p.isizes("perm")),
        "broadcast_to" => x().broadcast_to(&p.usizes("shape")),
        "expand_dims" => x().expand_dims(&p.isizes("axes")),
        "squeeze" => x().squeeze(&p.isizes("axes")),
        "moveaxis" => x().moveaxis(p.isize("src"), p.isize("dst")),
        "swapaxes" => x().swapaxes(p.isize("a"), p.isize("b")),
        "flatten" => x().flatten(),
        "arange" => ct::arange(p.f64("start"), p.f64("stop"), p.f64("step"), p.dtype("dtype")),
        "linspace" => ct::linspace(p.f64("start"), p.f64("stop"), p.usize("num"), p.dtype("dtype")),
        "eye" => ct::eye(p.usize("n"), p.usize("m"), p.isize("k"), p.dtype("dtype")),
        "tri" => ct::tri(p.usize("n"), p.usize("m"), p.isize("k"), p.dtype("dtype")),
        "tril" => ct::tril(x(), p.isize("k")),
        "triu" => ct::triu(x(), p.isize("k")),
        "zeros" => ct::zeros(&p.usizes("shape"), p.dtype("dtype")),
        "ones" => ct::ones(&p.usizes("shape"), p.dtype("dtype")),
        "full" => ct::full(&p.usizes("shape"), p.f64("value"), p.dtype("dtype")),
        "all" => {
            let (a, k) = axes_kd();
            x().all(&a, k)
        }
        "any" => {
            let (a, k) = axes_kd();
            x().any(&a, k)
        }
        "var" => {
            let (a, k) = axes_kd();
            x().var(&a, k, p.usize("ddof"))
        }
        "std" => {
            let (a, k) = axes_kd();
            x().std(&a, k, p.usize("ddof"))
        }
        "argmax" => x().argmax(p.isize("axis"), p.bool("keepdims")),
        "argmin" => x().argmin(p.isize("axis"), p.bool("keepdims")),
        "logsumexp" => {
            let (a, k) = axes_kd();
            x().logsumexp(&a, k)
        }
        "softmax" => x().softmax(&p.isizes("axes")),
        "cumsum" => x().cumsum_opts(p.isize("axis"), p.bool("reverse"), p.bool("inclusive")),
        "cumprod" => x().cumprod_opts(p.isize("axis"), p.bool("reverse"), p.bool("inclusive")),
        "take" => ct::take(x(), arr(1), p.isize("axis")),
        "take_along_axis" => ct::take_along_axis(x(), arr(1), p.isize("axis")),
        "put_along_axis" => ct::put_along_axis(x(), arr(1), arr(2), p.isize("axis")),
        "scatter_add_along_axis" => ct::scatter_add_along_axis(x(), arr(1), arr(2), p.isize("axis")),
        "scatter_add" => ct::scatter_add(x(), arr(1), arr(2), p.isize("axis")),
        "one_hot" => ct::one_hot(x(), p.usize("num_classes"), p.dtype("dtype")),
        "slice" => ct::slice(x(), &p.isizes("starts"), &p.isizes("stops"), &p.isizes("steps")),
        "slice_axis" => {
            let opt = |k: &str| match p.get(k) {
                Json::Null => None,
                v => Some(v.int() as isize),
            };
            x().slice_axis(p.isize("axis"), opt("start"), opt("stop"), p.isize("step"))
        }
        "slice_update" => x().slice_update(arr(1), &p.isizes("starts"), &p.isizes("stops"), &p.isizes("steps")),
        "flip" => ct::flip(x(), &p.isizes("axes")),
        "split" => {
            let pieces = match p.0.get("sections") {
                Some(n) => x().split(n.int() as usize, p.isize("axis")),
                None => x().split(p.isizes("indices"), p.isize("axis")),
            };
            pieces[p.usize("piece")].clone()
        }
        "pad" => {
            let w: Vec<(usize, usize)> =
                p.get("widths").arr().iter().map(|w| (w.arr()[0].int() as usize, w.arr()[1].int() as usize)).collect();
            ct::pad(x(), &w, p.f64("value"))
        }
        "tile" => ct::tile(x(), &p.usizes("reps")),
        "repeat" => ct::repeat(x(), p.usize("repeats"), p.isize("axis")),
        "concatenate" => ct::concatenate(&all_arrays(), p.isize("axis")),
        "stack" => ct::stack(&all_arrays(), p.isize("axis")),
        "matmul" => ct::matmul(x(), arr(1)),
        "outer" => ct::outer(x(), arr(1)),
        "tensordot" => match p.get("axes") {
            Json::Arr(v) => {
                let l = |j: &Json| j.arr().iter().map(|v| v.int() as isize).collect::<Vec<_>>();
                ct::tensordot(x(), arr(1), (l(&v[0]), l(&v[1])))
            }
            n => ct::tensordot(x(), arr(1), n.int() as usize),
        },
        "einsum" => ct::einsum(p.get("spec").str(), &all_arrays()),
        _ => return None,
    })
}

/// Exact values of an integer / bool array.
fn int_values(a: &Array) -> ct::Result<Vec<i128>> {
    Ok(match a.dtype() {
        DType::Bool => a.to_vec::<bool>()?.into_iter().map(|v| v as i128).collect(),
        DType::U8 => a.to_vec::<u8>()?.into_iter().map(|v| v as i128).collect(),
        DType::U32 => a.to_vec::<u32>()?.into_iter().map(|v| v as i128).collect(),
        DType::I32 => a.to_vec::<i32>()?.into_iter().map(|v| v as i128).collect(),
        DType::I64 => a.to_vec::<i64>()?.into_iter().map(|v| v as i128).collect(),
        _ => unreachable!(),
    })
}

/// Compare `got` against the expected array; `Err(description)` on mismatch.
fn compare(got: &Array, exp: &Json, rtol: f64, atol: f64) -> Result<(), String> {
    let shape = shape_of(exp.get("shape").unwrap());
    let dt = dtype_of(exp.get("dtype").unwrap().str());
    if got.shape() != shape.as_slice() || got.dtype() != dt {
        return Err(format!("expected shape {shape:?} {dt}, got {:?} {}", got.shape(), got.dtype()));
    }
    let data = exp.get("data").unwrap().arr();
    let mut bad = Vec::new();
    let mut max_err = 0f64;
    if dt.is_float() {
        let g = got.to_f64_vec().map_err(|e| format!("eval error: {e}"))?;
        for (i, (g, e)) in g.iter().zip(data).enumerate() {
            let e = e.f64();
            let ok = if e.is_nan() || g.is_nan() {
                e.is_nan() && g.is_nan()
            } else if e.is_infinite() || g.is_infinite() {
                e == *g
            } else {
                let err = (g - e).abs();
                max_err = max_err.max(err);
                err <= atol + rtol * e.abs()
            };
            if !ok {
                if e.is_nan() || g.is_nan() || e.is_infinite() || g.is_infinite() {
                    max_err = f64::INFINITY;
                }
                bad.push(format!("[{i}] expected {e:e} got {g:e}"));
            }
        }
    } else {
        let g = int_values(got).map_err(|e| format!("eval error: {e}"))?;
        for (i, (g, e)) in g.iter().zip(data).enumerate() {
            let e = e.int();
            if *g != e {
                max_err = max_err.max((*g - e).abs() as f64);
                bad.push(format!("[{i}] expected {e} got {g}"));
            }
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    let n = bad.len();
    bad.truncate(4);
    Err(format!(
        "{n}/{} values differ, max error {max_err:e} (rtol {rtol:e}, atol {atol:e}): {}",
        data.len(),
        bad.join(", ")
    ))
}

fn describe_inputs(inputs: &[Json], pre: Option<&Json>) -> String {
    let mut parts = Vec::new();
    for (i, j) in inputs.iter().enumerate() {
        let mut s = if *j == Json::Null {
            "None".to_string()
        } else if let Some(v) = j.get("scalar") {
            format!("{}:{v}", j.get("kind").unwrap().str())
        } else {
            let data = j.get("data").unwrap().arr();
            let mut s = format!("{}{}", j.get("dtype").unwrap().str(), j.get("shape").unwrap());
            if data.len() <= 6 {
                s += &format!("={}", j.get("data").unwrap());
            }
            s
        };
        if let Some(p) = pre.map(|p| &p.arr()[i]).filter(|p| **p != Json::Null) {
            s += &format!(" .{p}");
        }
        parts.push(s);
    }
    parts.join(", ")
}

/// Seconds one case may take before it is reported as hanging.
const CASE_TIMEOUT_S: u64 = 20;

/// Build the inputs of a case, apply its op and compare. `None`: op not wired.
fn run_case(case: &Json) -> Option<Result<(), String>> {
    let inputs = case.get("inputs").unwrap().arr();
    let pre = case.get("pre");
    let ins: Vec<Option<Opnd>> = inputs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            build_input(j).map(|x| match pre {
                Some(p) => apply_pre(x, &p.arr()[i]),
                None => x,
            })
        })
        .collect();
    let op = case.get("op").unwrap().str();
    apply(op, &ins, &P(case.get("params").unwrap())).map(|y| {
        let rtol = case.get("rtol").unwrap().f64();
        let atol = case.get("atol").unwrap().f64();
        compare(&y, case.get("expected").unwrap(), rtol, atol)
    })
}

#[test]
fn golden_forward_values() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/golden.json");
    let src = std::fs::read_to_string(path).expect("reading golden.json");
    let doc = Json::parse(&src).expect("parsing golden.json");
    let cases = doc.get("cases").expect("cases").arr();
    let verbose = std::env::var("GOLDEN_VERBOSE").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    let mut hung: BTreeMap<String, usize> = BTreeMap::new();
    let mut not_covered: BTreeMap<String, usize> = BTreeMap::new();
    let mut covered: BTreeMap<String, usize> = BTreeMap::new();
    for case in cases {
        let id = case.get("id").unwrap().str();
        let op = case.get("op").unwrap().str();
        let inputs = case.get("inputs").unwrap().arr();
        let pre = case.get("pre");
        let params = case.get("params").unwrap();
        if verbose {
            eprintln!("golden: running {id}");
        }
        let what = || format!("{id} {op}({}) params {params}", describe_inputs(inputs, pre));
        if hung.contains_key(op) {
            *hung.get_mut(op).unwrap() += 1;
            continue;
        }
        // Each case runs on its own thread so that a kernel that never returns is reported
        // (and its op's remaining cases skipped) instead of hanging the whole suite.
        let (tx, rx) = std::sync::mpsc::channel();
        let owned = case.clone();
        std::thread::spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(|| run_case(&owned)));
            let _ = tx.send(r);
        });
        let run = match rx.recv_timeout(std::time::Duration::from_secs(CASE_TIMEOUT_S)) {
            Ok(r) => r,
            Err(_) => {
                *covered.entry(op.to_string()).or_default() += 1;
                failures.push(format!(
                    "{}: did not finish within {CASE_TIMEOUT_S} s (hang?); remaining {op} cases skipped",
                    what()
                ));
                hung.insert(op.to_string(), 0);
                continue;
            }
        };
        match run {
            Ok(None) => *not_covered.entry(op.to_string()).or_default() += 1,
            Ok(Some(r)) => {
                *covered.entry(op.to_string()).or_default() += 1;
                if let Err(e) = r {
                    failures.push(format!("{}: {e}", what()));
                }
            }
            Err(p) => {
                *covered.entry(op.to_string()).or_default() += 1;
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{}: panicked: {msg}", what()));
            }
        }
    }
    let n_cov: usize = covered.values().sum();
    eprintln!("golden: {} cases, {n_cov} run over {} ops, {} failed", cases.len(), covered.len(), failures.len());
    if !not_covered.is_empty() {
        eprintln!(
            "golden: NOT YET COVERED (op not wired in tests/golden.rs / not in the crate): {}",
            not_covered.iter().map(|(k, v)| format!("{k} ({v} cases)")).collect::<Vec<_>>().join(", ")
        );
    }
    for (op, n) in &hung {
        failures.push(format!("{op}: {n} more cases skipped after a hang"));
    }
    let strict = std::env::var("GOLDEN_STRICT").is_ok_and(|v| v == "1");
    assert!(
        failures.is_empty() && (!strict || not_covered.is_empty()),
        "{} of {n_cov} golden cases failed:\n{}\nnot yet covered: {:?}",
        failures.len(),
        failures.join("\n"),
        not_covered
    );
}
