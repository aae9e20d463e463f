//! Graph primitives: [`Identity`] (transform tracers), [`StopGradient`] and [`Depends`].
use crate::primitive::{Op, Primitive};
use crate::{Array, Result};
use std::sync::Arc;

/// Passes its input through unchanged (shares the buffer). Transforms use it to mark the
/// inputs they trace.
#[derive(Debug, Clone, Copy)]
pub struct Identity;

impl Primitive for Identity {
    fn op(&self) -> Op<'_> {
        Op::PassThrough { first: 0 }
    }
    fn name(&self) -> &str {
        "identity"
    }
    fn vjp(&self, _p: &[Array], cotangents: &[Array], _a: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![cotangents[0].clone()])
    }
    fn jvp(&self, _p: &[Array], tangents: &[Array], _a: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![tangents[0].clone()])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok((vec![inputs[0].clone()], vec![axes[0]]))
    }
}

/// Identity whose output receives no gradient: transforms treat it as a constant.
#[derive(Debug, Clone, Copy)]
pub struct StopGradient;

impl Primitive for StopGradient {
    fn op(&self) -> Op<'_> {
        Op::PassThrough { first: 0 }
    }
    fn name(&self) -> &str {
        "stop_gradient"
    }
    fn vjp(&self, primals: &[Array], _c: &[Array], _a: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::zeros_like(&primals[0])])
    }
    fn jvp(&self, _p: &[Array], _t: &[Array], _a: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::zeros_like(&outputs[0])])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok((vec![crate::transforms::stop_gradient(&inputs[0])], vec![axes[0]]))
    }
    fn stops_gradient(&self) -> bool {
        true
    }
}

/// Identity on its first `n` inputs whose node also takes the remaining inputs (the
/// dependencies), so they are computed first. See [`depends`](crate::transforms::depends).
#[derive(Debug, Clone, Copy)]
pub struct Depends {
    /// How many leading inputs are passed through.
    pub n: usize,
}

impl Primitive for Depends {
    fn op(&self) -> Op<'_> {
        Op::PassThrough { first: 0 }
    }
    fn name(&self) -> &str {
        "depends"
    }
    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        Ok(argnums
            .iter()
            .map(|&i| if i < self.n { cotangents[i].clone() } else { crate::ops::zeros_like(&primals[i]) })
            .collect())
    }
    fn jvp(&self, _p: &[Array], tangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        let mut out: Vec<Array> = outputs.iter().map(crate::ops::zeros_like).collect();
        for (t, &i) in tangents.iter().zip(argnums) {
            if i < self.n {
                out[i] = t.clone();
            }
        }
        Ok(out)
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let outs = crate::transforms::depends(&inputs[..self.n], &inputs[self.n..]);
        Ok((outs, axes[..self.n].to_vec()))
    }
}

/// Moves its input to another device; see [`Array::to_device`].
#[derive(Debug, Clone, Copy)]
pub struct ToDevice(pub crate::Device);

impl Primitive for ToDevice {
    fn op(&self) -> Op<'_> {
        Op::ToDevice(self.0)
    }
    fn name(&self) -> &str {
        "to_device"
    }
    fn describe(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "to_device({})", self.0)
    }
    fn vjp(&self, primals: &[Array], cotangents: &[Array], _a: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![cotangents[0].to_device(primals[0].device())])
    }
    fn jvp(&self, _p: &[Array], tangents: &[Array], _a: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        Ok(vec![tangents[0].to_device(self.0)])
    }
    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok((vec![inputs[0].to_device(self.0)], vec![axes[0]]))
    }
}

/// The identity node of a custom function over `inputs ++ forward outputs`; its rules call the
/// user's rules (see [`custom_function`](crate::custom_function)).
#[derive(Debug, Clone)]
pub struct CustomTransforms {
    pub(crate) rules: std::sync::Arc<crate::transforms::custom::CustomRules>,
    pub(crate) n_inputs: usize,
}

impl Primitive for CustomTransforms {
    fn op(&self) -> Op<'_> {
        Op::PassThrough { first: self.n_inputs }
    }
    fn name(&self) -> &str {
        &self.rules.name
    }

    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        use crate::transforms::custom::{check_rule_outputs, RuleResults};
        let n = self.n_inputs;
        let args = &primals[..n];
        // The rule runs on `args ++ cotangents ++ outputs` through `run_lazily`, so a rule that
        // builds a large graph (a chunk's recomputation) is rebuilt when evaluated instead of
        // holding its graph from now on. It sees this node's outputs (not the stop-gradient
        // copies it wraps), so a rule written with the outputs stays differentiable for
        // higher-order transforms.
        let (n_cot, rules) = (cotangents.len(), self.rules.clone());
        let body: crate::transforms::custom::ForwardFn = Arc::new(move |all: &[Array]| {
            let (args, rest) = all.split_at(n);
            let (cots, outs) = rest.split_at(n_cot);
            match &rules.vjp {
                Some(rule) => {
                    let g = rule(args, cots, outs)?;
                    check_rule_outputs(&rules, "vjp", RuleResults::InputCotangents, &g, args)?;
                    Ok(g)
                }
                None => {
                    let f = rules.forward.clone();
                    Ok(crate::transforms::vjp(move |x: &[Array]| f(x), args, cots)?.1)
                }
            }
        });
        let all: Vec<Array> = args.iter().chain(cotangents).chain(outputs).cloned().collect();
        let name = format!("vjp({})", self.rules.name);
        let grads = crate::transforms::custom::run_lazily(&name, body, &all)?;
        Ok(argnums
            .iter()
            .map(|&i| if i < n { grads[i].clone() } else { crate::ops::zeros_like(&primals[i]) })
            .collect())
    }

    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        use crate::transforms::custom::{check_rule_outputs, RuleResults};
        let n = self.n_inputs;
        let args = &primals[..n];
        let mut full: Vec<Array> = args.iter().map(crate::ops::zeros_like).collect();
        for (t, &i) in tangents.iter().zip(argnums) {
            if i < n {
                full[i] = t.clone();
            }
        }
        match &self.rules.jvp {
            Some(rule) => {
                let t = rule(args, &full)?;
                check_rule_outputs(&self.rules, "jvp", RuleResults::OutputTangents, &t, outputs)?;
                Ok(t)
            }
            None => {
                let f = self.rules.forward.clone();
                Ok(crate::transforms::jvp(move |x: &[Array]| f(x), args, &full)?.1)
            }
        }
    }

    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let n = self.n_inputs;
        let (args, arg_axes) = (&inputs[..n], &axes[..n]);
        if arg_axes.iter().all(|a| a.is_none()) {
            return Ok((inputs[n..].to_vec(), axes[n..].to_vec()));
        }
        if let Some(rule) = &self.rules.vmap {
            use crate::transforms::custom::{count, count_irregular};
            let (outs, oaxes) = rule(args, arg_axes)?;
            let n_out = inputs.len() - n;
            if outs.len() != n_out || oaxes.len() != n_out {
                return Err(crate::transforms::custom::rule_error(
                    &self.rules,
                    "vmap",
                    format!(
                        "returned {} and {}, but the function has {} (one array and one batch axis per \
                         output are expected)",
                        count(outs.len(), "output"),
                        count_irregular(oaxes.len(), "batch axis", "batch axes"),
                        count(n_out, "output")
                    ),
                ));
            }
            // each output must be the unbatched output with the batch axis inserted
            let batch = args.iter().zip(arg_axes).find_map(|(x, a)| a.map(|a| x.shape()[a])).unwrap_or(0);
            // (inputs[n..] are the forward outputs as the vmap trace sees them: batched along
            // axes[n..] where they depend on batched inputs)
            for (j, ((o, a), (y, y_ax))) in outs.iter().zip(&oaxes).zip(inputs[n..].iter().zip(&axes[n..])).enumerate()
            {
                let mut want = y.shape().to_vec();
                if let Some(ax) = y_ax {
                    want.remove(*ax);
                }
                let unbatched = want.clone();
                let ok_axis = match a {
                    Some(a) if *a <= want.len() => {
                        want.insert(*a, batch);
                        true
                    }
                    Some(_) => false,
                    None => true,
                };
                if !ok_axis || o.shape() != want.as_slice() || o.dtype() != y.dtype() {
                    return Err(crate::transforms::custom::rule_error(
                        &self.rules,
                        "vmap",
                        format!(
                            "returned output {j} of shape {:?} and dtype {} with batch axis {a:?}, but output \
                             {j} must be the unbatched shape {:?} with a batch axis of size {batch} inserted, in \
                             dtype {}",
                            o.shape(),
                            o.dtype(),
                            unbatched,
                            y.dtype()
                        ),
                    ));
                }
            }
            return Ok((outs, oaxes));
        }
        let (rules, args) = crate::transforms::custom::batched_rules(&self.rules, args, arg_axes, inputs.len() - n);
        let outs = crate::transforms::custom::call_custom(&rules, &args)?;
        let k = outs.len();
        Ok((outs, vec![Some(0); k]))
    }
}

/// A function applied lazily: the node stands for `body(inputs)`, and its graph is built only
/// while the node is evaluated. Evaluating it runs `body` on the computed inputs, evaluates what
/// `body` built and keeps only the results, so the graph between the inputs and the outputs
/// exists for the duration of one node's computation instead of from the moment the program
/// built it until evaluation reached it.
///
/// Custom functions use it for forwards and VJP rules that build large graphs (a chunk of a
/// recurrence): a backward pass over many chunks then holds one node per chunk rather than
/// every chunk's recomputation at once. Its rules transform `body` itself (traced on the
/// node's inputs), so higher-order transforms see through it.
#[derive(Clone)]
pub struct Call {
    pub(crate) name: String,
    pub(crate) body: crate::transforms::custom::ForwardFn,
    pub(crate) n_outputs: usize,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "call({}, {} outputs)", self.name, self.n_outputs)
    }
}

impl Primitive for Call {
    fn op(&self) -> Op<'_> {
        Op::Call(self)
    }
    fn name(&self) -> &str {
        &self.name
    }

    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        let body = self.body.clone();
        let (_, grads) = crate::transforms::vjp(move |x: &[Array]| body(x), primals, cotangents)?;
        Ok(argnums.iter().map(|&i| grads[i].clone()).collect())
    }

    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], _o: &[Array]) -> Result<Vec<Array>> {
        let mut full: Vec<Array> = primals.iter().map(crate::ops::zeros_like).collect();
        for (t, &i) in tangents.iter().zip(argnums) {
            full[i] = t.clone();
        }
        let body = self.body.clone();
        Ok(crate::transforms::jvp(move |x: &[Array]| body(x), primals, &full)?.1)
    }

    fn vmap(&self, inputs: &[Array], axes: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let in_axes: Vec<Option<isize>> = axes.iter().map(|a| a.map(|a| a as isize)).collect();
        let out_axes = vec![Some(0isize); self.n_outputs];
        let outs = crate::transforms::vmap_call(&*self.body, &in_axes, &out_axes, inputs)?;
        Ok((outs, vec![Some(0); self.n_outputs]))
    }
}
