//! The [`Module`] trait, freezing, and [`value_and_grad`] over a model's trainable parameters.
use crate::Tree;
use cotangent::transforms::IntoOutputs;
use cotangent::{self as ct, Array, Error, Result};
use std::sync::Arc;

/// A model or layer that holds parameters.
///
/// `parameters` returns them as a [`Tree`] named by the model's own structure; `update` writes
/// back a tree of the same names (a *partial* tree is fine: leaves it does not name keep their
/// values). The gradient returned by [`value_and_grad`] is a tree of the trainable parameters,
/// so `update` also accepts what an optimizer step produces.
pub trait Module {
    /// Every parameter, trainable and frozen.
    fn parameters(&self) -> Tree;

    /// Replace the parameters named in `params` (a sub-tree of [`parameters`](Module::parameters));
    /// an unknown name, or a shape or dtype that differs from the current parameter, is an `Err`
    /// that names it.
    fn update(&mut self, params: &Tree) -> Result<()>;

    /// The parameters that training changes; by default all of them (see [`Freeze`]).
    fn trainable_parameters(&self) -> Tree {
        self.parameters()
    }
}

/// Write `params[key]` (if present) into `slot`, checking shape and dtype. For `update`
/// implementations.
pub fn update_leaf(slot: &mut Array, params: &Tree, key: &str) -> Result<()> {
    match params.child(key) {
        None => Ok(()),
        Some(Tree::Leaf(a)) => {
            if a.shape() != slot.shape() || a.dtype() != slot.dtype() {
                return Err(Error::Shape(format!(
                    "update of `{key}`: got shape {:?} {} but the parameter is {:?} {}",
                    a.shape(),
                    a.dtype(),
                    slot.shape(),
                    slot.dtype()
                )));
            }
            *slot = a.clone();
            Ok(())
        }
        Some(_) => Err(Error::Other(format!("update of `{key}`: expected an array, found a subtree"))),
    }
}

/// Pass `params[key]` (if present) to a sub-module's `update`.
pub fn update_child(module: &mut dyn Module, params: &Tree, key: &str) -> Result<()> {
    match params.child(key) {
        None => Ok(()),
        Some(t) => module.update(t).map_err(|e| prefix_error(e, key)),
    }
}

/// Check that `params` names only `known` keys (for `update` implementations).
pub fn check_keys(params: &Tree, known: &[&str]) -> Result<()> {
    match params {
        Tree::Dict(items) => {
            for (k, _) in items {
                if !known.contains(&k.as_str()) {
                    return Err(Error::Other(format!("update: unknown parameter `{k}` (known: {known:?})")));
                }
            }
            Ok(())
        }
        Tree::List(l) if l.is_empty() => Ok(()),
        _ => Err(Error::Other("update: expected a dictionary of parameters".into())),
    }
}

fn prefix_error(e: Error, key: &str) -> Error {
    match e {
        Error::Shape(m) => Error::Shape(format!("{key}.{m}")),
        Error::Other(m) => Error::Other(format!("{key}: {m}")),
        e => e,
    }
}

impl<M: Module> Module for Vec<M> {
    fn parameters(&self) -> Tree {
        Tree::List(self.iter().map(Module::parameters).collect())
    }
    fn trainable_parameters(&self) -> Tree {
        Tree::List(self.iter().map(Module::trainable_parameters).collect())
    }
    fn update(&mut self, params: &Tree) -> Result<()> {
        match params {
            Tree::List(items) if items.len() <= self.len() => items
                .iter()
                .zip(self.iter_mut())
                .enumerate()
                .try_for_each(|(i, (t, m))| m.update(t).map_err(|e| prefix_error(e, &i.to_string()))),
            Tree::Dict(items) => items.iter().try_for_each(|(k, t)| {
                let i: usize = k.parse().map_err(|_| Error::Other(format!("update: `{k}` is not a list index")))?;
                let n = self.len();
                let m = self.get_mut(i).ok_or_else(|| Error::Other(format!("update: index {i} past a list of {n}")))?;
                m.update(t).map_err(|e| prefix_error(e, k))
            }),
            _ => Err(Error::Other(format!("update: expected a list of at most {} items", self.len()))),
        }
    }
}

/// A module with some parameters frozen: they stay in [`parameters`](Module::parameters) (and
/// in checkpoints) but not in [`trainable_parameters`](Module::trainable_parameters), so
/// [`value_and_grad`] neither differentiates nor returns them.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::{Freeze, Linear, Module};
/// let lin = Freeze::new(Linear::new(&ct::random::key(0), 3, 2, true, DType::F32), &["bias"]);
/// assert_eq!(lin.parameters().names(), ["weight", "bias"]);
/// assert_eq!(lin.trainable_parameters().names(), ["weight"]);
/// ```
#[derive(Clone, Debug)]
pub struct Freeze<M> {
    /// The wrapped module.
    pub module: M,
    /// Dotted name prefixes of the frozen parameters (`"embed"` freezes `embed.weight`).
    pub frozen: Vec<String>,
}

impl<M> Freeze<M> {
    /// Wrap `module`, freezing the parameters whose names start with one of `prefixes`
    /// (a whole path component: `"layers.0"` freezes `layers.0.w`, not `layers.01.w`).
    pub fn new(module: M, prefixes: &[&str]) -> Self {
        Freeze { module, frozen: prefixes.iter().map(|s| s.to_string()).collect() }
    }

    /// Whether the parameter named `name` is frozen.
    pub fn is_frozen(&self, name: &str) -> bool {
        self.frozen.iter().any(|p| name == p || name.starts_with(&format!("{p}.")))
    }
}

impl<M> std::ops::Deref for Freeze<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.module
    }
}

impl<M: Module> Module for Freeze<M> {
    fn parameters(&self) -> Tree {
        self.module.parameters()
    }
    fn trainable_parameters(&self) -> Tree {
        self.module.trainable_parameters().filter(|n| !self.is_frozen(n))
    }
    fn update(&mut self, params: &Tree) -> Result<()> {
        self.module.update(params)
    }
}

/// The return of [`value_and_grad`]'s function: the loss function's outputs (the loss first,
/// then any auxiliary outputs) and the gradient tree of the trainable parameters.
pub type ValueAndGrad = (Vec<Array>, Tree);

/// Turn `loss_fn(model, batch)` into a function returning its outputs and the gradient of its
/// first output (a scalar) with respect to the model's **trainable** parameters.
///
/// It flattens `model.trainable_parameters()` to a `Vec<Array>`, differentiates with
/// [`ct::value_and_grad`] a function that writes them into a copy of the model and calls
/// `loss_fn`, and rebuilds the gradients as a tree of the same names. Frozen parameters are
/// constants. Outputs after the first are auxiliary (returned, not differentiated).
///
/// ```
/// use cotangent::{self as ct, Array, DType};
/// use cotangent_nn::{self as nn, Linear, Module};
/// let model = Linear::new(&ct::random::key(0), 2, 1, true, DType::F64);
/// let vg = nn::value_and_grad(|m: &Linear, batch: &[Array]| m.forward(&batch[0]).sum_all());
/// let x = Array::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2]);
/// let (outs, grads) = vg(&model, &[x]).unwrap();
/// assert_eq!(grads.get("weight").unwrap().to_vec::<f64>().unwrap(), vec![4.0, 6.0]);
/// assert_eq!(grads.get("bias").unwrap().to_vec::<f64>().unwrap(), vec![2.0]);
/// # let _ = outs;
/// ```
pub fn value_and_grad<M, F, O>(loss_fn: F) -> impl Fn(&M, &[Array]) -> Result<ValueAndGrad> + Send + Sync + Clone
where
    M: Module + Clone + Send + Sync + 'static,
    F: Fn(&M, &[Array]) -> O + Send + Sync + 'static,
    O: IntoOutputs,
{
    let loss_fn = Arc::new(loss_fn);
    move |model: &M, batch: &[Array]| {
        let trainable = model.trainable_parameters();
        let leaves = trainable.leaves();
        let template = model.clone();
        let structure = trainable.clone();
        let batch = batch.to_vec();
        let lf = loss_fn.clone();
        let f = ct::value_and_grad(move |xs: &[Array]| -> Result<Vec<Array>> {
            let mut m = template.clone();
            m.update(&structure.with_leaves(xs.to_vec())?)?;
            lf(&m, &batch).into_outputs()
        });
        let (outs, grads) = f(&leaves)?;
        Ok((outs, trainable.with_leaves(grads)?))
    }
}
