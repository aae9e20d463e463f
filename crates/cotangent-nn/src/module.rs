//! The [`Module`] trait, freezing, and [`value_and_grad`] over a model's trainable parameters.
use crate::{Linear, Tree};
use cotangent::transforms::IntoOutputs;
use cotangent::{self as ct, Array, Error, Result};
use std::collections::HashSet;
use std::sync::Arc;

/// A model or layer that holds parameters.
///
/// A module names each of its parameters and children **once**, in [`visit`](Module::visit);
/// [`parameters`](Module::parameters), [`trainable_parameters`](Module::trainable_parameters),
/// [`update`](Module::update) and checkpoint loading ([`crate::io::load_into`]) all derive from
/// it. Parameters are named by the path of children to them, joined with dots
/// (`"layers.0.mixer.in_proj_qkvz.weight"`).
///
/// ```
/// use cotangent::{self as ct, Array, DType};
/// use cotangent_nn::{Linear, Module, RMSNorm, Tree, Visitor};
///
/// #[derive(Clone)]
/// struct Block {
///     norm: RMSNorm,
///     proj: Linear,
///     scale: Array,
/// }
///
/// impl Module for Block {
///     fn visit(&mut self, v: &mut dyn Visitor) {
///         v.child("norm", &mut self.norm);
///         v.child("proj", &mut self.proj);
///         v.param("scale", &mut self.scale);
///     }
/// }
///
/// let mut block = Block {
///     norm: RMSNorm::new(3, 1e-6, DType::F32),
///     proj: Linear::new(&ct::random::key(0), 3, 2, false, DType::F32),
///     scale: Array::scalar(1.0f32),
/// };
/// assert_eq!(block.parameters().names(), ["norm.weight", "proj.weight", "scale"]);
/// block.update(&Tree::dict([("scale", Tree::leaf(Array::scalar(2.0f32)))])).unwrap();
/// assert_eq!(block.scale.item::<f32>().unwrap(), 2.0);
/// ```
pub trait Module: Clone {
    /// Show `v` every parameter (`v.param(name, value)`) and every child module
    /// (`v.child(name, module)`) under its name, in a fixed order.
    fn visit(&mut self, v: &mut dyn Visitor);

    /// Every parameter, trainable and frozen, as a tree named by [`visit`](Module::visit).
    fn parameters(&self) -> Tree {
        collect(self, true)
    }

    /// The parameters that training changes: all of them except those a [`Freeze`] marks frozen.
    /// A module holding adapters ([`crate::lora`]) trains only them: every other parameter is
    /// then frozen.
    fn trainable_parameters(&self) -> Tree {
        collect(self, false)
    }

    /// Replace the parameters named in `params` (a sub-tree of [`parameters`](Module::parameters));
    /// those it does not name keep their values. Every unknown name, and every shape or dtype
    /// that differs from the current parameter, is reported in one `Err` that names them all;
    /// the module is then left unchanged.
    fn update(&mut self, params: &Tree) -> Result<()> {
        let mut check = UpdateCheck { stack: vec![Some(params)], ..Default::default() };
        self.visit(&mut check);
        let used: HashSet<&str> = check.used.iter().map(String::as_str).collect();
        for name in params.names() {
            if !used.contains(name.as_str()) && !check.subtrees.iter().any(|s| name.starts_with(&format!("{s}."))) {
                check.problems.push(format!("unknown parameter `{name}`"));
                check.not_only_shapes = true;
            }
        }
        if !check.problems.is_empty() {
            return Err(problems_error("updating parameters", check.problems, !check.not_only_shapes));
        }
        self.visit(&mut Assign { replacements: check.replacements.into_iter() });
        Ok(())
    }
}

/// What [`Module::visit`] reports to: parameters, and the start and end of each child.
///
/// Modules call the helpers `param` and `child` (methods of `dyn Visitor`, below); a new kind
/// of traversal implements the three required methods. The name given to
/// [`visit_param`](Visitor::visit_param) and [`enter`](Visitor::enter) is relative to the
/// child entered last.
///
/// ```
/// use cotangent::{self as ct, Array, DType};
/// use cotangent_nn::{Mlp, Activation, Module, Visitor};
///
/// /// Counts the scalars of every parameter.
/// #[derive(Default)]
/// struct CountElements(usize);
/// impl Visitor for CountElements {
///     fn visit_param(&mut self, _name: &str, value: &mut Array, _frozen: bool) {
///         self.0 += value.size();
///     }
///     fn enter(&mut self, _name: &str) {}
///     fn leave(&mut self) {}
/// }
///
/// let mut mlp = Mlp::new(&ct::random::key(0), 4, 8, Activation::Relu, DType::F32);
/// let mut count = CountElements::default();
/// mlp.visit(&mut count);
/// assert_eq!(count.0, 4 * 8 + 8 + 8 * 4 + 4);
/// ```
pub trait Visitor {
    /// A parameter `name` of the current module; `frozen` when a [`Freeze`] around it excludes
    /// it from training.
    fn visit_param(&mut self, name: &str, value: &mut Array, frozen: bool);
    /// The start of child module `name` of the current module.
    fn enter(&mut self, name: &str);
    /// The end of the child entered last.
    fn leave(&mut self);
    /// An adapter parameter (a [`crate::lora`] matrix). While a module holds any, its other
    /// parameters are frozen. The default treats it as any other parameter.
    ///
    /// ```
    /// use cotangent::{self as ct, Array, DType};
    /// use cotangent_nn::{lora, Activation, Mlp, Module, Visitor};
    /// /// Names the adapter parameters.
    /// #[derive(Default)]
    /// struct Adapters(Vec<String>);
    /// impl Visitor for Adapters {
    ///     fn visit_param(&mut self, _name: &str, _value: &mut Array, _frozen: bool) {}
    ///     fn visit_adapter(&mut self, name: &str, _value: &mut Array, _frozen: bool) {
    ///         self.0.push(name.to_string());
    ///     }
    ///     fn enter(&mut self, _name: &str) {}
    ///     fn leave(&mut self) {}
    /// }
    /// let mut mlp = Mlp::new(&ct::random::key(0), 2, 4, Activation::Relu, DType::F32);
    /// lora::apply(&mut mlp, &lora::LoraConfig::new(1, 1.0, &["fc2"]), &ct::random::key(1)).unwrap();
    /// let mut seen = Adapters::default();
    /// mlp.visit(&mut seen);
    /// assert_eq!(seen.0, ["lora_A", "lora_B"]);
    /// ```
    fn visit_adapter(&mut self, name: &str, value: &mut Array, frozen: bool) {
        self.visit_param(name, value, frozen);
    }
    /// A [`Linear`] layer of the current module, shown to traversals that change layers
    /// themselves (adding or merging [`crate::lora`] adapters) before its parameters; called
    /// after [`enter`](Visitor::enter) of the layer's name. The default does nothing.
    ///
    /// ```
    /// use cotangent::{self as ct, Array, DType};
    /// use cotangent_nn::{Activation, Linear, Mlp, Module, Visitor};
    /// /// Drops every Linear layer's bias.
    /// struct NoBias;
    /// impl Visitor for NoBias {
    ///     fn visit_param(&mut self, _name: &str, _value: &mut Array, _frozen: bool) {}
    ///     fn enter(&mut self, _name: &str) {}
    ///     fn leave(&mut self) {}
    ///     fn visit_linear(&mut self, linear: &mut Linear) {
    ///         linear.bias = None;
    ///     }
    /// }
    /// let mut mlp = Mlp::new(&ct::random::key(0), 2, 3, Activation::Relu, DType::F32);
    /// mlp.visit(&mut NoBias);
    /// assert_eq!(mlp.parameters().names(), ["fc1.weight", "fc2.weight"]);
    /// ```
    fn visit_linear(&mut self, _linear: &mut Linear) {}
}

impl dyn Visitor + '_ {
    /// Report the (trainable) parameter `name`; for [`Module::visit`] implementations.
    pub fn param(&mut self, name: &str, value: &mut Array) {
        self.visit_param(name, value, false);
    }

    /// Report the child module `name` and everything in it; for [`Module::visit`]
    /// implementations.
    pub fn child<M: Module>(&mut self, name: &str, module: &mut M) {
        self.enter(name);
        module.visit(self);
        self.leave();
    }
}

/// The dotted path of the child being visited.
#[derive(Default)]
struct Path(Vec<String>);

impl Path {
    fn join(&self, name: &str) -> String {
        let mut parts = self.0.clone();
        parts.push(name.to_string());
        parts.join(".")
    }
}

/// Builds the parameter tree; children without parameters are left out, children numbered
/// `0..n` (a `Vec` of modules) become lists.
struct Collect {
    include_frozen: bool,
    /// Leave out every parameter that is not an adapter (the trainable parameters of a module
    /// with adapters).
    adapters_only: bool,
    stack: Vec<(String, Vec<(String, Tree)>)>,
}

/// Whether a module holds any adapter parameter.
#[derive(Default)]
struct HasAdapters(bool);

impl Visitor for HasAdapters {
    fn visit_param(&mut self, _name: &str, _value: &mut Array, _frozen: bool) {}
    fn visit_adapter(&mut self, _name: &str, _value: &mut Array, _frozen: bool) {
        self.0 = true;
    }
    fn enter(&mut self, _name: &str) {}
    fn leave(&mut self) {}
}

fn collect<M: Module>(module: &M, include_frozen: bool) -> Tree {
    let mut module = module.clone();
    let adapters_only = !include_frozen && {
        let mut has = HasAdapters::default();
        module.visit(&mut has);
        has.0
    };
    let mut c = Collect { include_frozen, adapters_only, stack: vec![(String::new(), Vec::new())] };
    module.visit(&mut c);
    let (_, items) = c.stack.pop().expect("the root");
    node(items)
}

fn node(items: Vec<(String, Tree)>) -> Tree {
    let numbered = !items.is_empty() && items.iter().enumerate().all(|(i, (k, _))| *k == i.to_string());
    if numbered {
        Tree::List(items.into_iter().map(|(_, t)| t).collect())
    } else {
        Tree::Dict(items)
    }
}

impl Visitor for Collect {
    fn visit_param(&mut self, name: &str, value: &mut Array, frozen: bool) {
        if self.include_frozen || !(frozen || self.adapters_only) {
            let top = self.stack.last_mut().expect("the root is never left");
            top.1.push((name.to_string(), Tree::Leaf(value.clone())));
        }
    }
    fn visit_adapter(&mut self, name: &str, value: &mut Array, frozen: bool) {
        if self.include_frozen || !frozen {
            let top = self.stack.last_mut().expect("the root is never left");
            top.1.push((name.to_string(), Tree::Leaf(value.clone())));
        }
    }
    fn enter(&mut self, name: &str) {
        self.stack.push((name.to_string(), Vec::new()));
    }
    fn leave(&mut self) {
        let (name, items) = self.stack.pop().expect("leave after enter");
        if !items.is_empty() {
            self.stack.last_mut().expect("the root is never left").1.push((name, node(items)));
        }
    }
}

/// First pass of [`Module::update`]: finds the replacement of each parameter (in visit order)
/// and every problem, without changing the module.
#[derive(Default)]
struct UpdateCheck<'a> {
    stack: Vec<Option<&'a Tree>>,
    path: Path,
    replacements: Vec<Option<Array>>,
    used: Vec<String>,
    subtrees: Vec<String>,
    problems: Vec<String>,
    /// A problem other than a shape or dtype mismatch was found.
    not_only_shapes: bool,
}

impl Visitor for UpdateCheck<'_> {
    fn visit_param(&mut self, name: &str, value: &mut Array, _frozen: bool) {
        let full = self.path.join(name);
        let given = self.stack.last().copied().flatten().and_then(|t| t.child(name));
        let replacement = match given {
            None => None,
            Some(Tree::Leaf(a)) => {
                self.used.push(full.clone());
                if a.shape() == value.shape() && a.dtype() == value.dtype() {
                    Some(a.clone())
                } else {
                    self.problems.push(format!(
                        "`{full}`: got shape {:?} {} but the parameter is {:?} {}",
                        a.shape(),
                        a.dtype(),
                        value.shape(),
                        value.dtype()
                    ));
                    None
                }
            }
            Some(_) => {
                self.subtrees.push(full.clone());
                self.not_only_shapes = true;
                self.problems.push(format!("`{full}`: expected an array, found a subtree"));
                None
            }
        };
        self.replacements.push(replacement);
    }
    fn enter(&mut self, name: &str) {
        let child = self.stack.last().copied().flatten().and_then(|t| t.child(name));
        self.stack.push(child);
        self.path.0.push(name.to_string());
    }
    fn leave(&mut self) {
        self.stack.pop();
        self.path.0.pop();
    }
}

/// Second pass of an update or a load: writes the replacements found by the first pass, in
/// visit order.
pub(crate) struct Assign {
    pub(crate) replacements: std::vec::IntoIter<Option<Array>>,
}

impl Visitor for Assign {
    fn visit_param(&mut self, _name: &str, value: &mut Array, _frozen: bool) {
        if let Some(Some(a)) = self.replacements.next() {
            *value = a;
        }
    }
    fn enter(&mut self, _name: &str) {}
    fn leave(&mut self) {}
}

/// One error listing every problem found (`Error::Shape` when all are shape or dtype
/// mismatches, else `Error::Other`).
pub(crate) fn problems_error(context: &str, problems: Vec<String>, only_shapes: bool) -> Error {
    let message = if problems.len() == 1 {
        format!("{context}: {}", problems[0])
    } else {
        format!("{context}: {} problems:\n  {}", problems.len(), problems.join("\n  "))
    };
    if only_shapes {
        Error::Shape(message)
    } else {
        Error::Other(message)
    }
}

impl<M: Module> Module for Vec<M> {
    fn visit(&mut self, v: &mut dyn Visitor) {
        for (i, m) in self.iter_mut().enumerate() {
            v.child(&i.to_string(), m);
        }
    }
}

impl<M: Module> Module for Option<M> {
    fn visit(&mut self, v: &mut dyn Visitor) {
        if let Some(m) = self {
            m.visit(v);
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
        is_under(name, &self.frozen)
    }
}

impl<M> std::ops::Deref for Freeze<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.module
    }
}

impl<M: Module> Module for Freeze<M> {
    fn visit(&mut self, v: &mut dyn Visitor) {
        let mut marking = MarkFrozen { inner: v, frozen: &self.frozen, path: Path::default() };
        self.module.visit(&mut marking);
    }
}

/// Whether `name` is one of `prefixes` or lies under one (a whole path component).
fn is_under(name: &str, prefixes: &[String]) -> bool {
    prefixes.iter().any(|p| name == p || name.strip_prefix(p.as_str()).is_some_and(|rest| rest.starts_with('.')))
}

/// Passes a visit through, marking the parameters a [`Freeze`] names as frozen.
struct MarkFrozen<'a, 'b> {
    inner: &'a mut dyn Visitor,
    frozen: &'b [String],
    path: Path,
}

impl Visitor for MarkFrozen<'_, '_> {
    fn visit_param(&mut self, name: &str, value: &mut Array, frozen: bool) {
        let full = self.path.join(name);
        let marked = is_under(&full, self.frozen);
        self.inner.visit_param(name, value, frozen || marked);
    }
    fn visit_adapter(&mut self, name: &str, value: &mut Array, frozen: bool) {
        let full = self.path.join(name);
        let marked = is_under(&full, self.frozen);
        self.inner.visit_adapter(name, value, frozen || marked);
    }
    fn visit_linear(&mut self, linear: &mut Linear) {
        self.inner.visit_linear(linear);
    }
    fn enter(&mut self, name: &str) {
        self.path.0.push(name.to_string());
        self.inner.enter(name);
    }
    fn leave(&mut self) {
        self.path.0.pop();
        self.inner.leave();
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
