//! Tree-aware transforms: [`grad_tree`], [`value_and_grad_tree`] and [`vmap_tree`] take a
//! function of `(&params, &batch)` structures ([`ArrayTree`]s) and return results in the same
//! structures. Each flattens its structures to leaves, runs the positional transform on a
//! function of the leaves that rebuilds the structures and calls yours, and rebuilds its
//! results; so they compose with every positional transform, custom function and checkpoint.
use super::grad::value_and_grad_impl;
use super::vmap::vmap_call;
use super::IntoOutputs;
use crate::tree::{ArrayTree, IntoTree};
use crate::{Array, Result};
use std::cell::RefCell;
use std::sync::Arc;

/// The gradient of `loss(params, batch)`'s first output (a scalar) with respect to every array
/// of `params`, in the structure of `params`.
///
/// `params` is any [`ArrayTree`] (a `BTreeMap` of tuples, a `Vec`, your own struct,
/// `cotangent_nn::Tree`); `batch` is anything (`&[Array]`, a tuple, a struct, `()`): its arrays
/// are constants of the differentiation. The loss may return what a positional transform's
/// function returns (an `Array`, a `Vec<Array>`, or a `Result` of either). The returned function
/// is `Send + Sync + Clone + 'static` and transforms further: `grad_tree` of a function that
/// calls it is a second derivative, and [`vmap_tree`] of it gives per-example gradients.
///
/// ```
/// use cotangent::{self as ct, Array};
/// use std::collections::BTreeMap;
///
/// // a linear model y = w·x + b, squared error against a target
/// let params = BTreeMap::from([
///     ("w".to_string(), Array::from_slice(&[1.0f64, -1.0], &[2])),
///     ("b".to_string(), Array::scalar(0.5f64)),
/// ]);
/// let loss = |p: &BTreeMap<String, Array>, (x, y): &(Array, Array)| {
///     ((&p["w"] * x).sum_all() + &p["b"] - y).square()
/// };
/// let batch = (Array::from_slice(&[2.0f64, 3.0], &[2]), Array::scalar(1.0f64));
/// let grads = ct::grad_tree(loss)(&params, &batch)?;
/// // residual r = (2 - 3 + 0.5) - 1 = -1.5; d/dw = 2 r x, d/db = 2 r
/// assert_eq!(grads["w"].to_vec::<f64>()?, vec![-6.0, -9.0]);
/// assert_eq!(grads["b"].item::<f64>()?, -3.0);
/// # Ok::<(), ct::Error>(())
/// ```
pub fn grad_tree<P, B, F, O>(loss: F) -> impl Fn(&P, &B) -> Result<P> + Send + Sync + Clone + 'static
where
    P: ArrayTree + 'static,
    B: ?Sized + 'static,
    F: Fn(&P, &B) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let value_and_grad = value_and_grad_tree(loss);
    move |params: &P, batch: &B| value_and_grad(params, batch).map(|(_, grads)| grads)
}

/// The outputs of `loss(params, batch)` and the gradient of its first output (a scalar) with
/// respect to every array of `params`, in the structure of `params`: `(outputs, gradients)`.
///
/// As [`grad_tree`], also returning the loss function's outputs; outputs after the first are
/// auxiliary values (returned, not differentiated), as in [`value_and_grad`](crate::value_and_grad).
///
/// ```
/// use cotangent::{self as ct, Array};
///
/// // params: a weight matrix and a list of biases; the loss also returns the prediction
/// let params = (Array::from_slice(&[1.0f32, 2.0], &[1, 2]), vec![Array::scalar(1.0f32)]);
/// let loss = |(w, biases): &(Array, Vec<Array>), x: &[Array]| {
///     let prediction = w.matmul(&x[0]).sum_all() + &biases[0];
///     vec![prediction.square(), prediction]
/// };
/// let x = Array::from_slice(&[3.0f32, 4.0], &[2, 1]);
/// let (outputs, (dw, dbiases)) = ct::value_and_grad_tree(loss)(&params, &[x])?;
/// assert_eq!(outputs[1].item::<f32>()?, 12.0); // 1·3 + 2·4 + 1
/// assert_eq!(outputs[0].item::<f32>()?, 144.0);
/// assert_eq!(dw.to_vec::<f32>()?, vec![72.0, 96.0]); // 2·12·x
/// assert_eq!(dbiases[0].item::<f32>()?, 24.0);
/// # Ok::<(), ct::Error>(())
/// ```
pub fn value_and_grad_tree<P, B, F, O>(
    loss: F,
) -> impl Fn(&P, &B) -> Result<(Vec<Array>, P)> + Send + Sync + Clone + 'static
where
    P: ArrayTree + 'static,
    B: ?Sized + 'static,
    F: Fn(&P, &B) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let loss = Arc::new(loss);
    move |params: &P, batch: &B| {
        let of_leaves = |leaves: &[Array]| -> Result<Vec<Array>> {
            let rebuilt = params.with_leaves(leaves.to_vec())?;
            loss(&rebuilt, batch).into_outputs()
        };
        let (outputs, grads) = value_and_grad_impl(&of_leaves, &params.leaves(), None)?;
        Ok((outputs, params.with_leaves(grads)?))
    }
}

/// Vectorise `f(params, batch)` over a batch axis of its structured inputs; the result has
/// the structure `f` returns.
///
/// `in_axes = (params_axis, batch_axis)` gives one batch axis for every array of `params` and
/// one for every array of `batch` (`None`: that structure is not batched, passed whole to every
/// batch element). `out_axis` is where every output array gets the batch axis (`None`: the
/// outputs must not depend on batched inputs). Negative axes count from the end. `f` returns
/// an [`ArrayTree`] or a `Result` of one, so `vmap_tree(grad_tree(loss), (None, Some(0)),
/// Some(0))` gives per-example gradients in the structure of the parameters. A structure with
/// nothing to batch can be `()`.
///
/// ```
/// use cotangent::{self as ct, Array};
///
/// // per-example gradients of (w·x)² for a batch of three examples
/// let loss = |w: &Array, x: &Array| (w * x).sum_all().square();
/// let per_example = ct::vmap_tree(ct::grad_tree(loss), (None, Some(0)), Some(0));
/// let w = Array::from_slice(&[1.0f64, 2.0], &[2]);
/// let xs = Array::from_slice(&[1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
/// let grads: Array = per_example(&w, &xs)?;
/// // d/dw = 2 (w·x) x for each row
/// assert_eq!(grads.to_vec::<f64>()?, vec![2.0, 0.0, 0.0, 4.0, 6.0, 6.0]);
///
/// // outputs keep their structure: (sum, product) of each row
/// let sum_and_product = |xs: &Array, _: &()| (xs.sum_all(), xs.prod(&[0], false));
/// let (sums, products) = ct::vmap_tree(sum_and_product, (Some(0), None), Some(0))(&xs, &())?;
/// assert_eq!(sums.to_vec::<f64>()?, vec![1.0, 1.0, 2.0]);
/// assert_eq!(products.to_vec::<f64>()?, vec![0.0, 0.0, 1.0]);
/// # Ok::<(), ct::Error>(())
/// ```
pub fn vmap_tree<P, B, F, R>(
    f: F,
    in_axes: (Option<isize>, Option<isize>),
    out_axis: Option<isize>,
) -> impl Fn(&P, &B) -> Result<R::Tree> + Send + Sync + Clone + 'static
where
    P: ArrayTree + 'static,
    B: ArrayTree + 'static,
    F: Fn(&P, &B) -> R + Send + Sync + 'static,
    R: IntoTree + 'static,
{
    let f = Arc::new(f);
    move |params: &P, batch: &B| {
        let param_leaves = params.leaves();
        let batch_leaves = batch.leaves();
        let n_params = param_leaves.len();
        let leaf_axes: Vec<Option<isize>> = std::iter::repeat_n(in_axes.0, n_params)
            .chain(std::iter::repeat_n(in_axes.1, batch_leaves.len()))
            .collect();
        let leaves: Vec<Array> = param_leaves.into_iter().chain(batch_leaves).collect();
        // the structure `f` returns, recorded from the traced call to rebuild the batched leaves
        let output_structure: RefCell<Option<R::Tree>> = RefCell::new(None);
        let of_leaves = |leaves: &[Array]| -> Result<Vec<Array>> {
            let params = params.with_leaves(leaves[..n_params].to_vec())?;
            let batch = batch.with_leaves(leaves[n_params..].to_vec())?;
            let output = f(&params, &batch).into_tree()?;
            let output_leaves = output.leaves();
            *output_structure.borrow_mut() = Some(output);
            Ok(output_leaves)
        };
        let batched = vmap_call(&of_leaves, &leaf_axes, &[out_axis], &leaves)?;
        let structure = output_structure.into_inner().expect("vmap calls the function once it has returned leaves");
        structure.with_leaves(batched)
    }
}
