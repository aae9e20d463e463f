//! `grad`, `value_and_grad` and their argnums / aux variants; Jacobians, Hessians and
//! Hessian-vector products built from `vjp`, `jvp` and `vmap`.
use super::vjp::{backward, trace};
use super::IntoOutputs;
use crate::{Array, DType, Error, Result};
use std::sync::Arc;

/// A type-erased transformable function.
type SharedFn = Arc<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync>;

/// Which inputs to differentiate.
fn pick(grads: Vec<Array>, argnums: Option<&[usize]>) -> Result<Vec<Array>> {
    match argnums {
        None => Ok(grads),
        Some(a) => a
            .iter()
            .map(|&i| {
                grads.get(i).cloned().ok_or_else(|| {
                    Error::Transform(format!(
                        "argnums: input {i} requested but the function got {} inputs",
                        grads.len()
                    ))
                })
            })
            .collect(),
    }
}

/// The shared core of every `grad` variant: outputs and gradients of the first output.
pub(crate) fn value_and_grad_impl<F, O>(
    f: &F,
    args: &[Array],
    argnums: Option<&[usize]>,
) -> Result<(Vec<Array>, Vec<Array>)>
where
    F: Fn(&[Array]) -> O + ?Sized,
    O: IntoOutputs,
{
    let t = trace(f, args)?;
    let Some(out) = t.outputs.first() else {
        return Err(Error::Transform("grad: the function returned no outputs".into()));
    };
    if out.size() != 1 {
        return Err(Error::Transform(format!(
            "grad: the function's first output must be a scalar to be differentiated, but it has shape {:?}; \
             use vjp or jacobian for non-scalar outputs",
            out.shape()
        )));
    }
    if !out.dtype().is_float() {
        return Err(Error::Transform(format!(
            "grad: the function's first output has dtype {}, but only float outputs can be differentiated",
            out.dtype()
        )));
    }
    let mut seeds: Vec<Option<Array>> = vec![None; t.outputs.len()];
    seeds[0] = Some(crate::ops::ones_like(out));
    let grads = backward(&t, &seeds)?;
    let grads = pick(grads, argnums)?;
    Ok((t.outputs, grads))
}

/// The gradient of `f`'s first output (a scalar) with respect to every input.
///
/// Returns a function of the same inputs; it is `Send + Sync + Clone + 'static` and can itself
/// be transformed (`grad(grad(f))` is the second derivative).
///
/// ```
/// use cotangent::{self as ct, Array};
/// let df = ct::grad(|x: &[Array]| (x[0].sin() * &x[1]).sum_all());
/// let g = df(&[Array::scalar(0.0f64), Array::scalar(2.0f64)]).unwrap();
/// assert_eq!(g[0].item::<f64>().unwrap(), 2.0); // cos(0) * 2
/// let d2 = ct::grad(ct::grad(|x: &[Array]| x[0].power(3.0)));
/// assert_eq!(d2(&[Array::scalar(2.0f64)]).unwrap()[0].item::<f64>().unwrap(), 12.0);
/// ```
pub fn grad<F, O>(f: F) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let f = Arc::new(f);
    move |args: &[Array]| value_and_grad_impl(&*f, args, None).map(|(_, g)| g)
}

/// Like [`grad`], differentiating only the inputs listed in `argnums` (gradients in that order).
pub fn grad_argnums<F, O>(
    f: F,
    argnums: &[usize],
) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let f = Arc::new(f);
    let argnums: Arc<[usize]> = argnums.into();
    move |args: &[Array]| value_and_grad_impl(&*f, args, Some(&argnums)).map(|(_, g)| g)
}

/// Like [`grad`] for a function whose first output is the scalar to differentiate and whose
/// other outputs are auxiliary values: returns `(gradients, aux outputs)`.
pub fn grad_with_aux<F, O>(
    f: F,
) -> impl Fn(&[Array]) -> Result<(Vec<Array>, Vec<Array>)> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let f = Arc::new(f);
    move |args: &[Array]| value_and_grad_impl(&*f, args, None).map(|(mut o, g)| (g, o.split_off(1)))
}

/// The outputs of `f` and the gradient of its first output (a scalar) with respect to every
/// input: `(outputs, gradients)`. Outputs after the first are auxiliary values, returned but
/// not differentiated.
///
/// ```
/// use cotangent::{self as ct, Array};
/// let vg = ct::value_and_grad(|x: &[Array]| vec![x[0].square().sum_all(), x[0].max_all()]);
/// let (outs, g) = vg(&[Array::from_slice(&[1.0f32, -3.0], &[2])]).unwrap();
/// assert_eq!(outs[0].item::<f32>().unwrap(), 10.0);
/// assert_eq!(outs[1].item::<f32>().unwrap(), 1.0); // aux output
/// assert_eq!(g[0].to_vec::<f32>().unwrap(), vec![2.0, -6.0]);
/// ```
pub fn value_and_grad<F, O>(
    f: F,
) -> impl Fn(&[Array]) -> Result<(Vec<Array>, Vec<Array>)> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let f = Arc::new(f);
    move |args: &[Array]| value_and_grad_impl(&*f, args, None)
}

/// Like [`value_and_grad`], differentiating only the inputs listed in `argnums`.
pub fn value_and_grad_argnums<F, O>(
    f: F,
    argnums: &[usize],
) -> impl Fn(&[Array]) -> Result<(Vec<Array>, Vec<Array>)> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let f = Arc::new(f);
    let argnums: Arc<[usize]> = argnums.into();
    move |args: &[Array]| value_and_grad_impl(&*f, args, Some(&argnums))
}

/// Identity matrix rows reshaped to `[n, *shape]`: the basis used to build Jacobians.
fn basis(shape: &[usize], dtype: DType) -> Array {
    let n = crate::shape::numel(shape);
    let mut s = vec![n];
    s.extend_from_slice(shape);
    crate::ops::eye(n, n, 0, dtype).reshape_exact(&s)
}

/// Reverse-mode Jacobian of `f`'s first output with respect to every input: for input `i` an
/// array of shape `out.shape ++ input_i.shape`. One batched VJP (vmap over the output basis).
pub fn jacobian<F, O>(f: F) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    jacrev(f)
}

/// Reverse-mode Jacobian (see [`jacobian`]).
pub fn jacrev<F, O>(f: F) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let f: SharedFn = Arc::new(move |x: &[Array]| f(x).into_outputs());
    move |args: &[Array]| {
        let out = f(args)?.into_iter().next().ok_or_else(|| Error::Transform("jacobian: no outputs".into()))?;
        let primals: Arc<[Array]> = args.into();
        let f2 = f.clone();
        let pullback = move |c: &[Array]| -> Result<Vec<Array>> {
            let f3 = f2.clone();
            let first = move |x: &[Array]| -> Result<Array> { Ok(f3(x)?.remove(0)) };
            Ok(super::vjp(first, &primals, &[c[0].clone()])?.1)
        };
        let rows = super::vmap(pullback, &[Some(0)], &[Some(0)])(&[basis(out.shape(), out.dtype())])?;
        Ok(rows
            .into_iter()
            .zip(args)
            .map(|(r, x)| {
                let mut s = out.shape().to_vec();
                s.extend_from_slice(x.shape());
                r.reshape_exact(&s)
            })
            .collect())
    }
}

/// Forward-mode Jacobian of `f`'s first output with respect to every input (same layout as
/// [`jacobian`]): one batched JVP per input (vmap over the input basis).
pub fn jacfwd<F, O>(f: F) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let f: SharedFn = Arc::new(move |x: &[Array]| f(x).into_outputs());
    move |args: &[Array]| {
        let mut jac = Vec::with_capacity(args.len());
        for (i, x) in args.iter().enumerate() {
            let primals: Arc<[Array]> = args.into();
            let f2 = f.clone();
            let push = move |t: &[Array]| -> Result<Vec<Array>> {
                let tangents: Vec<Array> = primals
                    .iter()
                    .enumerate()
                    .map(|(j, p)| if j == i { t[0].clone() } else { crate::ops::zeros_like(p) })
                    .collect();
                let (_, mut tout) = super::jvp(|a: &[Array]| f2(a), &primals, &tangents)?;
                Ok(vec![tout.remove(0)])
            };
            let cols = super::vmap(push, &[Some(0)], &[Some(-1)])(&[basis(x.shape(), x.dtype())])?;
            let c = &cols[0];
            let mut s = c.shape()[..c.ndim() - 1].to_vec();
            s.extend_from_slice(x.shape());
            jac.push(c.reshape_exact(&s));
        }
        Ok(jac)
    }
}

/// The Hessian of `f`'s first output (a scalar) with respect to its first input, of shape
/// `x.shape ++ x.shape`, computed forward-over-reverse (`jacfwd(grad(f))`).
pub fn hessian<F, O>(f: F) -> impl Fn(&[Array]) -> Result<Array> + Send + Sync + Clone + 'static
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let g = grad_argnums(f, &[0]);
    let j = jacfwd(g);
    move |args: &[Array]| Ok(j(args)?.remove(0))
}

/// Hessian-vector products of `f`'s first output (a scalar): `H · v` for each input, with one
/// vector per input, computed forward-over-reverse (`jvp` of `grad`).
pub fn hvp<F, O>(f: F, primals: &[Array], vectors: &[Array]) -> Result<Vec<Array>>
where
    F: Fn(&[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    Ok(super::jvp(grad(f), primals, vectors)?.1)
}
