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
