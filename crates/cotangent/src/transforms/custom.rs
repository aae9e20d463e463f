//! Custom functions: a forward closure plus optional VJP, JVP and vmap rules.
//!
//! Calling a built custom function runs the forward, wraps its outputs in `stop_gradient`, and
//! adds a `CustomTransforms` identity node over `inputs ++ outputs` whose transformation rules
//! call the user's rules. The forward outputs are computed once and handed to the VJP rule.
use super::IntoOutputs;
use crate::primitives::graph::{Call, CustomTransforms};
use crate::{Array, Error, Result};
use std::sync::Arc;

pub(crate) type ForwardFn = Arc<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync>;
pub(crate) type VjpFn = Arc<dyn Fn(&[Array], &[Array], &[Array]) -> Result<Vec<Array>> + Send + Sync>;
pub(crate) type JvpFn = Arc<dyn Fn(&[Array], &[Array]) -> Result<Vec<Array>> + Send + Sync>;
/// A batching rule: `(inputs, axes) -> (outputs, out_axes)`.
pub type VmapRuleResult = Result<(Vec<Array>, Vec<Option<usize>>)>;
pub(crate) type VmapFn = Arc<dyn Fn(&[Array], &[Option<usize>]) -> VmapRuleResult + Send + Sync>;

/// The forward and rules of one custom function, shared by every call.
pub(crate) struct CustomRules {
    pub(crate) name: String,
    /// Where the program called [`custom_function`] (or [`checkpoint`]): error messages name it.
    pub(crate) location: &'static std::panic::Location<'static>,
    pub(crate) forward: ForwardFn,
    pub(crate) vjp: Option<VjpFn>,
    pub(crate) jvp: Option<JvpFn>,
    pub(crate) vmap: Option<VmapFn>,
}

impl std::fmt::Debug for CustomRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "custom_function({} at {}, vjp: {}, jvp: {}, vmap: {})",
            self.name,
            self.location,
            self.vjp.is_some(),
            self.jvp.is_some(),
            self.vmap.is_some()
        )
    }
}

/// Builder returned by [`custom_function`]; add rules, then [`build`](CustomFunction::build).
pub struct CustomFunction {
    rules: CustomRules,
}

/// Start a custom function from its forward computation.
///
/// Rules are optional. A missing rule falls back to transforming the forward itself, exactly:
/// without a VJP rule the backward pass re-traces the forward and differentiates it (so the
/// forward runs again); without a JVP rule the forward is pushed forward with `jvp`; without a
/// vmap rule the forward is vmapped and the VJP/JVP rules are vmapped with it, so custom
/// gradients survive batching.
///
/// The built function is `Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static`;
/// a forward or rule that is not `Send + Sync` (say, one capturing an `Rc`) does not compile.
///
/// **Errors name the line that built the function.** A rule that returns the wrong number of
/// arrays, or an array of the wrong shape or dtype, makes the transform return
/// [`Error::CustomRule`], whose message names the function, the rule and the line where
/// `custom_function` was called, e.g. "the vjp rule of custom function `f` (built at
/// src/main.rs:7:13) returned 1 array, but the function has 2 inputs (one cotangent per input
/// is expected)".
///
/// **Large forwards and rules are rebuilt when evaluated.** A forward or VJP rule that builds
/// more than 256 nodes (a chunk of a recurrence, a checkpointed block) is run once when called,
/// to learn and check its outputs, and its graph is then replaced by a single node that runs
/// it again when evaluated (the outputs are still computed once). So a backward pass over many
/// chunks holds one node per chunk until evaluation, and each chunk's recomputation exists only
/// while it runs. Forwards and rules must therefore be pure functions of their inputs, which
/// they are when randomness comes from explicit keys; higher-order transforms trace the rule
/// as usual.
///
/// ```
/// use cotangent::{self as ct, Array};
/// let softplus = ct::custom_function(|x: &[Array]| (x[0].exp() + 1.0).log())
///     .vjp(|_primals, cotangents, outputs| vec![&cotangents[0] * (1.0 - (-&outputs[0]).exp())])
///     .jvp(|primals, tangents| vec![&tangents[0] * primals[0].sigmoid()])
///     .name("softplus")
///     .build();
/// let g = ct::grad(move |x: &[Array]| softplus(x).map(|y| y[0].sum_all()));
/// let d = g(&[Array::scalar(0.0f64)]).unwrap();
/// assert!((d[0].item::<f64>().unwrap() - 0.5).abs() < 1e-12);
/// ```
#[track_caller]
pub fn custom_function<F, O>(forward: F) -> CustomFunction
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    CustomFunction {
        rules: CustomRules {
            name: "custom_function".into(),
            location: std::panic::Location::caller(),
            forward: Arc::new(move |x: &[Array]| forward(x).into_outputs()),
            vjp: None,
            jvp: None,
            vmap: None,
        },
    }
}

impl CustomFunction {
    /// The VJP rule `(primals, cotangents, outputs) -> input cotangents` (one per input).
    /// `outputs` are the forward's results, computed once by the forward pass.
    pub fn vjp<R, V>(mut self, rule: R) -> Self
    where
        R: Fn(&[Array], &[Array], &[Array]) -> V + Send + Sync + 'static,
        V: IntoOutputs,
    {
        self.rules.vjp = Some(Arc::new(move |p: &[Array], c: &[Array], o: &[Array]| rule(p, c, o).into_outputs()));
        self
    }

    /// The VJP rule in its two-argument form `(primals, cotangents)`, for rules that do not
    /// need the forward outputs.
    pub fn vjp_no_outputs<R, V>(mut self, rule: R) -> Self
    where
        R: Fn(&[Array], &[Array]) -> V + Send + Sync + 'static,
        V: IntoOutputs,
    {
        self.rules.vjp = Some(Arc::new(move |p: &[Array], c: &[Array], _o: &[Array]| rule(p, c).into_outputs()));
        self
    }

    /// The JVP rule `(primals, tangents) -> output tangents` (one tangent per input is given;
    /// inputs that are constant get zeros).
    pub fn jvp<R, V>(mut self, rule: R) -> Self
    where
        R: Fn(&[Array], &[Array]) -> V + Send + Sync + 'static,
        V: IntoOutputs,
    {
        self.rules.jvp = Some(Arc::new(move |p: &[Array], t: &[Array]| rule(p, t).into_outputs()));
        self
    }

    /// The batching rule `(inputs, axes) -> (outputs, out_axes)`: `axes[i]` is the batch axis
    /// of input `i` (`None` if unbatched).
    pub fn vmap<R>(mut self, rule: R) -> Self
    where
        R: Fn(&[Array], &[Option<usize>]) -> VmapRuleResult + Send + Sync + 'static,
    {
        self.rules.vmap = Some(Arc::new(rule));
        self
    }

    /// A name used in error messages.
    pub fn name(mut self, name: &str) -> Self {
        self.rules.name = name.to_string();
        self
    }

    /// The custom function, a pure value: `Send + Sync + Clone + 'static`.
    pub fn build(self) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static {
        let rules = Arc::new(self.rules);
        move |args: &[Array]| call_custom(&rules, args)
    }
}

/// Forwards and VJP rules that build at most this many nodes keep their graph; larger ones are
/// rebuilt when evaluated (see [`run_lazily`]).
pub(crate) const INLINE_NODES: u64 = 256;

/// Run `body` on `inputs`. If it built a large graph (more than [`INLINE_NODES`] nodes) whose
/// outputs are not computed yet, drop that graph and return the outputs of one lazy
/// [`Call`] node instead, which runs `body` again when it is evaluated.
///
/// This is what makes a custom function per chunk of a recurrence cheap in memory: a backward
/// pass over many chunks holds one node per chunk, and each chunk's recomputation and backward
/// exist only while that node is evaluated. Running `body` once here checks its outputs (and
/// reports a bad rule when the transform is called); values are identical either way, since
/// forwards and rules are pure functions of their inputs.
pub(crate) fn run_lazily(name: &str, body: ForwardFn, inputs: &[Array]) -> Result<Vec<Array>> {
    let before = crate::array::nodes_created();
    let outs = body(inputs)?;
    let built = crate::array::nodes_created() - before;
    if built <= INLINE_NODES || outs.iter().all(Array::is_evaluated) {
        return Ok(outs);
    }
    let specs = outs.iter().map(|o| o.spec().clone()).collect();
    let n_outputs = outs.len();
    drop(outs);
    let call = Call { name: name.to_string(), body, n_outputs };
    Ok(Array::from_primitive_multi(call, inputs.to_vec(), specs))
}

/// Run a custom function on `args`.
pub(crate) fn call_custom(rules: &Arc<CustomRules>, args: &[Array]) -> Result<Vec<Array>> {
    let outs = run_lazily(&rules.name, rules.forward.clone(), args)?;
    if outs.is_empty() {
        return Err(rule_error(
            rules,
            "forward",
            "returned no outputs, but a custom function needs at least one".into(),
        ));
    }
    let ys: Vec<Array> = outs.iter().map(super::stop_gradient).collect();
    let specs = ys.iter().map(|y| y.spec().clone()).collect();
    let inputs: Vec<Array> = args.iter().chain(&ys).cloned().collect();
    Ok(Array::from_primitive_multi(CustomTransforms { rules: rules.clone(), n_inputs: args.len() }, inputs, specs))
}

/// An [`Error::CustomRule`] of `rules`' function: `message` continues the sentence "the
/// `rule` rule of custom function `name` (built at `location`) ...".
pub(crate) fn rule_error(rules: &CustomRules, rule: &'static str, message: String) -> Error {
    Error::CustomRule { name: rules.name.clone(), location: rules.location.to_string(), rule, message }
}

/// `n` and `noun`, plural unless `n` is one: "1 array", "2 arrays", "0 inputs".
pub(crate) fn count(n: usize, noun: &str) -> String {
    count_irregular(n, noun, &format!("{noun}s"))
}

/// `n` and `one` or `many`: "1 batch axis", "2 batch axes".
pub(crate) fn count_irregular(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What a rule's results stand for: a VJP rule returns a cotangent per input, a JVP rule a
/// tangent per output.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RuleResults {
    /// One cotangent per input of the function.
    InputCotangents,
    /// One tangent per output of the function.
    OutputTangents,
}

/// Check that a rule returned one array per expected array with matching shape and dtype.
pub(crate) fn check_rule_outputs(
    rules: &CustomRules,
    rule: &'static str,
    what: RuleResults,
    got: &[Array],
    expected: &[Array],
) -> Result<()> {
    let (array, per) = match what {
        RuleResults::InputCotangents => ("cotangent", "input"),
        RuleResults::OutputTangents => ("tangent", "output"),
    };
    if got.len() != expected.len() {
        return Err(rule_error(
            rules,
            rule,
            format!(
                "returned {}, but the function has {} (one {array} per {per} is expected)",
                count(got.len(), "array"),
                count(expected.len(), per)
            ),
        ));
    }
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        if g.shape() != e.shape() || g.dtype() != e.dtype() {
            return Err(rule_error(
                rules,
                rule,
                format!(
                    "returned a {array} of shape {:?} and dtype {} for {per} {i}, which has shape {:?} and dtype {}",
                    g.shape(),
                    g.dtype(),
                    e.shape(),
                    e.dtype()
                ),
            ));
        }
    }
    Ok(())
}

/// `f` with gradient checkpointing: the forward keeps only its inputs and outputs, and the
/// backward pass recomputes `f` on `depends(inputs, outputs)` (so the recomputation runs after
/// the forward outputs exist) and differentiates it. Same values and gradients as `f`, with
/// the intermediates of `f` freed between the forward and the backward pass.
///
/// ```
/// use cotangent::{self as ct, Array};
/// let block = ct::checkpoint(|x: &[Array]| x[0].tanh().exp().sum_all());
/// let g = ct::grad(move |x: &[Array]| block(x).map(|mut y| y.remove(0)));
/// let x = Array::from_slice(&[0.1f64, 0.2], &[2]);
/// let plain = ct::grad(|x: &[Array]| x[0].tanh().exp().sum_all());
/// assert_eq!(g(&[x.clone()]).unwrap()[0].to_vec::<f64>().unwrap(), plain(&[x]).unwrap()[0].to_vec::<f64>().unwrap());
/// ```
#[track_caller]
pub fn checkpoint<F, O>(f: F) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let f: ForwardFn = Arc::new(move |x: &[Array]| f(x).into_outputs());
    let g = f.clone();
    custom_function(move |x: &[Array]| f(x))
        .vjp(move |primals, cotangents, outputs| {
            let inputs = super::depends(primals, outputs);
            let g = g.clone();
            super::vjp(move |x: &[Array]| g(x), &inputs, cotangents).map(|(_, v)| v)
        })
        .name("checkpoint")
        .build()
}

/// Rules of the batched version of a custom function that has no vmap rule: the forward and
/// the VJP / JVP rules are vmapped (batch axis 0), so custom gradients survive batching.
/// Returns the new rules and the arguments with batch axes moved to the front.
pub(crate) fn batched_rules(
    rules: &Arc<CustomRules>,
    args: &[Array],
    axes: &[Option<usize>],
    n_out: usize,
) -> (Arc<CustomRules>, Vec<Array>) {
    let n = args.len();
    let moved: Vec<Array> =
        args.iter().zip(axes).map(|(x, a)| a.map_or_else(|| x.clone(), |a| x.moveaxis(a as isize, 0))).collect();
    let in_ax: Vec<Option<isize>> = axes.iter().map(|a| a.map(|_| 0)).collect();
    let fwd = rules.forward.clone();
    let forward = super::vmap(move |x: &[Array]| fwd(x), &in_ax, &[Some(0)]);
    let vjp = rules.vjp.clone().map(|rule| -> VjpFn {
        let mut ax = in_ax.clone();
        ax.extend(std::iter::repeat_n(Some(0), 2 * n_out));
        let batched =
            super::vmap(move |all: &[Array]| rule(&all[..n], &all[n..n + n_out], &all[n + n_out..]), &ax, &[Some(0)]);
        let unbatched: Vec<bool> = in_ax.iter().map(|a| a.is_none()).collect();
        Arc::new(move |p: &[Array], c: &[Array], o: &[Array]| {
            let all: Vec<Array> = p.iter().chain(c).chain(o).cloned().collect();
            let g = batched(&all)?;
            // an unbatched input's cotangent is the sum over the batch
            Ok(g.into_iter().zip(&unbatched).map(|(g, &u)| if u { g.sum(&[0], false) } else { g }).collect())
        })
    });
    let jvp = rules.jvp.clone().map(|rule| -> JvpFn {
        let mut ax = in_ax.clone();
        ax.extend(in_ax.iter().cloned());
        let batched = super::vmap(move |all: &[Array]| rule(&all[..n], &all[n..]), &ax, &[Some(0)]);
        Arc::new(move |p: &[Array], t: &[Array]| {
            let all: Vec<Array> = p.iter().chain(t).cloned().collect();
            batched(&all)
        })
    });
    let rules = CustomRules {
        name: format!("vmap({})", rules.name),
        location: rules.location,
        forward: Arc::new(move |x: &[Array]| forward(x)),
        vjp,
        jvp,
        vmap: None,
    };
    (Arc::new(rules), moved)
}
