//! The checks run on every case, their tolerances, and the minimisation of a failing case.
use super::program::{self as p, build, make_array, reference, Class, GenLimits, Prog, Segment};
use super::reference::Tensor;
use super::Rng;
use cotangent::{self as ct, Array, DType};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// One case: a program, a plan of wrapped segments, the narrow dtype its values are also
/// computed in, and whether its inputs hold NaN and infinities.
#[derive(Clone, Debug)]
pub struct Case {
    pub seed: u64,
    pub prog: Arc<Prog>,
    pub plan: Vec<Segment>,
    /// `f32`, `f16` or `bf16` for float programs (besides `f64`); `i32` or `i64` for integer ones.
    pub narrow: DType,
    /// Inputs hold NaN and ±inf: only values are compared (NaN-ness and infinities exactly).
    pub special: bool,
}

/// A check that failed, with what it saw.
#[derive(Clone, Debug)]
pub struct Failure {
    pub check: &'static str,
    pub detail: String,
}

/// Counts: graphs tried, and per check how often it ran and how often it was skipped (a
/// non-finite or non-smooth case where the comparison would mean nothing).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub graphs: u64,
    pub ran: BTreeMap<&'static str, u64>,
    pub skipped: BTreeMap<&'static str, u64>,
}

impl Stats {
    pub fn checks(&self) -> u64 {
        self.ran.values().sum()
    }
    pub fn merge(&mut self, o: &Stats) {
        self.graphs += o.graphs;
        for (k, v) in &o.ran {
            *self.ran.entry(k).or_default() += v;
        }
        for (k, v) in &o.skipped {
            *self.skipped.entry(k).or_default() += v;
        }
    }
    pub fn summary(&self) -> String {
        let mut s = format!("{} graphs, {} checks:", self.graphs, self.checks());
        for (k, v) in &self.ran {
            let _ = write!(s, " {k} {v}");
            if let Some(sk) = self.skipped.get(k) {
                let _ = write!(s, " (+{sk} skipped)");
            }
            s.push(',');
        }
        s.pop();
        s
    }
}

/// The case of `seed`.
pub fn gen_case(seed: u64, lim: GenLimits) -> Case {
    let mut rng = Rng(seed);
    let class = if rng.chance(0.85) { Class::Float } else { Class::Int };
    let mut prog = p::generate(&mut rng, class, lim);
    let plan = p::generate_plan(&mut rng, &prog);
    let narrow = match class {
        Class::Float => [DType::F32, DType::F32, DType::F16, DType::BF16][rng.below(4)],
        Class::Int => [DType::I32, DType::I64][rng.below(2)],
    };
    let special = class == Class::Float && rng.chance(0.12);
    if special {
        for inp in &mut prog.inputs {
            for v in &mut inp.data {
                if rng.chance(0.15) {
                    *v = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][rng.below(3)];
                }
            }
        }
    }
    Case { seed, prog: Arc::new(prog), plan, narrow, special }
}

/// Run every check of `case`, counting into `stats`. A panic inside cotangent is a failure.
pub fn run_case(case: &Case, stats: &mut Stats) -> Result<(), Failure> {
    stats.graphs += 1;
    let mut local = Stats::default();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Checker::new(case, &mut local).run()));
    stats.merge(&Stats { graphs: 0, ..local });
    match r {
        Ok(r) => r,
        Err(e) => {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(Failure { check: "panic", detail: msg.unwrap_or_default() })
        }
    }
}

/// A smaller case failing the same check: drop the plan, make earlier nodes the output,
/// remove nodes nothing reads, as long as the failure persists.
pub fn minimise(case: &Case, failure: &Failure) -> (Case, Failure) {
    let fails = |c: &Case| run_case(c, &mut Stats::default()).err().filter(|f| f.check == failure.check);
    let (mut best, mut why) = (case.clone(), failure.clone());
    loop {
        let mut progress = false;
        let mut candidates = Vec::new();
        if !best.plan.is_empty() {
            candidates.push(Case { plan: vec![], ..best.clone() });
        }
        for (i, seg) in best.plan.iter().enumerate() {
            if !seg.inner.is_empty() {
                let mut c = best.clone();
                c.plan[i].inner.clear();
                candidates.push(c);
            }
        }
        for k in (0..best.prog.nodes.len() - 1).rev() {
            candidates.push(truncate(&best, k));
        }
        candidates.push(prune(&best));
        for c in candidates {
            if c.prog.nodes.len() > best.prog.nodes.len() || (c.prog == best.prog && c.plan == best.plan) {
                continue;
            }
            if let Some(f) = fails(&c) {
                (best, why) = (c, f);
                progress = true;
                break;
            }
        }
        if !progress {
            return (best, why);
        }
    }
}

/// The case with node `k` as the output (nodes after it dropped, segments reaching past it
/// dropped), pruned.
fn truncate(case: &Case, k: usize) -> Case {
    let mut prog = (*case.prog).clone();
    prog.nodes.truncate(k + 1);
    let plan = case.plan.iter().filter(|s| s.end <= k + 1).cloned().collect();
    prune(&Case { prog: Arc::new(prog), plan, ..case.clone() })
}

/// The case without the nodes (and inputs) the output does not read.
fn prune(case: &Case) -> Case {
    let prog = &case.prog;
    let n = prog.nodes.len();
    let mut used = vec![false; n];
    used[n - 1] = true;
    for i in (0..n).rev() {
        if used[i] {
            for a in prog.nodes[i].op.args() {
                used[a] = true;
            }
        }
    }
    let mut new_index = vec![usize::MAX; n];
    let mut nodes = Vec::new();
    let mut inputs = Vec::new();
    for i in 0..n {
        if used[i] {
            new_index[i] = nodes.len();
            let op = match &prog.nodes[i].op {
                p::Op::Input(k) => {
                    inputs.push(prog.inputs[*k].clone());
                    p::Op::Input(inputs.len() - 1)
                }
                op => op.rename(|a| new_index[a]),
            };
            nodes.push(p::Node { op, shape: prog.nodes[i].shape.clone() });
        }
    }
    // a segment keeps the nodes it had that survive
    let kept_before = |i: usize| used[..i].iter().filter(|&&u| u).count();
    fn remap(s: &[Segment], f: &dyn Fn(usize) -> usize) -> Vec<Segment> {
        s.iter()
            .map(|s| Segment { start: f(s.start), end: f(s.end), wrap: s.wrap, inner: remap(&s.inner, f) })
            .filter(|s| s.start < s.end)
            .collect()
    }
    let plan = remap(&case.plan, &kept_before);
    Case { prog: Arc::new(Prog { class: prog.class, inputs, nodes }), plan, ..case.clone() }
}

/// A failure as a reproduction: the seed, the case (after minimisation) as Rust code, and
/// what the check saw.
pub fn describe(case: &Case, failure: &Failure) -> String {
    format!(
        "check `{}` failed (seed {:#x}, narrow dtype {}, NaN/inf inputs: {})\nplan: {:?}\n{}{}\n{}",
        failure.check,
        case.seed,
        case.narrow,
        case.special,
        case.plan,
        case.prog.inputs_rust(),
        case.prog.to_rust(),
        failure.detail
    )
}

// ----- numbers -------------------------------------------------------------------------------

/// `v` rounded to `dtype` (independently of cotangent's casts).
fn quantize(v: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// The smallest relative push of the noisy reference runs (see `Checker::values`): large enough
/// that f64 keeps it (`1 + PROBE_MIN != 1`, whatever the sign), small enough to stay linear.
pub const PROBE_MIN: f64 = 1.0 / (1u64 << 30) as f64;

/// Unit roundoff of a float dtype.
fn roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON / 2.0,
        DType::F32 => f32::EPSILON as f64 / 2.0,
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 0.0,
    }
}

/// The spacing of a float dtype's subnormal numbers (its smallest positive value): below its
/// smallest normal number every rounding may be off by up to half of it, whatever the value.
fn subnormal_step(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::from_bits(1),
        DType::F32 => f32::from_bits(1) as f64,
        DType::F16 => 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-133),
        _ => 0.0,
    }
}

/// The largest finite value of a float dtype.
fn finite_max(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f32::MAX as f64,
        DType::F16 => 65504.0,
        DType::BF16 => 3.38e38,
        _ => f64::MAX,
    }
}

/// A function of arrays, as the transforms return.
type ArrayFn = dyn Fn(&[Array]) -> ct::Result<Vec<Array>> + Send + Sync;

/// `x <= tol`, false for NaN (a NaN difference is a failure, a NaN error estimate a skip).
fn within(x: f64, tol: f64) -> bool {
    x <= tol
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
fn dot_abs(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x * y).abs()).sum()
}
fn vals(a: &Array) -> Vec<f64> {
    a.to_f64_vec().expect("evaluates")
}
fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Compare `got` with `want` within `tol[i]` per element; non-finite values must match
/// exactly (NaN with NaN, each infinity with itself).
fn compare(got: &[f64], want: &[f64], tol: &dyn Fn(usize) -> f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, want {}", got.len(), want.len()));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if !w.is_finite() || !g.is_finite() {
            (w.is_nan() && g.is_nan()) || w == g
        } else {
            (g - w).abs() <= tol(i)
        };
        if !ok {
            return Err(format!("element {i}: got {g:e}, want {w:e} (tolerance {:e})", tol(i)));
        }
    }
    Ok(())
}

/// Central differences of `f` at step `h` and `h/2`, combined by Richardson extrapolation:
/// `(estimate, error estimate)`.
fn richardson(f: &dyn Fn(f64) -> f64, h: f64) -> (f64, f64) {
    let d = |h: f64| (f(h) - f(-h)) / (2.0 * h);
    let (d1, d2) = (d(h), d(h / 2.0));
    ((4.0 * d2 - d1) / 3.0, (d1 - d2).abs())
}

// ----- the checks ----------------------------------------------------------------------------

struct Checker<'a> {
    case: &'a Case,
    prog: &'a Arc<Prog>,
    stats: &'a mut Stats,
    rng: Rng,
    /// No kink within reach of the finite-difference steps.
    smooth: bool,
}

type CheckResult = Result<(), Failure>;

impl<'a> Checker<'a> {
    fn new(case: &'a Case, stats: &'a mut Stats) -> Self {
        Checker { case, prog: &case.prog, stats, rng: Rng(case.seed ^ 0xC0FF_EE00_D15E_A5E5), smooth: true }
    }

    fn ran(&mut self, check: &'static str) {
        *self.stats.ran.entry(check).or_default() += 1;
    }
    fn skip(&mut self, check: &'static str) {
        *self.stats.skipped.entry(check).or_default() += 1;
    }

    fn inputs(&self, dtype: DType) -> Vec<Array> {
        self.prog.inputs.iter().map(|i| make_array(&i.shape, &i.data, i.layout, dtype)).collect()
    }
    fn ref_inputs(&self, dtype: DType) -> Vec<Tensor> {
        self.prog
            .inputs
            .iter()
            .map(|i| Tensor::new(&i.shape, i.data.iter().map(|&v| quantize(v, dtype)).collect()))
            .collect()
    }
    /// A random tensor of `shape` with values in `[-1, 1)`.
    fn random(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::new(shape, (0..n).map(|_| self.rng.uniform(-1.0, 1.0)).collect())
    }
    fn output_shape(&self) -> Vec<usize> {
        self.prog.nodes.last().unwrap().shape.clone()
    }
    fn f(&self, plan: &[Segment]) -> impl Fn(&[Array]) -> ct::Result<Array> + Send + Sync + Clone + 'static {
        let (prog, plan) = (self.prog.clone(), plan.to_vec());
        move |xs: &[Array]| build(&prog, xs, &plan)
    }
    /// `Σ w · f(x)` with the plan wrapped.
    fn loss(&self, w: &Tensor) -> impl Fn(&[Array]) -> ct::Result<Array> + Send + Sync + Clone + 'static {
        let f = self.f(&self.case.plan);
        let w = Array::from_vec(w.data.clone(), &w.shape);
        move |xs: &[Array]| Ok((f(xs)? * &w).sum_all())
    }

    fn run(mut self) -> CheckResult {
        let exact = reference(self.prog, &self.ref_inputs(DType::F64), None);
        match self.prog.class {
            Class::Int => {
                self.values(self.case.narrow, &exact)?;
                self.wrapped_values(self.case.narrow)?;
                self.vmap_values(self.case.narrow)?;
            }
            Class::Float => {
                self.values(DType::F64, &exact)?;
                let narrow_exact = reference(self.prog, &self.ref_inputs(self.case.narrow), None);
                self.values(self.case.narrow, &narrow_exact)?;
                self.wrapped_values(DType::F64)?;
                if self.case.special {
                    return Ok(());
                }
                self.vmap_values(DType::F64)?;
                // finite differences (step 1e-3 along directions in [-1, 1]) must not straddle
                // a kink: a maximum, abs, max or select that close to switching
                self.smooth = exact.min_kink > 0.05;
                // non-finite values, or `sin` of arguments whose rounding alone changes the result
                // (`exact.chaotic()`): two correct orders of evaluation disagree
                if !exact.all_finite() || exact.chaotic() {
                    for c in
                        ["grad_fd", "vjp_jvp", "wrapped_grad", "whole_wraps", "second_order", "vmap_grad", "grad_vmap"]
                    {
                        self.skip(c);
                    }
                    return Ok(());
                }
                self.grad_fd()?;
                self.vjp_jvp()?;
                self.wrapped_grad()?;
                self.whole_wraps()?;
                self.second_order()?;
                self.vmap_grad()?;
                self.grad_vmap()?;
            }
        }
        Ok(())
    }

    /// cotangent's values in `dtype` against the reference on the same (rounded) inputs.
    /// Floats: within a tolerance from four reference runs with every node perturbed by the
    /// dtype's unit roundoff (how sensitive the output is to rounding), plus a few ulps.
    fn values(&mut self, dtype: DType, exact: &p::RefRun) -> CheckResult {
        let name = if dtype == DType::F64 { "values_f64" } else { "values_narrow" };
        let fail = |detail: String| Failure { check: name, detail: format!("in {dtype}: {detail}") };
        let y = build(self.prog, &self.inputs(dtype), &[]).map_err(|e| fail(format!("build: {e}")))?;
        if y.shape() != exact.output().shape || y.dtype() != dtype {
            return Err(fail(format!("output {:?} {}, want {:?}", y.shape(), y.dtype(), exact.output().shape)));
        }
        let got = y.to_f64_vec().map_err(|e| fail(format!("eval: {e}")))?;
        let want = &exact.output().data;
        if !dtype.is_float() {
            if exact.max_abs > (1u64 << 30) as f64 {
                self.skip(name);
                return Ok(());
            }
            self.ran(name);
            return compare(&got, want, &|_| 0.0).map_err(fail);
        }
        let u = roundoff(dtype);
        if exact.max_abs > finite_max(dtype) / 16.0 || exact.min_margin < 256.0 * u * (1.0 + exact.max_abs) {
            self.skip(name);
            return Ok(());
        }
        let inputs = self.ref_inputs(dtype);
        // How far the noisy runs push every node, relative. The reference computes in f64, where
        // a push by f64's own unit roundoff is mostly lost to rounding (`1 ± r·2^-53` rounds to 1
        // for every `r` of one sign), so f64 outputs came out of those runs almost unmoved and the
        // tolerance fell below one rounding of an intermediate (fuzzer finding: `x.softmax() + x`
        // with cancellation, where cotangent was 0.2 ulp of the softmax from the exact value and
        // the f64 reference 0.8). f64 is probed with 2^-30 instead and the deviation scaled back:
        // at that size an output's response to its nodes' perturbations is linear.
        let probe = u.max(PROBE_MIN);
        let mut dev = vec![0.0f64; want.len()];
        for _ in 0..4 {
            let noisy = reference(self.prog, &inputs, Some((&mut self.rng, probe)));
            for (d, (a, b)) in dev.iter_mut().zip(noisy.output().data.iter().zip(want)) {
                if a.is_finite() && b.is_finite() {
                    *d = d.max((a - b).abs() * (u / probe));
                }
            }
        }
        // results in the subnormal range round to a fixed spacing, not a relative one (fuzzer
        // finding: float16 results of 4e-7, in steps of 6e-8, two roundings 1.4e-7 apart): as
        // many half-steps as the relative term allows roundings
        let floor = 16.0 * subnormal_step(dtype) + if dtype == DType::F64 { 1e-300 } else { 1e-30f64.max(u * 1e-4) };
        self.ran(name);
        // besides the sensitivity, a few roundings of the result itself (a sum or a softmax
        // normaliser rounds `O(log n)` times)
        compare(&got, want, &|i| 32.0 * dev[i] + 32.0 * u * want[i].abs() + floor).map_err(fail)
    }

    /// The plan (checkpoint, custom functions, depends) does not change values: bit-identical.
    fn wrapped_values(&mut self, dtype: DType) -> CheckResult {
        if self.case.plan.is_empty() {
            return Ok(());
        }
        let xs = self.inputs(dtype);
        let plain = vals(&build(self.prog, &xs, &[]).unwrap());
        let wrapped = build(self.prog, &xs, &self.case.plan)
            .and_then(|y| y.to_f64_vec())
            .map_err(|e| Failure { check: "wrapped_values", detail: format!("{e}") })?;
        self.ran("wrapped_values");
        if !same_bits(&plain, &wrapped) {
            return Err(Failure { check: "wrapped_values", detail: format!("plain {plain:?}\nwrapped {wrapped:?}") });
        }
        Ok(())
    }

    /// `grad Σ w·f` (with the plan) along a random direction against central differences of
    /// the reference.
    fn grad_fd(&mut self) -> CheckResult {
        let fail = |detail: String| Failure { check: "grad_fd", detail };
        let w = self.random(&self.output_shape());
        let xs = self.inputs(DType::F64);
        let g = ct::grad(self.loss(&w))(&xs).map_err(|e| fail(format!("{e}")))?;
        let ts: Vec<Tensor> = self
            .prog
            .inputs
            .iter()
            .map(|i| i.shape.clone())
            .collect::<Vec<_>>()
            .iter()
            .map(|s| self.random(s))
            .collect();
        let mut analytic = 0.0;
        let mut scale = 0.0;
        for ((gi, t), inp) in g.iter().zip(&ts).zip(&self.prog.inputs) {
            if gi.shape() != inp.shape.as_slice() {
                return Err(fail(format!("gradient shape {:?}, input shape {:?}", gi.shape(), inp.shape)));
            }
            let gv = vals(gi);
            analytic += dot(&gv, &t.data);
            scale += dot_abs(&gv, &t.data);
        }
        let prog = self.prog.clone();
        let loss_ref = |h: f64| {
            let inputs: Vec<Tensor> = prog
                .inputs
                .iter()
                .zip(&ts)
                .map(|(i, t)| Tensor::new(&i.shape, i.data.iter().zip(&t.data).map(|(x, d)| x + h * d).collect()))
                .collect();
            dot(&reference(&prog, &inputs, None).output().data, &w.data)
        };
        let (fd, err) = richardson(&loss_ref, 1e-3);
        if !self.smooth || !within(err, 1e-4 * (1.0 + fd.abs())) {
            self.skip("grad_fd"); // a kink or a jump within the step
            return Ok(());
        }
        self.ran("grad_fd");
        // finite differences of the reference cannot resolve a derivative below the output's
        // rounding: a floor that grows with the output (fuzzer finding: `exp(sum(softmax over an
        // axis of 1)²) - y` = 3.5e52, whose `<grad, t>` of 0.45 through `y` moved the output by
        // less than an ulp, so the differences gave 0)
        let out = vals(&build(self.prog, &xs, &[]).map_err(|e| fail(format!("build: {e}")))?);
        let floor = 1e-12 * w.data.iter().zip(&out).map(|(w, y)| w.abs() * y.abs()).sum::<f64>();
        let tol = 1e-6 * (fd.abs() + scale) + 10.0 * err + 1e-9 + floor;
        if !within((analytic - fd).abs(), tol) {
            return Err(fail(format!("<grad, t> = {analytic:e}, finite differences {fd:e} (± {err:e})")));
        }
        Ok(())
    }

    /// `<vjp(w), t> = <w, jvp(t)>`, and both transforms' outputs equal the plain values.
    fn vjp_jvp(&mut self) -> CheckResult {
        let fail = |detail: String| Failure { check: "vjp_jvp", detail };
        let xs = self.inputs(DType::F64);
        let plain = vals(&build(self.prog, &xs, &[]).unwrap());
        let w = self.random(&self.output_shape());
        let ts: Vec<Array> = self
            .prog
            .inputs
            .iter()
            .map(|i| i.shape.clone())
            .collect::<Vec<_>>()
            .iter()
            .map(|s| {
                let t = self.random(s);
                Array::from_vec(t.data, &t.shape)
            })
            .collect();
        let f = self.f(&self.case.plan);
        let wa = Array::from_vec(w.data.clone(), &w.shape);
        let (o1, vj) = ct::vjp(f.clone(), &xs, &[wa]).map_err(|e| fail(format!("vjp: {e}")))?;
        let (o2, jv) = ct::jvp(f, &xs, &ts).map_err(|e| fail(format!("jvp: {e}")))?;
        for (o, what) in [(&o1, "vjp"), (&o2, "jvp")] {
            if !same_bits(&vals(&o[0]), &plain) {
                return Err(fail(format!("{what}'s output differs from the plain value")));
            }
        }
        let (mut lhs, mut scale) = (0.0, 0.0);
        for (v, t) in vj.iter().zip(&ts) {
            if v.shape() != t.shape() {
                return Err(fail(format!("vjp shape {:?}, input shape {:?}", v.shape(), t.shape())));
            }
            lhs += dot(&vals(v), &vals(t));
            scale += dot_abs(&vals(v), &vals(t));
        }
        let jvv = vals(&jv[0]);
        let rhs = dot(&w.data, &jvv);
        scale += dot_abs(&w.data, &jvv);
        self.ran("vjp_jvp");
        // a floor for derivatives that are zero up to rounding (say, of a sum of a softmax): the
        // rounding noise of such a derivative grows with the output it is the derivative of
        // (fuzzer finding: `exp(sum(softmax(logsumexp(x))))`, an output of e^16 whose derivative
        // is 0, gave 1.8e-9 = 2e-16 of it)
        let floor = 1e-12 * (1.0 + w.data.iter().zip(&plain).map(|(w, y)| w.abs() * (1.0 + y.abs())).sum::<f64>());
        if !within((lhs - rhs).abs(), 1e-10 * scale + floor) {
            return Err(fail(format!("<vjp(w), t> = {lhs:e}, <w, jvp(t)> = {rhs:e}")));
        }
        Ok(())
    }

    /// Gradients with the plan equal the plain program's: bit-identical where the whole plan
    /// is one checkpoint of everything, else within rounding (cotangents that fan into a
    /// segment's outputs are summed in another order).
    fn wrapped_grad(&mut self) -> CheckResult {
        if self.case.plan.is_empty() {
            return Ok(());
        }
        let w = self.random(&self.output_shape());
        let xs = self.inputs(DType::F64);
        let wa = Array::from_vec(w.data.clone(), &w.shape);
        let plain = {
            let f = self.f(&[]);
            ct::grad(move |x: &[Array]| Ok::<_, ct::Error>((f(x)? * &wa).sum_all()))(&xs).unwrap()
        };
        let wrapped =
            ct::grad(self.loss(&w))(&xs).map_err(|e| Failure { check: "wrapped_grad", detail: format!("{e}") })?;
        self.ran("wrapped_grad");
        for (k, (a, b)) in plain.iter().zip(&wrapped).enumerate() {
            let (a, b) = (vals(a), vals(b));
            let scale = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            if let Err(e) = compare(&b, &a, &|_| 1e-12 * (1.0 + scale)) {
                return Err(Failure { check: "wrapped_grad", detail: format!("input {k}: {e}") });
            }
        }
        Ok(())
    }

    /// `checkpoint(f)`, and a custom function of `f` whose VJP rule is `ct::vjp(f)`, have
    /// bit-identical values and gradients to `f` (the backward pass runs the same ops in the
    /// same order).
    fn whole_wraps(&mut self) -> CheckResult {
        let fail = |detail: String| Failure { check: "whole_wraps", detail };
        let w = self.random(&self.output_shape());
        let xs = self.inputs(DType::F64);
        let wa = Array::from_vec(w.data.clone(), &w.shape);
        let f = self.f(&[]);
        let plain = {
            let (f, wa) = (f.clone(), wa.clone());
            ct::value_and_grad(move |x: &[Array]| Ok::<_, ct::Error>((f(x)? * &wa).sum_all()))(&xs).unwrap()
        };
        let fv = f.clone();
        let wrapped: [(&str, Box<ArrayFn>); 2] = [
            ("checkpoint", Box::new(ct::checkpoint(f.clone()))),
            (
                "custom_function with vjp rule ct::vjp(f)",
                Box::new(
                    ct::custom_function(f.clone())
                        .vjp(move |p, c, _o| ct::vjp(fv.clone(), p, c).map(|(_, v)| v))
                        .build(),
                ),
            ),
        ];
        for (what, g) in wrapped {
            let g: Arc<ArrayFn> = Arc::from(g);
            let wa = wa.clone();
            let (outs, grads) =
                ct::value_and_grad(move |x: &[Array]| Ok::<_, ct::Error>((&g(x)?[0] * &wa).sum_all()))(&xs)
                    .map_err(|e| fail(format!("{what}: {e}")))?;
            if !same_bits(&vals(&outs[0]), &vals(&plain.0[0])) {
                return Err(fail(format!("{what}: value differs")));
            }
            for (k, (a, b)) in grads.iter().zip(&plain.1).enumerate() {
                if !same_bits(&vals(a), &vals(b)) {
                    return Err(fail(format!("{what}: gradient of input {k}: {:?} vs plain {:?}", vals(a), vals(b))));
                }
            }
        }
        self.ran("whole_wraps");
        Ok(())
    }

    /// Second order: `<grad <grad L, t>, s>` (grad∘grad) = `<jvp(grad L, s), t>` (jvp∘grad),
    /// and both equal central differences of `<grad L(x + h s), t>`.
    fn second_order(&mut self) -> CheckResult {
        let fail = |detail: String| Failure { check: "second_order", detail };
        let w = self.random(&self.output_shape());
        let shapes: Vec<Vec<usize>> = self.prog.inputs.iter().map(|i| i.shape.clone()).collect();
        let t: Vec<Tensor> = shapes.iter().map(|s| self.random(s)).collect();
        let s: Vec<Tensor> = shapes.iter().map(|sh| self.random(sh)).collect();
        let arr = |t: &Tensor| Array::from_vec(t.data.clone(), &t.shape);
        let (ta, sa): (Vec<Array>, Vec<Array>) = (t.iter().map(arr).collect(), s.iter().map(arr).collect());
        let gl = ct::grad(self.loss(&w));
        let gl2 = gl.clone();
        let ta2 = ta.clone();
        let gt = move |x: &[Array]| -> ct::Result<Array> {
            let g = gl2(x)?;
            Ok(g.iter().zip(&ta2).map(|(g, t)| (g * t).sum_all()).fold(Array::scalar(0.0f64), |a, b| a + b))
        };
        let xs = self.inputs(DType::F64);
        let gg = ct::grad(gt.clone())(&xs).map_err(|e| fail(format!("grad∘grad: {e}")))?;
        let a: f64 = gg.iter().zip(&s).map(|(g, s)| dot(&vals(g), &s.data)).sum();
        let (_, jg) = ct::jvp(gl, &xs, &sa).map_err(|e| fail(format!("jvp∘grad: {e}")))?;
        let b: f64 = jg.iter().zip(&t).map(|(g, t)| dot(&vals(g), &t.data)).sum();
        let scale: f64 = gg.iter().zip(&s).map(|(g, s)| dot_abs(&vals(g), &s.data)).sum::<f64>()
            + jg.iter().zip(&t).map(|(g, t)| dot_abs(&vals(g), &t.data)).sum::<f64>();
        self.ran("second_order");
        // second derivatives that are zero up to rounding: a floor that grows with the output,
        // as in `vjp_jvp`
        let out = vals(&build(self.prog, &xs, &[]).map_err(|e| fail(format!("build: {e}")))?);
        let floor = 1e-11 * (1.0 + w.data.iter().zip(&out).map(|(w, y)| w.abs() * (1.0 + y.abs())).sum::<f64>());
        if !within((a - b).abs(), 1e-9 * scale + floor) {
            return Err(fail(format!("grad∘grad gives {a:e}, jvp∘grad {b:e}")));
        }
        let prog = self.prog.clone();
        let at = |h: f64| {
            let xs: Vec<Array> = prog
                .inputs
                .iter()
                .zip(&s)
                .map(|(i, d)| {
                    let data: Vec<f64> = i.data.iter().zip(&d.data).map(|(x, d)| x + h * d).collect();
                    make_array(&i.shape, &data, i.layout, DType::F64)
                })
                .collect();
            gt(&xs).unwrap().item::<f64>().unwrap()
        };
        let (fd, err) = richardson(&at, 1e-3);
        if !self.smooth || !within(err, 1e-4 * (1.0 + fd.abs())) {
            self.skip("second_order_fd");
            return Ok(());
        }
        self.ran("second_order_fd");
        if !within((b - fd).abs(), 1e-6 * (fd.abs() + scale) + 10.0 * err + 1e-9) {
            return Err(Failure {
                check: "second_order_fd",
                detail: format!("jvp∘grad gives {b:e}, finite differences {fd:e} (± {err:e})"),
            });
        }
        Ok(())
    }

    /// A batch for vmap: per input its batch axis (`None`: unbatched) and per batch element
    /// its values; the batched arrays; and the batch size.
    fn batch(&mut self) -> Batch {
        let n = [1, 2, 3, 2, 0][self.rng.below(5)];
        let mut axes = Vec::new();
        let mut per = Vec::new();
        let mut arrays = Vec::new();
        let int = self.prog.class == Class::Int;
        for (k, inp) in self.prog.inputs.iter().enumerate() {
            let nd = inp.shape.len();
            let batched = k == 0 || self.rng.chance(0.6);
            if !batched {
                axes.push(None);
                per.push(vec![Tensor::new(&inp.shape, inp.data.clone()); n]);
                arrays.push(make_array(&inp.shape, &inp.data, inp.layout, DType::F64));
                continue;
            }
            let a = self.rng.below(nd + 1);
            let spec = if self.rng.chance(0.5) { a as isize - nd as isize - 1 } else { a as isize };
            let elems: Vec<Tensor> = (0..n)
                .map(|_| {
                    let t = self.random(&inp.shape);
                    if int {
                        t.map(|v| (v * 3.5).round())
                    } else {
                        t.map(|v| 1.5 * v)
                    }
                })
                .collect();
            let stacked = stack(&elems, a, &inp.shape);
            arrays.push(make_array(&stacked.shape, &stacked.data, inp.layout, DType::F64));
            axes.push(Some(spec));
            per.push(elems);
        }
        Batch { n, axes, per, arrays }
    }

    /// `vmap(f)` over random in/out axes equals `f` looped over the batch.
    fn vmap_values(&mut self, dtype: DType) -> CheckResult {
        let fail = |detail: String| Failure { check: "vmap", detail };
        let b = self.batch();
        let out_nd = self.output_shape().len();
        let oa = self.rng.below(out_nd + 1);
        let out_spec = if self.rng.chance(0.5) { oa as isize - out_nd as isize - 1 } else { oa as isize };
        let f = self.f(&self.case.plan);
        let xs: Vec<Array> = b.arrays.iter().map(|a| a.astype(dtype)).collect();
        let y = ct::vmap(f.clone(), &b.axes, &[Some(out_spec)])(&xs).map_err(|e| fail(format!("{e}")))?.remove(0);
        let looped: Vec<Tensor> = (0..b.n)
            .map(|i| {
                let xi: Vec<Array> =
                    b.per.iter().map(|p| Array::from_vec(p[i].data.clone(), &p[i].shape).astype(dtype)).collect();
                let yi = f(&xi).unwrap();
                Tensor::new(yi.shape(), vals(&yi))
            })
            .collect();
        let want = stack(&looped, oa, &self.output_shape());
        if y.shape() != want.shape.as_slice() {
            return Err(fail(format!(
                "shape {:?}, want {:?} (axes {:?}, out axis {out_spec})",
                y.shape(),
                want.shape,
                b.axes
            )));
        }
        self.ran("vmap");
        let got = vals(&y);
        let scale = 1.0 + want.data.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
        let tol = if dtype.is_float() { 1e-12 * scale } else { 0.0 };
        compare(&got, &want.data, &|_| tol).map_err(|e| fail(format!("in axes {:?}, out axis {out_spec}: {e}", b.axes)))
    }

    /// `vmap(grad L)` equals `grad L` looped over the batch.
    fn vmap_grad(&mut self) -> CheckResult {
        let fail = |detail: String| Failure { check: "vmap_grad", detail };
        let b = self.batch();
        if self.chaotic_batch(&b) {
            self.skip("vmap_grad");
            return Ok(());
        }
        let w = self.random(&self.output_shape());
        let g = ct::grad(self.loss(&w));
        let y = ct::vmap(g.clone(), &b.axes, &[Some(0)])(&b.arrays).map_err(|e| fail(format!("{e}")))?;
        self.ran("vmap_grad");
        for (k, inp) in self.prog.inputs.iter().enumerate() {
            let looped: Vec<Tensor> = (0..b.n)
                .map(|i| {
                    let xi: Vec<Array> =
                        b.per.iter().map(|p| Array::from_vec(p[i].data.clone(), &p[i].shape)).collect();
                    Tensor::new(&inp.shape, vals(&g(&xi).unwrap()[k]))
                })
                .collect();
            let want = stack(&looped, 0, &inp.shape);
            if y[k].shape() != want.shape.as_slice() {
                return Err(fail(format!("input {k}: shape {:?}, want {:?}", y[k].shape(), want.shape)));
            }
            let scale = 1.0 + want.data.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            compare(&vals(&y[k]), &want.data, &|_| 1e-12 * scale)
                .map_err(|e| fail(format!("input {k} (in axes {:?}): {e}", b.axes)))?;
        }
        Ok(())
    }

    /// `grad Σ W·vmap(f)` equals the per-element gradients of `Σ W_i·f`: stacked for batched
    /// inputs, summed for unbatched ones.
    fn grad_vmap(&mut self) -> CheckResult {
        let fail = |detail: String| Failure { check: "grad_vmap", detail };
        let b = self.batch();
        if self.chaotic_batch(&b) {
            self.skip("grad_vmap");
            return Ok(());
        }
        let out_shape = self.output_shape();
        let ws: Vec<Tensor> = (0..b.n).map(|_| self.random(&out_shape)).collect();
        let wa = {
            let s = stack(&ws, 0, &out_shape);
            Array::from_vec(s.data, &s.shape)
        };
        let vf = ct::vmap(self.f(&self.case.plan), &b.axes, &[Some(0)]);
        let g = ct::grad(move |x: &[Array]| Ok::<_, ct::Error>((&vf(x)?[0] * &wa).sum_all()))(&b.arrays)
            .map_err(|e| fail(format!("{e}")))?;
        self.ran("grad_vmap");
        let per: Vec<Vec<Array>> = (0..b.n)
            .map(|i| {
                let xi: Vec<Array> = b.per.iter().map(|p| Array::from_vec(p[i].data.clone(), &p[i].shape)).collect();
                ct::grad(self.loss(&ws[i]))(&xi).unwrap()
            })
            .collect();
        for (k, inp) in self.prog.inputs.iter().enumerate() {
            let elems: Vec<Tensor> = per.iter().map(|g| Tensor::new(&inp.shape, vals(&g[k]))).collect();
            let want = match b.axes[k] {
                Some(spec) => {
                    let nd = inp.shape.len() + 1;
                    let a = if spec < 0 { (spec + nd as isize) as usize } else { spec as usize };
                    stack(&elems, a, &inp.shape)
                }
                None => {
                    let mut acc = Tensor::new(&inp.shape, vec![0.0; inp.data.len()]);
                    for e in &elems {
                        acc = acc.zip(e, |a, b| a + b);
                    }
                    acc
                }
            };
            if g[k].shape() != want.shape.as_slice() {
                return Err(fail(format!("input {k}: shape {:?}, want {:?}", g[k].shape(), want.shape)));
            }
            let scale = 1.0 + want.data.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            compare(&vals(&g[k]), &want.data, &|_| 1e-11 * scale)
                .map_err(|e| fail(format!("input {k} (in axes {:?}): {e}", b.axes)))?;
        }
        Ok(())
    }

    /// Whether some batch element makes the program chaotic (`RefRun::chaotic`): the batch's
    /// inputs are other values than the case's, and may reach arguments of `sin` whose rounding
    /// alone changes the result (fuzzer finding: a batch element with `sin(y + e^66)`).
    fn chaotic_batch(&self, b: &Batch) -> bool {
        (0..b.n).any(|i| {
            let inputs: Vec<Tensor> = b.per.iter().map(|p| p[i].clone()).collect();
            reference(self.prog, &inputs, None).chaotic()
        })
    }
}

struct Batch {
    n: usize,
    axes: Vec<Option<isize>>,
    /// Per input, the values of each batch element.
    per: Vec<Vec<Tensor>>,
    /// Per input, the batched array (f64).
    arrays: Vec<Array>,
}

/// Stack tensors of `shape` along a new axis `axis` (`shape` gives the element shape when
/// there are none).
fn stack(ts: &[Tensor], axis: usize, shape: &[usize]) -> Tensor {
    let mut unit = shape.to_vec();
    unit.insert(axis, 1);
    if ts.is_empty() {
        unit[axis] = 0;
        return Tensor::new(&unit, vec![]);
    }
    let parts: Vec<Tensor> = ts.iter().map(|t| t.reshape(&unit)).collect();
    Tensor::concatenate(&parts, axis)
}
