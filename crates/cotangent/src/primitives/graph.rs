//! Graph primitives: [`Identity`] (transform tracers), [`StopGradient`] and [`Depends`].
use crate::backend::cpu::Data;
use crate::primitive::{Primitive, Spec};
use crate::{Array, Result};

/// Passes its input through unchanged (shares the buffer). Transforms use it to mark the
/// inputs they trace.
#[derive(Debug, Clone, Copy)]
pub struct Identity;

impl Primitive for Identity {
    fn name(&self) -> String {
        "identity".into()
    }
    fn eval_cpu(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        Ok(vec![inputs[0].computed_data()?.clone()])
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
    fn name(&self) -> String {
        "stop_gradient".into()
    }
    fn eval_cpu(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        Ok(vec![inputs[0].computed_data()?.clone()])
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
    fn name(&self) -> String {
        "depends".into()
    }
    fn eval_cpu(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        inputs[..self.n].iter().map(|x| x.computed_data().cloned()).collect()
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

/// The identity node of a custom function over `inputs ++ forward outputs`; its rules call the
/// user's rules (see [`custom_function`](crate::custom_function)).
#[derive(Debug, Clone)]
pub struct CustomTransforms {
    pub(crate) rules: std::sync::Arc<crate::transforms::custom::CustomRules>,
    pub(crate) n_inputs: usize,
}

impl Primitive for CustomTransforms {
    fn name(&self) -> String {
        self.rules.name.clone()
    }

    fn eval_cpu(&self, inputs: &[Array], _outputs: &[Spec]) -> Result<Vec<Data>> {
        inputs[self.n_inputs..].iter().map(|y| y.computed_data().cloned()).collect()
    }

    fn vjp(&self, primals: &[Array], cotangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        use crate::transforms::custom::check_rule_outputs;
        let n = self.n_inputs;
        let args = &primals[..n];
        let grads = match &self.rules.vjp {
            Some(rule) => {
                // The rule sees this node's outputs (not the stop-gradient copies it wraps), so a
                // rule written with the outputs stays differentiable for higher-order transforms.
                let g = rule(args, cotangents, outputs)?;
                check_rule_outputs(&self.rules, "vjp", "input cotangents", &g, args)?;
                g
            }
            None => {
                let f = self.rules.forward.clone();
                crate::transforms::vjp(move |x: &[Array]| f(x), args, cotangents)?.1
            }
        };
        Ok(argnums
            .iter()
            .map(|&i| if i < n { grads[i].clone() } else { crate::ops::zeros_like(&primals[i]) })
            .collect())
    }

    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize], outputs: &[Array]) -> Result<Vec<Array>> {
        use crate::transforms::custom::check_rule_outputs;
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
                check_rule_outputs(&self.rules, "jvp", "output tangents", &t, outputs)?;
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
            let (outs, oaxes) = rule(args, arg_axes)?;
            let n_out = inputs.len() - n;
            if outs.len() != n_out || oaxes.len() != n_out {
                return Err(crate::transforms::custom::rule_error(
                    &self.rules,
                    "vmap",
                    format!("returned {} outputs and {} axes, expected {n_out}", outs.len(), oaxes.len()),
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
                            "output {j} has shape {:?}, dtype {} and batch axis {a:?}, expected the unbatched \
                             shape {:?} with a batch axis of size {batch} and dtype {}",
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
