//! Random programs: a list of nodes (inputs and ops over earlier nodes, the last node is the
//! output), a plan of transforms wrapped around segments of it, the generator, and the two
//! interpreters — cotangent (`build`) and the `f64` reference (`reference`).
use super::reference::{self as r, Tensor};
use super::Rng;
use cotangent::{self as ct, Array, DType, Result};
use std::fmt::Write as _;
use std::sync::Arc;

/// Element-wise unary ops. `LogPos` and `SqrtPos` are `log(x² + ½)` and `sqrt(x² + ½)`, so
/// their inputs are positive and their derivatives smooth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Un {
    Exp,
    LogPos,
    Sin,
    Tanh,
    Sigmoid,
    SqrtPos,
    Neg,
    Square,
    Abs,
}

/// Element-wise binary ops with broadcasting. `DivPos` is `a / (b² + ½)` (a divisor away from
/// zero).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    DivPos,
    Maximum,
}

/// Reductions over axes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Red {
    Sum,
    Mean,
    Max,
    LogSumExp,
}

/// One node: an input or an op over earlier nodes (by index).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Input `k` of the program.
    Input(usize),
    Unary(Un, usize),
    Binary(Bin, usize, usize),
    /// `(op, x, axes, keepdims)`
    Reduce(Red, usize, Vec<isize>, bool),
    Softmax(usize, Vec<isize>),
    Reshape(usize, Vec<isize>),
    Transpose(usize, Vec<isize>),
    /// Per axis `[start, stop, step]` (numpy slicing; fewer entries than axes take the rest whole).
    Slice(usize, Vec<[isize; 3]>),
    BroadcastTo(usize, Vec<usize>),
    Concat(Vec<usize>, isize),
    Matmul(usize, usize),
    /// `select(c > threshold, a, b)`: `(c, threshold, a, b)`.
    Select(usize, f64, usize, usize),
}

/// How an input array is laid out in memory: the values are the same, the strides differ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    Contiguous,
    /// A transposed view of a buffer holding the transpose.
    Transposed,
    /// Every other element of a buffer with a doubled last axis.
    Strided,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
    pub layout: Layout,
}

/// Floats (every op) or integers (the ops defined on them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Class {
    Float,
    Int,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub shape: Vec<usize>,
}

/// A program; its output is the last node.
#[derive(Clone, Debug, PartialEq)]
pub struct Prog {
    pub class: Class,
    pub inputs: Vec<Input>,
    pub nodes: Vec<Node>,
}

/// A transform wrapped around the nodes `start..end` as one function of the values they use
/// from before (and the inputs among them) to the values used after.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wrap {
    Checkpoint,
    /// Custom function whose VJP rule (`.vjp`, three arguments) is `ct::vjp` of the segment.
    CustomVjp,
    /// The same rule given through `.vjp_no_outputs`.
    CustomVjpNoOutputs,
    /// Custom function with only a JVP rule (`ct::jvp` of the segment): the VJP falls back.
    CustomJvp,
    /// Custom function with both rules.
    CustomBoth,
    /// Custom function without rules: every transform falls back to the forward.
    CustomNone,
    /// `depends(outputs, inputs)` after the segment: identity on values.
    Depends,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub start: usize,
    pub end: usize,
    pub wrap: Wrap,
    pub inner: Vec<Segment>,
}

impl Op {
    /// The nodes this op reads.
    pub fn args(&self) -> Vec<usize> {
        match self {
            Op::Input(_) => vec![],
            Op::Unary(_, x)
            | Op::Reduce(_, x, ..)
            | Op::Softmax(x, _)
            | Op::Reshape(x, _)
            | Op::Transpose(x, _)
            | Op::Slice(x, _)
            | Op::BroadcastTo(x, _) => vec![*x],
            Op::Binary(_, a, b) | Op::Matmul(a, b) => vec![*a, *b],
            Op::Concat(xs, _) => xs.clone(),
            Op::Select(c, _, a, b) => vec![*c, *a, *b],
        }
    }

    /// The op with its arguments renamed by `f`.
    pub fn rename(&self, f: impl Fn(usize) -> usize) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Input(_) => {}
            Op::Unary(_, x)
            | Op::Reduce(_, x, ..)
            | Op::Softmax(x, _)
            | Op::Reshape(x, _)
            | Op::Transpose(x, _)
            | Op::Slice(x, _)
            | Op::BroadcastTo(x, _) => *x = f(*x),
            Op::Binary(_, a, b) | Op::Matmul(a, b) => {
                *a = f(*a);
                *b = f(*b);
            }
            Op::Concat(xs, _) => xs.iter_mut().for_each(|x| *x = f(*x)),
            Op::Select(c, _, a, b) => {
                *c = f(*c);
                *a = f(*a);
                *b = f(*b);
            }
        }
        op
    }
}

// ----- cotangent -------------------------------------------------------------------------

/// `data` (row-major values of `shape`) as an array of `dtype` laid out as `layout`.
pub fn make_array(shape: &[usize], data: &[f64], layout: Layout, dtype: DType) -> Array {
    let t = Tensor::new(shape, data.to_vec());
    let nd = shape.len();
    match layout {
        Layout::Transposed if nd >= 2 => {
            let rev: Vec<usize> = (0..nd).rev().collect();
            let stored = t.transpose(&rev);
            let perm: Vec<isize> = (0..nd as isize).rev().collect();
            Array::from_vec(stored.data, &stored.shape).astype(dtype).transpose(&perm)
        }
        Layout::Strided if nd >= 1 => {
            // interleave junk after every element of the last axis, then take every other one
            let mut wide = shape.to_vec();
            wide[nd - 1] *= 2;
            let data: Vec<f64> = t.data.iter().flat_map(|&v| [v, 7.5]).collect();
            let starts = vec![0; nd];
            let stops = vec![isize::MAX; nd];
            let mut steps = vec![1; nd];
            steps[nd - 1] = 2;
            Array::from_vec(data, &wide).astype(dtype).slice(&starts, &stops, &steps)
        }
        _ => Array::from_vec(t.data, shape).astype(dtype),
    }
}

/// Compute node `i` with cotangent from the values of its arguments in `env`.
fn build_node(prog: &Prog, env: &[Option<Array>], i: usize) -> Array {
    let v = |k: usize| env[k].clone().expect("argument computed");
    match &prog.nodes[i].op {
        Op::Input(_) => unreachable!("inputs are set before"),
        Op::Unary(u, x) => {
            let x = v(*x);
            match u {
                Un::Exp => x.exp(),
                Un::LogPos => (x.square() + 0.5).log(),
                Un::Sin => x.sin(),
                Un::Tanh => x.tanh(),
                Un::Sigmoid => x.sigmoid(),
                Un::SqrtPos => (x.square() + 0.5).sqrt(),
                Un::Neg => -&x,
                Un::Square => x.square(),
                Un::Abs => x.abs(),
            }
        }
        Op::Binary(b, x, y) => {
            let (x, y) = (v(*x), v(*y));
            match b {
                Bin::Add => &x + &y,
                Bin::Sub => &x - &y,
                Bin::Mul => &x * &y,
                Bin::DivPos => &x / (y.square() + 0.5),
                Bin::Maximum => x.maximum(&y),
            }
        }
        Op::Reduce(op, x, axes, keep) => {
            let x = v(*x);
            match op {
                Red::Sum => x.sum(axes, *keep),
                Red::Mean => x.mean(axes, *keep),
                Red::Max => x.max(axes, *keep),
                Red::LogSumExp => x.logsumexp(axes, *keep),
            }
        }
        Op::Softmax(x, axes) => v(*x).softmax(axes),
        Op::Reshape(x, s) => v(*x).reshape(s),
        Op::Transpose(x, p) => v(*x).transpose(p),
        Op::Slice(x, s) => {
            let (st, sp, step): (Vec<isize>, Vec<isize>, Vec<isize>) =
                (s.iter().map(|e| e[0]).collect(), s.iter().map(|e| e[1]).collect(), s.iter().map(|e| e[2]).collect());
            v(*x).slice(&st, &sp, &step)
        }
        Op::BroadcastTo(x, s) => v(*x).broadcast_to(s),
        Op::Concat(xs, axis) => ct::concatenate(&xs.iter().map(|&k| v(k)).collect::<Vec<_>>(), *axis),
        Op::Matmul(a, b) => v(*a).matmul(&v(*b)),
        Op::Select(c, thr, a, b) => {
            let c = v(*c);
            let cond = if c.dtype().is_float() { c.greater(*thr) } else { c.greater(*thr as i64) };
            ct::select(&cond, v(*a), v(*b))
        }
    }
}

/// The nodes a segment reads from outside (earlier nodes and the inputs inside it) and the
/// nodes it computes that are read after it (or are the output).
pub fn live(prog: &Prog, start: usize, end: usize) -> (Vec<usize>, Vec<usize>) {
    let mut ins = Vec::new();
    for i in start..end {
        if matches!(prog.nodes[i].op, Op::Input(_)) {
            ins.push(i);
        }
        for a in prog.nodes[i].op.args() {
            if a < start && !ins.contains(&a) {
                ins.push(a);
            }
        }
    }
    ins.sort_unstable();
    let n = prog.nodes.len();
    let outs =
        (start..end).filter(|&i| i == n - 1 || prog.nodes[end..].iter().any(|nd| nd.op.args().contains(&i))).collect();
    (ins, outs)
}

/// Compute nodes `start..end` into `env`, wrapping the segments of `plan` (which lie inside).
fn build_range(prog: &Arc<Prog>, env: &mut [Option<Array>], start: usize, end: usize, plan: &[Segment]) -> Result<()> {
    let mut i = start;
    while i < end {
        if let Some(seg) = plan.iter().find(|s| s.start == i) {
            build_segment(prog, env, seg)?;
            i = seg.end;
            continue;
        }
        if env[i].is_none() {
            env[i] = Some(build_node(prog, env, i));
        }
        i += 1;
    }
    Ok(())
}

/// The segment as a function of its live inputs to its live outputs.
fn segment_fn(
    prog: &Arc<Prog>,
    seg: &Segment,
) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static {
    let (ins, outs) = live(prog, seg.start, seg.end);
    let (prog, seg) = (prog.clone(), seg.clone());
    move |xs: &[Array]| {
        let mut env = vec![None; prog.nodes.len()];
        for (&k, x) in ins.iter().zip(xs) {
            env[k] = Some(x.clone());
        }
        build_range(&prog, &mut env, seg.start, seg.end, &seg.inner)?;
        Ok(outs.iter().map(|&k| env[k].clone().unwrap()).collect())
    }
}

fn build_segment(prog: &Arc<Prog>, env: &mut [Option<Array>], seg: &Segment) -> Result<()> {
    let (ins, outs) = live(prog, seg.start, seg.end);
    if outs.is_empty() {
        // nothing of it is used: no function to wrap
        return build_range(prog, env, seg.start, seg.end, &seg.inner);
    }
    let args: Vec<Array> = ins.iter().map(|&k| env[k].clone().expect("live input computed")).collect();
    let f = segment_fn(prog, seg);
    let (fv, fj) = (f.clone(), f.clone());
    let vjp_rule = move |p: &[Array], c: &[Array]| ct::vjp(fv.clone(), p, c).map(|(_, v)| v);
    let jvp_rule = move |p: &[Array], t: &[Array]| ct::jvp(fj.clone(), p, t).map(|(_, v)| v);
    let results = match seg.wrap {
        Wrap::Checkpoint => ct::checkpoint(f)(&args)?,
        Wrap::CustomVjp => ct::custom_function(f).vjp(move |p, c, _o| vjp_rule(p, c)).build()(&args)?,
        Wrap::CustomVjpNoOutputs => ct::custom_function(f).vjp_no_outputs(vjp_rule).build()(&args)?,
        Wrap::CustomJvp => ct::custom_function(f).jvp(jvp_rule).build()(&args)?,
        Wrap::CustomBoth => ct::custom_function(f).vjp(move |p, c, _o| vjp_rule(p, c)).jvp(jvp_rule).build()(&args)?,
        Wrap::CustomNone => ct::custom_function(f).build()(&args)?,
        Wrap::Depends => ct::depends(&f(&args)?, &args),
    };
    for (&k, y) in outs.iter().zip(results) {
        env[k] = Some(y);
    }
    Ok(())
}

/// The program's output computed by cotangent from `inputs` (one array per program input),
/// with the segments of `plan` wrapped.
pub fn build(prog: &Arc<Prog>, inputs: &[Array], plan: &[Segment]) -> Result<Array> {
    let mut env = vec![None; prog.nodes.len()];
    for (i, n) in prog.nodes.iter().enumerate() {
        if let Op::Input(k) = n.op {
            env[i] = Some(inputs[k].clone());
        }
    }
    build_range(prog, &mut env, 0, prog.nodes.len(), plan)?;
    Ok(env.pop().unwrap().unwrap())
}

// ----- the reference ---------------------------------------------------------------------

/// What the reference learns besides the values: the largest magnitude of any node (to avoid
/// comparing values a narrow dtype overflows on) and the smallest distance of a `select`
/// condition from its threshold (to avoid comparing where rounding may flip a branch).
#[derive(Clone, Debug)]
pub struct RefRun {
    pub nodes: Vec<Tensor>,
    pub max_abs: f64,
    pub min_margin: f64,
    /// The smallest distance of any argument from a kink (a `maximum` tie, `abs` at 0, the
    /// top two of a `max` group, a `select` threshold): finite differences with a larger step
    /// may straddle it.
    pub min_kink: f64,
    /// The largest argument of `sin`: past [`CHAOTIC_SIN`] an argument's own rounding moves the
    /// result by more than the transforms' comparisons allow (see `chaotic`).
    pub max_sin_arg: f64,
}

/// `|x|` from which `sin(x)` counts as chaotic: the rounding of `x` alone (`|x|·2^-53`) then moves
/// `sin` and `cos` by more than 1e-12, so two correct evaluations that round `x` differently (a
/// sum in another order under vmap) disagree beyond the 1e-11 relative tolerance of the
/// transform checks.
pub const CHAOTIC_SIN: f64 = 1e4;

impl RefRun {
    /// Whether some `sin` argument is past [`CHAOTIC_SIN`].
    pub fn chaotic(&self) -> bool {
        self.max_sin_arg > CHAOTIC_SIN
    }
    pub fn output(&self) -> &Tensor {
        self.nodes.last().unwrap()
    }
    /// Whether every node is finite (gradients are only compared there).
    pub fn all_finite(&self) -> bool {
        self.nodes.iter().all(|t| t.data.iter().all(|v| v.is_finite()))
    }
}

/// `1 + r·u` with `|r|` uniform in `[¼, 1]` and a random sign when `noise` is on, else 1.
/// (Random magnitudes: two sources of rounding of equal size and opposite signs would
/// otherwise cancel in a whole run.)
fn wobble(noise: &mut Option<(&mut Rng, f64)>) -> f64 {
    match noise {
        Some((rng, u)) => {
            let r = rng.uniform(0.25, 1.0);
            if rng.chance(0.5) {
                1.0 + r * *u
            } else {
                1.0 - r * *u
            }
        }
        None => 1.0,
    }
}

/// Add `±r·u·mag[i]` to every finite element (a rounding error of size `mag` in units of `u`).
/// An infinite or NaN value has no rounding error, and an infinite `mag` (a sum with an infinite
/// term) would turn a finite or infinite value into NaN (`inf - inf`), so those stay as they are
/// (fuzzer finding: `x.sum(&[], true)` of an input holding ±inf became NaN in every noisy run, so
/// its row of a later product had no deviation and the tolerance collapsed to nothing).
fn add_noise(t: &mut Tensor, mag: &Tensor, noise: &mut Option<(&mut Rng, f64)>) {
    for (v, m) in t.data.iter_mut().zip(&mag.data) {
        let push = (wobble(noise) - 1.0) * m;
        if v.is_finite() && push.is_finite() {
            *v += push;
        }
    }
}

/// A unary op on one value; `inner` multiplies the intermediate `x² + ½` of the composite
/// ops (the rounding of that value in a run with noise).
fn unary_ref(u: Un, v: f64, inner: f64) -> f64 {
    match u {
        Un::Exp => v.exp(),
        Un::LogPos => ((v * v + 0.5) * inner).ln(),
        Un::Sin => v.sin(),
        Un::Tanh => v.tanh(),
        Un::Sigmoid => 1.0 / (1.0 + (-v).exp()),
        Un::SqrtPos => ((v * v + 0.5) * inner).sqrt(),
        Un::Neg => -v,
        Un::Square => v * v,
        Un::Abs => v.abs(),
    }
}

/// Evaluate the program in `f64`. With `noise = Some((rng, u))`, every node's values (the
/// inputs' too, standing for the rounding of the terms an op sums) are multiplied by
/// `1 + r·u` (see [`wobble`]): a run that models rounding to a unit roundoff `u`,
/// whose distance from the exact run estimates how sensitive the output is to rounding.
pub fn reference(prog: &Prog, inputs: &[Tensor], mut noise: Option<(&mut Rng, f64)>) -> RefRun {
    let mut nodes: Vec<Tensor> = Vec::with_capacity(prog.nodes.len());
    let mut min_margin = f64::INFINITY;
    let mut min_kink = f64::INFINITY;
    // `x² + ½` inside `log_pos` and `div_pos` is a value of its own in cotangent (square, add),
    // which can overflow a narrow dtype though no node here does: it counts for `max_abs`
    let mut hidden_max = 0.0f64;
    let mut max_sin_arg = 0.0f64;
    let mut kink = |d: f64| {
        if d.is_finite() {
            min_kink = min_kink.min(d.abs());
        }
    };
    for node in &prog.nodes {
        let a = |k: usize| &nodes[k];
        let mut t = match &node.op {
            Op::Input(k) => inputs[*k].clone(),
            Op::Unary(u, x) => {
                let mut t = a(*x).clone();
                if *u == Un::Abs {
                    t.data.iter().for_each(|&v| kink(v));
                }
                if *u == Un::Sin {
                    max_sin_arg = t.data.iter().filter(|v| v.is_finite()).fold(max_sin_arg, |m, v| m.max(v.abs()));
                }
                if *u == Un::LogPos {
                    hidden_max = t.data.iter().filter(|v| v.is_finite()).fold(hidden_max, |m, &v| m.max(v * v + 0.5));
                }
                for v in &mut t.data {
                    *v = unary_ref(*u, *v, wobble(&mut noise));
                }
                t
            }
            Op::Binary(b, x, y) => {
                if *b == Bin::Maximum {
                    a(*x).zip(a(*y), |p, q| p - q).data.iter().for_each(|&d| kink(d));
                }
                let mut q = a(*y).clone();
                if *b == Bin::DivPos {
                    // the divisor q² + ½ is a value of its own, rounded before dividing
                    for v in &mut q.data {
                        *v = (*v * *v + 0.5) * wobble(&mut noise);
                    }
                    hidden_max = q.data.iter().filter(|v| v.is_finite()).fold(hidden_max, |m, &v| m.max(v));
                }
                a(*x).zip(
                    &q,
                    match b {
                        Bin::Add => |p: f64, q: f64| p + q,
                        Bin::Sub => |p: f64, q: f64| p - q,
                        Bin::Mul => |p: f64, q: f64| p * q,
                        Bin::DivPos => |p: f64, d: f64| p / d,
                        Bin::Maximum => r::max_nan,
                    },
                )
            }
            Op::Reduce(op, x, axes, keep) => {
                let x = a(*x);
                let ax: Vec<usize> = axes.iter().map(|&v| r::norm_axis(v, x.shape.len())).collect();
                if *op == Red::Max {
                    x.reduce_keepdims(&ax, |g| {
                        let mut v = g.to_vec();
                        v.sort_by(|a, b| b.total_cmp(a));
                        if v.len() > 1 {
                            v[0] - v[1]
                        } else {
                            f64::INFINITY
                        }
                    })
                    .data
                    .iter()
                    .for_each(|&d| kink(d));
                }
                let mut red = x.reduce_keepdims(&ax, |g: &[f64]| match op {
                    Red::Sum => g.iter().sum(),
                    Red::Mean => g.iter().sum::<f64>() / g.len() as f64,
                    Red::Max => r::group_max(g),
                    Red::LogSumExp => r::group_logsumexp(g),
                });
                if noise.is_some() && *op != Red::Max {
                    // a sum of n terms rounds up to ~log2(n) times, relative to Σ|terms|
                    // (the logarithm of a sum: relative to 1)
                    let n: usize = ax.iter().map(|&a| x.shape[a]).product();
                    let k = (n as f64 + 1.0).log2();
                    let mag = match op {
                        Red::LogSumExp => red.map(|_| k),
                        Red::Mean => x.map(f64::abs).reduce_keepdims(&ax, |g| k * g.iter().sum::<f64>() / n as f64),
                        _ => x.map(f64::abs).reduce_keepdims(&ax, |g| k * g.iter().sum::<f64>()),
                    };
                    add_noise(&mut red, &mag, &mut noise);
                }
                if *keep {
                    red
                } else {
                    red.squeeze_axes(&ax)
                }
            }
            Op::Softmax(x, axes) => {
                let x = a(*x);
                let ax: Vec<usize> = axes.iter().map(|&v| r::norm_axis(v, x.shape.len())).collect();
                if ax.is_empty() {
                    x.map(|_| 1.0)
                } else {
                    x.map_groups(&ax, r::group_softmax)
                }
            }
            Op::Reshape(x, _) => a(*x).reshape(&node.shape),
            Op::BroadcastTo(x, s) => a(*x).broadcast_to(s),
            Op::Transpose(x, p) => {
                let x = a(*x);
                x.transpose(&p.iter().map(|&v| r::norm_axis(v, x.shape.len())).collect::<Vec<_>>())
            }
            Op::Slice(x, s) => {
                let x = a(*x);
                let pos: Vec<Vec<usize>> = (0..x.shape.len())
                    .map(|i| match s.get(i) {
                        Some(&[b, e, st]) => r::slice_positions(x.shape[i], b, e, st),
                        None => (0..x.shape[i]).collect(),
                    })
                    .collect();
                x.gather_axes(&pos)
            }
            Op::Concat(xs, axis) => {
                let ts: Vec<Tensor> = xs.iter().map(|&k| a(k).clone()).collect();
                Tensor::concatenate(&ts, r::norm_axis(*axis, ts[0].shape.len()))
            }
            Op::Matmul(x, y) => {
                let mut t = a(*x).matmul(a(*y));
                if noise.is_some() {
                    // rounding of the k-term inner products, relative to Σ|a b|
                    let k = a(*x).shape.last().map_or(1.0, |&k| (k as f64 + 1.0).log2());
                    let mag = a(*x).map(|v| k * v.abs()).matmul(&a(*y).map(f64::abs));
                    add_noise(&mut t, &mag, &mut noise);
                }
                t
            }
            Op::Select(c, thr, x, y) => {
                for &v in &a(*c).data {
                    if v.is_finite() {
                        min_margin = min_margin.min((v - thr).abs());
                        kink(v - thr);
                    }
                }
                let cond = a(*c).map(|v| if v > *thr { 1.0 } else { 0.0 });
                Tensor::select(&cond, a(*x), a(*y))
            }
        };
        assert_eq!(t.shape, node.shape, "reference: shape of {:?}", node.op);
        if noise.is_some() {
            for v in &mut t.data {
                *v *= wobble(&mut noise);
            }
        }
        nodes.push(t);
    }
    let max_abs =
        nodes.iter().flat_map(|t| t.data.iter()).filter(|v| v.is_finite()).fold(hidden_max, |m, v| m.max(v.abs()));
    RefRun { nodes, max_abs, min_margin, min_kink, max_sin_arg }
}

// ----- printing --------------------------------------------------------------------------

fn rust_unary(u: Un, x: &str) -> String {
    match u {
        Un::Exp => format!("{x}.exp()"),
        Un::LogPos => format!("({x}.square() + 0.5).log()"),
        Un::Sin => format!("{x}.sin()"),
        Un::Tanh => format!("{x}.tanh()"),
        Un::Sigmoid => format!("{x}.sigmoid()"),
        Un::SqrtPos => format!("({x}.square() + 0.5).sqrt()"),
        Un::Neg => format!("-&{x}"),
        Un::Square => format!("{x}.square()"),
        Un::Abs => format!("{x}.abs()"),
    }
}

impl Prog {
    /// The program as Rust code over cotangent (`v0`, `v1`, … with inputs `x[k]`), one line
    /// per node with its shape: what a reproduction or a regression test starts from.
    pub fn to_rust(&self) -> String {
        let mut s = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let v = |k: &usize| format!("v{k}");
            let e = match &n.op {
                Op::Input(k) => format!("x[{k}].clone()"),
                Op::Unary(u, x) => rust_unary(*u, &v(x)),
                Op::Binary(b, x, y) => match b {
                    Bin::Add => format!("&v{x} + &v{y}"),
                    Bin::Sub => format!("&v{x} - &v{y}"),
                    Bin::Mul => format!("&v{x} * &v{y}"),
                    Bin::DivPos => format!("&v{x} / (v{y}.square() + 0.5)"),
                    Bin::Maximum => format!("v{x}.maximum(&v{y})"),
                },
                Op::Reduce(op, x, axes, keep) => {
                    let name = match op {
                        Red::Sum => "sum",
                        Red::Mean => "mean",
                        Red::Max => "max",
                        Red::LogSumExp => "logsumexp",
                    };
                    format!("v{x}.{name}(&{axes:?}, {keep})")
                }
                Op::Softmax(x, axes) => format!("v{x}.softmax(&{axes:?})"),
                Op::Reshape(x, sh) => format!("v{x}.reshape(&{sh:?})"),
                Op::Transpose(x, p) => format!("v{x}.transpose(&{p:?})"),
                Op::Slice(x, sl) => {
                    let col = |j: usize| format!("{:?}", sl.iter().map(|e| e[j]).collect::<Vec<_>>());
                    format!("v{x}.slice(&{}, &{}, &{})", col(0), col(1), col(2))
                }
                Op::BroadcastTo(x, sh) => format!("v{x}.broadcast_to(&{sh:?})"),
                Op::Concat(xs, axis) => {
                    let list: Vec<String> = xs.iter().map(|k| format!("v{k}.clone()")).collect();
                    format!("ct::concatenate(&[{}], {axis})", list.join(", "))
                }
                Op::Matmul(x, y) => format!("v{x}.matmul(&v{y})"),
                Op::Select(c, thr, x, y) => {
                    let thr = if self.class == Class::Int { format!("{}i64", *thr as i64) } else { format!("{thr:?}") };
                    format!("ct::select(&v{c}.greater({thr}), &v{x}, &v{y})")
                }
            };
            let _ = writeln!(s, "let v{i} = {e}; // {:?}", n.shape);
        }
        s
    }

    /// The inputs as Rust code: `let x = [make(...), ...]` with their values and layouts.
    pub fn inputs_rust(&self) -> String {
        let mut s = String::from("let x = [\n");
        for inp in &self.inputs {
            let _ = writeln!(s, "    /* {:?} */ Array::from_vec(vec!{:?}, &{:?}),", inp.layout, inp.data, inp.shape);
        }
        s.push_str("];\n");
        s
    }
}

// ----- generation ------------------------------------------------------------------------

/// Limits of generated programs.
#[derive(Clone, Copy, Debug)]
pub struct GenLimits {
    /// Ops (not counting inputs) per program.
    pub max_ops: usize,
    /// Elements per node.
    pub max_size: usize,
    /// The largest extent of an axis.
    pub max_dim: usize,
}

impl Default for GenLimits {
    fn default() -> Self {
        GenLimits { max_ops: 8, max_size: 256, max_dim: 24 }
    }
}

/// An extent: 0 (rarely), 1 (often: broadcasting edges), mostly 2..=4, sometimes up to
/// `max_dim` (rows long enough for the kernels' row paths).
fn gen_dim(rng: &mut Rng, max_dim: usize) -> usize {
    match rng.below(20) {
        0 => 0,
        1..=5 => 1,
        6..=16 => 2 + rng.below(3),
        _ => 2 + rng.below(max_dim.max(2) - 1),
    }
}

fn gen_shape(rng: &mut Rng, max_dim: usize) -> Vec<usize> {
    let rank = [0, 1, 1, 2, 2, 2, 3, 3, 4][rng.below(9)];
    (0..rank).map(|_| gen_dim(rng, max_dim)).collect()
}

/// An axis of `nd` axes, negative half the time.
fn gen_axis(rng: &mut Rng, nd: usize) -> isize {
    let a = rng.below(nd) as isize;
    if rng.chance(0.5) {
        a - nd as isize
    } else {
        a
    }
}

/// A random subset of the axes (negative half the time), in random order.
fn gen_axes(rng: &mut Rng, nd: usize) -> Vec<isize> {
    let mut axes: Vec<isize> = (0..nd).filter(|_| rng.chance(0.5)).map(|a| a as isize).collect();
    rng.shuffle(&mut axes);
    axes.iter().map(|&a| if rng.chance(0.5) { a - nd as isize } else { a }).collect()
}

struct Gen<'a> {
    rng: &'a mut Rng,
    prog: Prog,
    lim: GenLimits,
}

impl Gen<'_> {
    fn shape(&self, k: usize) -> &[usize] {
        &self.prog.nodes[k].shape
    }

    /// A new input node of `shape`.
    fn input(&mut self, shape: Vec<usize>) -> usize {
        let n: usize = shape.iter().product();
        let data: Vec<f64> = match self.prog.class {
            Class::Float => (0..n).map(|_| self.rng.uniform(-1.5, 1.5)).collect(),
            Class::Int => (0..n).map(|_| self.rng.below(7) as f64 - 3.0).collect(),
        };
        let layout = [Layout::Contiguous, Layout::Contiguous, Layout::Transposed, Layout::Strided][self.rng.below(4)];
        self.prog.inputs.push(Input { shape: shape.clone(), data, layout });
        self.push(Op::Input(self.prog.inputs.len() - 1), shape)
    }

    fn push(&mut self, op: Op, shape: Vec<usize>) -> usize {
        self.prog.nodes.push(Node { op, shape });
        self.prog.nodes.len() - 1
    }

    /// An operand: the latest node half the time (so most nodes are used), else any.
    fn pick(&mut self) -> usize {
        let n = self.prog.nodes.len();
        if self.rng.chance(0.5) {
            n - 1
        } else {
            self.rng.below(n)
        }
    }

    /// A second operand broadcasting against `x`: an existing node or a new input whose shape
    /// is a suffix of `x`'s with some extents set to 1 (or with extra leading axes).
    fn partner(&mut self, x: usize) -> usize {
        let xs = self.shape(x).to_vec();
        if self.rng.chance(0.4) {
            let cands: Vec<usize> = (0..self.prog.nodes.len())
                .filter(|&k| k != x && r::broadcast_shapes(&xs, self.shape(k)).is_some())
                .collect();
            if !cands.is_empty() {
                return cands[self.rng.below(cands.len())];
            }
        }
        let mut s: Vec<usize> = xs[self.rng.below(xs.len() + 1)..].to_vec();
        for d in s.iter_mut() {
            if self.rng.chance(0.3) {
                *d = 1;
            }
        }
        if self.rng.chance(0.15) {
            s.insert(0, 1 + self.rng.below(3));
        }
        self.input(s)
    }

    /// Try to add one random op reading `x`; `None` if the choice does not apply.
    fn op(&mut self, x: usize) -> Option<(Op, Vec<usize>)> {
        let xs = self.shape(x).to_vec();
        let nd = xs.len();
        let int = self.prog.class == Class::Int;
        let size: usize = xs.iter().product();
        Some(match self.rng.below(14) {
            0 | 1 => {
                let all =
                    [Un::Exp, Un::LogPos, Un::Sin, Un::Tanh, Un::Sigmoid, Un::SqrtPos, Un::Neg, Un::Square, Un::Abs];
                let ints = [Un::Neg, Un::Square, Un::Abs];
                let u = if int { ints[self.rng.below(3)] } else { all[self.rng.below(all.len())] };
                (Op::Unary(u, x), xs)
            }
            2 | 3 => {
                let all = [Bin::Add, Bin::Sub, Bin::Mul, Bin::DivPos, Bin::Maximum];
                let ints = [Bin::Add, Bin::Sub, Bin::Mul, Bin::Maximum];
                let b = if int { ints[self.rng.below(4)] } else { all[self.rng.below(5)] };
                let y = self.partner(x);
                let shape = r::broadcast_shapes(&xs, self.shape(y))?;
                let (a, c) = if self.rng.chance(0.5) { (x, y) } else { (y, x) };
                (Op::Binary(b, a, c), shape)
            }
            4 | 5 => {
                let op = if int {
                    [Red::Sum, Red::Max][self.rng.below(2)]
                } else {
                    [Red::Sum, Red::Mean, Red::Max, Red::LogSumExp][self.rng.below(4)]
                };
                let axes = gen_axes(self.rng, nd);
                let ax: Vec<usize> = axes.iter().map(|&a| r::norm_axis(a, nd)).collect();
                if op == Red::Max && ax.iter().any(|&a| xs[a] == 0) {
                    return None;
                }
                let keep = self.rng.chance(0.5);
                let shape = (0..nd)
                    .filter_map(|i| {
                        if !ax.contains(&i) {
                            Some(xs[i])
                        } else if keep {
                            Some(1)
                        } else {
                            None
                        }
                    })
                    .collect();
                (Op::Reduce(op, x, axes, keep), shape)
            }
            6 if !int => (Op::Softmax(x, gen_axes(self.rng, nd)), xs),
            7 => {
                let shape = self.reshape_target(&xs);
                let mut spec: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
                if size > 0 && !spec.is_empty() && self.rng.chance(0.3) {
                    let i = self.rng.below(spec.len());
                    spec[i] = -1;
                }
                (Op::Reshape(x, spec), shape)
            }
            8 => {
                let mut perm: Vec<usize> = (0..nd).collect();
                self.rng.shuffle(&mut perm);
                let shape = perm.iter().map(|&p| xs[p]).collect();
                let spec = perm
                    .iter()
                    .map(|&p| if self.rng.chance(0.5) { p as isize - nd as isize } else { p as isize })
                    .collect();
                (Op::Transpose(x, spec), shape)
            }
            9 => {
                let k = self.rng.below(nd + 1);
                let mut spec = Vec::new();
                let mut shape = xs.clone();
                for (i, &n) in xs.iter().enumerate().take(k) {
                    let n = n as isize;
                    let step = [1, 1, 2, -1, -2, 3][self.rng.below(6)];
                    let bound = |rng: &mut Rng| rng.below(2 * n as usize + 3) as isize - n - 1;
                    let b = bound(self.rng);
                    // an open end half of the time at the far side (numpy's `x[b::step]`)
                    let e = match self.rng.below(4) {
                        0 if step > 0 => isize::MAX,
                        0 => isize::MIN,
                        _ => bound(self.rng),
                    };
                    spec.push([b, e, step]);
                    shape[i] = r::slice_positions(n as usize, b, e, step).len();
                }
                (Op::Slice(x, spec), shape)
            }
            10 => {
                let mut shape: Vec<usize> = xs
                    .iter()
                    .map(|&d| if d == 1 && self.rng.chance(0.6) { gen_dim(self.rng, self.lim.max_dim) } else { d })
                    .collect();
                for _ in 0..self.rng.below(3) {
                    shape.insert(0, gen_dim(self.rng, self.lim.max_dim));
                }
                (Op::BroadcastTo(x, shape.clone()), shape)
            }
            11 if nd >= 1 => {
                let axis = gen_axis(self.rng, nd);
                let a = r::norm_axis(axis, nd);
                let mut parts = vec![x];
                for _ in 0..1 + self.rng.below(2) {
                    if self.rng.chance(0.3) {
                        parts.push(x);
                    } else {
                        let mut s = xs.clone();
                        s[a] = self.rng.below(4);
                        parts.push(self.input(s));
                    }
                }
                self.rng.shuffle(&mut parts);
                let mut shape = xs.clone();
                shape[a] = parts.iter().map(|&p| self.shape(p)[a]).sum();
                (Op::Concat(parts, axis), shape)
            }
            12 if nd >= 1 => {
                let k = xs[nd - 1];
                let n = gen_dim(self.rng, self.lim.max_dim).max(1);
                let ys: Vec<usize> = match self.rng.below(4) {
                    0 => vec![k],
                    1 => vec![k, n],
                    _ => {
                        let batch: Vec<usize> = if nd >= 2 { xs[..nd - 2].to_vec() } else { vec![] };
                        let from = self.rng.below(batch.len() + 1);
                        let mut b: Vec<usize> =
                            batch[from..].iter().map(|&d| if self.rng.chance(0.3) { 1 } else { d }).collect();
                        if from == 0 && self.rng.chance(0.3) {
                            b.insert(0, 1 + self.rng.below(2));
                        }
                        b.extend([k, n]);
                        b
                    }
                };
                let y = self.input(ys.clone());
                let (xb, yb) = (&xs[..nd.saturating_sub(2)], &ys[..ys.len().saturating_sub(2)]);
                let mut shape = r::broadcast_shapes(xb, yb)?;
                if nd >= 2 {
                    shape.push(xs[nd - 2]);
                }
                if ys.len() >= 2 {
                    shape.push(n);
                }
                (Op::Matmul(x, y), shape)
            }
            13 => {
                let c = if self.rng.chance(0.6) { x } else { self.partner(x) };
                let b = self.partner(x);
                let thr = if int { self.rng.below(3) as f64 - 1.0 } else { self.rng.uniform(-0.5, 0.5) };
                let shape =
                    r::broadcast_shapes(self.shape(c), &xs).and_then(|s| r::broadcast_shapes(&s, self.shape(b)))?;
                (Op::Select(c, thr, x, b), shape)
            }
            _ => return None,
        })
    }

    /// A shape with the same element count: the prime factors of the size dealt into 0–4 axes,
    /// plus unit axes; a zero-size shape keeps one zero extent.
    fn reshape_target(&mut self, xs: &[usize]) -> Vec<usize> {
        let size: usize = xs.iter().product();
        let rank = self.rng.below(5);
        if size == 0 {
            let mut s: Vec<usize> = (0..rank.max(1)).map(|_| 1 + self.rng.below(3)).collect();
            let i = self.rng.below(s.len());
            s[i] = 0;
            return s;
        }
        let mut factors = Vec::new();
        let (mut m, mut p) = (size, 2);
        while m > 1 {
            if m % p == 0 {
                factors.push(p);
                m /= p;
            } else {
                p += 1;
            }
        }
        let mut s = vec![1; rank.max(if factors.is_empty() { 0 } else { 1 })];
        for f in factors {
            let i = self.rng.below(s.len());
            s[i] *= f;
        }
        s
    }
}

/// A random program of `class` (at least one op).
pub fn generate(rng: &mut Rng, class: Class, lim: GenLimits) -> Prog {
    let mut g = Gen { rng, prog: Prog { class, inputs: vec![], nodes: vec![] }, lim };
    let s = loop {
        let s = gen_shape(g.rng, lim.max_dim);
        if s.iter().product::<usize>() <= lim.max_size {
            break s;
        }
    };
    g.input(s);
    let n_ops = 1 + g.rng.below(g.lim.max_ops);
    let mut done = 0;
    let mut tries = 0;
    while done < n_ops && tries < 200 {
        tries += 1;
        let mark = (g.prog.nodes.len(), g.prog.inputs.len());
        let x = g.pick();
        match g.op(x) {
            Some((op, shape)) if shape.iter().product::<usize>() <= g.lim.max_size && shape.len() <= 5 => {
                g.push(op, shape);
                done += 1;
            }
            _ => {
                // undo inputs made for a rejected op
                g.prog.nodes.truncate(mark.0);
                g.prog.inputs.truncate(mark.1);
            }
        }
    }
    if matches!(g.prog.nodes.last().unwrap().op, Op::Input(_)) {
        let x = g.prog.nodes.len() - 1;
        let s = g.shape(x).to_vec();
        g.push(Op::Unary(Un::Neg, x), s);
    }
    g.prog
}

/// A random plan: up to two disjoint segments, each maybe holding one nested segment.
pub fn generate_plan(rng: &mut Rng, prog: &Prog) -> Vec<Segment> {
    let n = prog.nodes.len();
    let wraps = [
        Wrap::Checkpoint,
        Wrap::CustomVjp,
        Wrap::CustomVjpNoOutputs,
        Wrap::CustomJvp,
        Wrap::CustomBoth,
        Wrap::CustomNone,
        Wrap::Depends,
    ];
    let wrap = |rng: &mut Rng| wraps[rng.below(wraps.len())];
    let mut plan = Vec::new();
    let mut from = 1;
    for _ in 0..rng.below(3) {
        if from >= n {
            break;
        }
        let start = from + rng.below(n - from);
        let end = start + 1 + rng.below(n - start);
        let mut inner = Vec::new();
        if end - start >= 2 && rng.chance(0.4) {
            let s = start + rng.below(end - start);
            let e = s + 1 + rng.below(end - s);
            if (s, e) != (start, end) {
                inner.push(Segment { start: s, end: e, wrap: wrap(rng), inner: vec![] });
            }
        }
        plan.push(Segment { start, end, wrap: wrap(rng), inner });
        from = end;
    }
    plan
}
