//! Optimizers ([`Sgd`], [`Adam`], [`AdamW`]), their state as a [`Tree`] (saved and restored
//! bit for bit), gradient accumulation, a compiled training step, global-norm gradient
//! clipping and learning-rate schedules.
//!
//! An optimizer's state is a [`Tree`]: its moments (shaped like the parameters), and the
//! numbers that change during a run, as 0-d arrays — the learning rate (`lr`, f64) and, for
//! Adam and AdamW, the step count (`step`, i64). `step(params, grads)` returns the new
//! parameters (lazy arrays); evaluate them, and the state, once per step — e.g. with
//! [`Optimizer::update`], which also writes them into a model. Set the learning rate with
//! [`Optimizer::set_lr`] (from a [`schedules`] function, say) before a step.
//!
//! Because the step count and the learning rate are arrays, not Rust numbers, a whole training
//! step compiles ([`compile_step`]) and replays correctly as they change. Because the state is
//! a tree, it saves and loads with [`crate::io`] ([`Optimizer::save_state`],
//! [`Optimizer::load_state_file`]); a run resumed from it continues bit for bit on the CPU.
//!
//! ```
//! use cotangent::{self as ct, Array, DType};
//! use cotangent_nn::optim::{AdamW, Optimizer};
//! use cotangent_nn::{Linear, Module, Tree};
//! let mut model = Linear::new(&ct::random::key(0), 2, 1, true, DType::F32);
//! let mut opt = AdamW::new(1e-2, 0.0);
//! let grads = model.trainable_parameters().map(|_, p| ct::ones_like(p));
//! opt.update(&mut model, &grads)?;
//! assert_eq!(opt.state().names(), ["step", "lr", "m.weight", "m.bias", "v.weight", "v.bias"]);
//! // a fresh optimizer takes the state over and continues where this one stopped
//! let mut resumed = AdamW::new(1e-2, 0.0);
//! resumed.load_state(&opt.state())?;
//! assert_eq!(resumed.steps()?, 1);
//! # Ok::<(), ct::Error>(())
//! ```
use crate::module::{problems_error, ValueAndGrad};
use crate::{Module, Tree};
use cotangent::transforms::IntoOutputs;
use cotangent::{self as ct, Array, DType, Error, Result};
use std::path::Path;

/// A first-order optimizer.
pub trait Optimizer {
    /// New parameters from the current ones and their gradients (trees of the same names).
    /// Advances the step count and the state (the moments are created, as zeros, on the first
    /// step).
    fn step(&mut self, params: &Tree, grads: &Tree) -> Result<Tree>;

    /// The whole optimizer state as a tree: the moments, and the learning rate (and step
    /// count) as 0-d arrays. See the implementations for the names.
    fn state(&self) -> Tree;

    /// Replace the state by `state`, a tree as [`state`](Optimizer::state) returns (from this
    /// kind of optimizer, perhaps saved and loaded). Every unknown or missing name, and every
    /// shape or dtype that differs from what this optimizer holds (or from the other moment),
    /// is named in one `Err`; the optimizer is then unchanged. Reads no values, so it may run
    /// on traced arrays.
    fn load_state(&mut self, state: &Tree) -> Result<()>;

    /// Create the moments of `params` (zeros) if there are none yet, so that
    /// [`state`](Optimizer::state) has its full structure before the first step.
    fn init(&mut self, params: &Tree);

    /// The learning rate (reads the `lr` array).
    fn lr(&self) -> Result<f64>;

    /// Set the learning rate for the following steps (e.g. from a schedule).
    fn set_lr(&mut self, lr: f64);

    /// Apply one step to `model`'s trainable parameters and evaluate the new parameters and
    /// state, so the graph does not grow across steps.
    fn update<M: Module>(&mut self, model: &mut M, grads: &Tree) -> Result<()>
    where
        Self: Sized,
    {
        let params = model.trainable_parameters();
        let new = self.step(&params, grads)?;
        let mut all = new.leaves();
        all.extend(self.state().leaves());
        ct::eval(&all)?;
        model.update(&new)
    }

    /// Write [`state`](Optimizer::state) to a safetensors file (every array in its dtype).
    fn save_state(&self, path: impl AsRef<Path>) -> Result<()>
    where
        Self: Sized,
    {
        crate::io::save(path, &self.state(), None)
    }

    /// Read a file written by [`save_state`](Optimizer::save_state) into this optimizer
    /// ([`load_state`](Optimizer::load_state) checks it).
    fn load_state_file(&mut self, path: impl AsRef<Path>) -> Result<()>
    where
        Self: Sized,
    {
        self.load_state(&crate::io::load(path)?)
    }
}

/// A 0-d f64 array holding a learning rate, on `device`.
fn lr_array(lr: f64, device: ct::Device) -> Array {
    Array::scalar(lr).to_device(device)
}

/// `scalar` (a 0-d array) in `like`'s dtype and on its device.
fn as_like(scalar: &Array, like: &Array) -> Array {
    scalar.astype(like.dtype()).to_device(like.device())
}

/// Collects the problems [`Optimizer::load_state`] finds.
struct StateCheck {
    optimizer: &'static str,
    problems: Vec<String>,
    only_shapes: bool,
}

impl StateCheck {
    fn new(optimizer: &'static str, state: &Tree, allowed: &[&str]) -> Self {
        let mut c = StateCheck { optimizer, problems: Vec::new(), only_shapes: true };
        match state {
            Tree::Dict(items) => {
                for (k, _) in items {
                    if !allowed.contains(&k.as_str()) {
                        c.other(format!("`{k}` is not part of the state of {optimizer} (its names are {allowed:?})"));
                    }
                }
            }
            _ => c.other(format!("the state must be a dictionary with the names {allowed:?}")),
        }
        c
    }

    fn other(&mut self, problem: String) {
        self.problems.push(problem);
        self.only_shapes = false;
    }

    /// The 0-d array `key` of `dtype`.
    fn scalar(&mut self, state: &Tree, key: &str, dtype: DType) -> Option<Array> {
        match state.child(key) {
            Some(Tree::Leaf(a)) if a.shape().is_empty() && a.dtype() == dtype => Some(a.clone()),
            Some(Tree::Leaf(a)) => {
                self.problems.push(format!(
                    "`{key}` must be a 0-d {dtype} array, but it has shape {:?} and dtype {}",
                    a.shape(),
                    a.dtype()
                ));
                None
            }
            Some(_) => {
                self.other(format!("`{key}` must be a 0-d {dtype} array, but it is a subtree"));
                None
            }
            None => {
                self.other(format!("`{key}` (a 0-d {dtype} array) is missing"));
                None
            }
        }
    }

    /// Both trees hold the same names, each with the same shape and dtype; `given_key` names
    /// the given tree, `expected(leaf)` describes the expected tree's leaf.
    fn same_layout(&mut self, given: &Tree, given_key: &str, expected_tree: &Tree, expected: &dyn Fn(&str) -> String) {
        let a = given.flatten();
        let b: std::collections::HashMap<String, Array> = expected_tree.flatten().into_iter().collect();
        let mut seen = std::collections::HashSet::new();
        for (name, x) in &a {
            seen.insert(name.as_str());
            match b.get(name) {
                None => self.other(format!(
                    "`{given_key}.{name}` has no counterpart in {}",
                    expected("").trim_end_matches('.')
                )),
                Some(y) if x.shape() != y.shape() || x.dtype() != y.dtype() => self.problems.push(format!(
                    "`{given_key}.{name}` has shape {:?} and dtype {}, but {} has shape {:?} and dtype {}",
                    x.shape(),
                    x.dtype(),
                    expected(name),
                    y.shape(),
                    y.dtype()
                )),
                Some(_) => {}
            }
        }
        let mut missing: Vec<&String> = b.keys().filter(|n| !seen.contains(n.as_str())).collect();
        missing.sort();
        for name in missing {
            self.other(format!("`{given_key}.{name}` is missing ({} exists)", expected(name)));
        }
    }

    /// The moments under `keys` (all or none present), checked against each other and
    /// against `current` (this optimizer's, if it has any).
    fn moments<const N: usize>(
        &mut self,
        state: &Tree,
        keys: [&str; N],
        current: Option<[&Tree; N]>,
    ) -> Option<[Tree; N]> {
        let given: Vec<Option<&Tree>> = keys.iter().map(|k| state.child(k)).collect();
        if given.iter().all(Option::is_none) {
            if current.is_some() {
                self.other(format!("the state has no {keys:?}, but this optimizer holds moments for its parameters"));
            }
            return None;
        }
        let mut out = Vec::with_capacity(N);
        for (i, g) in given.iter().enumerate() {
            match g {
                None => self.other(format!("`{}` is missing (the state has {:?})", keys[i], keys)),
                Some(t) => {
                    if let Some(cur) = current {
                        let key = keys[i];
                        self.same_layout(t, key, cur[i], &|n| format!("this optimizer's `{key}.{n}`"));
                    } else if i > 0 {
                        if let Some(first) = given[0] {
                            let key = keys[0];
                            self.same_layout(t, keys[i], first, &|n| format!("`{key}.{n}`"));
                        }
                    }
                    out.push((*t).clone());
                }
            }
        }
        out.try_into().ok()
    }

    fn finish(self) -> Result<()> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(problems_error(&format!("{}::load_state", self.optimizer), self.problems, self.only_shapes))
        }
    }
}

/// Stochastic gradient descent with optional momentum (heavy-ball or Nesterov) and L2 weight
/// decay, as PyTorch's `SGD`:
/// `g += wd·p; b = μ b + g; p -= lr · (nesterov ? g + μ b : b)` (`b = g` on the first step).
///
/// Its state: `lr` (0-d f64) and, with momentum, `momentum_buffer` (shaped like the
/// parameters).
///
/// ```
/// use cotangent::{self as ct, Array};
/// use cotangent_nn::optim::{Optimizer, Sgd};
/// use cotangent_nn::Tree;
/// let p = Tree::dict([("w", Tree::leaf(Array::scalar(1.0f64)))]);
/// let g = Tree::dict([("w", Tree::leaf(Array::scalar(0.5f64)))]);
/// let mut opt = Sgd::new(0.1).momentum(0.9, false);
/// let p = opt.step(&p, &g)?;
/// assert_eq!(p.require("w")?.item::<f64>()?, 1.0 - 0.1 * 0.5);
/// assert_eq!(opt.state().names(), ["lr", "momentum_buffer.w"]);
/// # Ok::<(), ct::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Sgd {
    /// Momentum `μ` (0: plain SGD).
    pub momentum: f64,
    /// Use Nesterov momentum.
    pub nesterov: bool,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Learning rate (0-d f64).
    lr: Array,
    /// Momentum buffers (`None` until the first step or [`Optimizer::init`]).
    buffers: Option<Tree>,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Sgd { momentum: 0.0, nesterov: false, weight_decay: 0.0, lr: Array::scalar(lr), buffers: None }
    }
    /// With momentum `μ`.
    pub fn momentum(mut self, momentum: f64, nesterov: bool) -> Self {
        self.momentum = momentum;
        self.nesterov = nesterov;
        self
    }
    /// With L2 weight decay.
    pub fn weight_decay(mut self, wd: f64) -> Self {
        self.weight_decay = wd;
        self
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, params: &Tree, grads: &Tree) -> Result<Tree> {
        let wd = self.weight_decay;
        let g = if wd != 0.0 { grads.zip(params, |_, g, p| g + p * wd)? } else { grads.clone() };
        if self.momentum == 0.0 {
            let lr = &self.lr;
            return params.zip(&g, |_, p, g| p - g * as_like(lr, p));
        }
        self.init(&g);
        let mu = self.momentum;
        let buf = self.buffers.as_ref().expect("created by init").zip(&g, |_, b, g| b * mu + g)?;
        let dir = if self.nesterov { g.zip(&buf, |_, g, b| g + b * mu)? } else { buf.clone() };
        self.buffers = Some(buf);
        let lr = &self.lr;
        params.zip(&dir, |_, p, d| p - d * as_like(lr, p))
    }
    fn state(&self) -> Tree {
        let state = Tree::dict([("lr", Tree::leaf(self.lr.clone()))]);
        match &self.buffers {
            Some(b) => state.with("momentum_buffer", b.clone()),
            None => state,
        }
    }
    fn load_state(&mut self, state: &Tree) -> Result<()> {
        let mut c = StateCheck::new("Sgd", state, &["lr", "momentum_buffer"]);
        let lr = c.scalar(state, "lr", DType::F64);
        let buffers = c.moments(state, ["momentum_buffer"], self.buffers.as_ref().map(|b| [b]));
        c.finish()?;
        self.lr = lr.expect("checked");
        if let Some([b]) = buffers {
            self.buffers = Some(b);
        }
        Ok(())
    }
    fn init(&mut self, params: &Tree) {
        if self.momentum != 0.0 && self.buffers.is_none() {
            self.buffers = Some(params.map(|_, p| ct::zeros_like(p)));
        }
    }
    fn lr(&self) -> Result<f64> {
        self.lr.item::<f64>()
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr_array(lr, self.lr.device());
    }
}

/// Adam (Kingma & Ba): `m = β₁m + (1-β₁)g; v = β₂v + (1-β₂)g²;
/// p -= lr · m̂ / (√v̂ + ε)` with bias-corrected `m̂ = m/(1-β₁ᵗ)`, `v̂ = v/(1-β₂ᵗ)`.
/// `weight_decay` adds an L2 term to the gradient (PyTorch's `Adam`); for decoupled decay use
/// [`AdamW`].
///
/// Its state: `step` (0-d i64, the steps taken), `lr` (0-d f64), and the moments `m` and `v`
/// (shaped like the parameters; absent before the first step or [`Optimizer::init`]). The
/// bias corrections are computed from the `step` array, so a compiled step
/// ([`compile_step`]) replays with the right `t`. `betas`, `eps` and `weight_decay` are
/// constants of a run (a compiled step keeps the values it was built with).
///
/// ```
/// use cotangent::{self as ct, Array};
/// use cotangent_nn::optim::{Adam, Optimizer};
/// use cotangent_nn::Tree;
/// let p = Tree::dict([("w", Tree::leaf(Array::scalar(1.0f64)))]);
/// let g = Tree::dict([("w", Tree::leaf(Array::scalar(0.5f64)))]);
/// let mut opt = Adam::new(0.01);
/// let p = opt.step(&p, &g)?;
/// // the first step moves by about lr, against the gradient's sign
/// assert!((p.require("w")?.item::<f64>()? - 0.99).abs() < 1e-7);
/// assert_eq!(opt.steps()?, 1);
/// # Ok::<(), ct::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Adam {
    /// `(β₁, β₂)`.
    pub betas: (f64, f64),
    /// `ε`.
    pub eps: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Learning rate (0-d f64).
    lr: Array,
    /// Steps taken (0-d i64).
    t: Array,
    /// First and second moments.
    moments: Option<(Tree, Tree)>,
}

impl Adam {
    /// Adam with `betas = (0.9, 0.999)`, `eps = 1e-8`.
    pub fn new(lr: f64) -> Self {
        Adam {
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            lr: Array::scalar(lr),
            t: Array::scalar(0i64),
            moments: None,
        }
    }

    /// The number of steps taken (reads the `step` array).
    pub fn steps(&self) -> Result<u64> {
        Ok(self.t.item::<i64>()? as u64)
    }

    /// Advance the step count and the moments and return the bias-corrected update direction
    /// `m̂ / (√v̂ + ε)`.
    fn direction(&mut self, grads: &Tree) -> Result<Tree> {
        let (b1, b2) = self.betas;
        self.init(grads);
        let (m, v) = self.moments.as_ref().expect("created by init");
        let m = m.zip(grads, |_, m, g| m * b1 + g * (1.0 - b1))?;
        let v = v.zip(grads, |_, v, g| v * b2 + g.square() * (1.0 - b2))?;
        self.t = &self.t + 1i64;
        let t = self.t.astype(DType::F64);
        // 1 / (1 - β^t), in f64, then in each moment's dtype
        let inv_c1 = 1.0 / (1.0 - ct::power(b1, &t));
        let inv_c2 = 1.0 / (1.0 - ct::power(b2, &t));
        let eps = self.eps;
        let dir = m.zip(&v, |_, m, v| (m * as_like(&inv_c1, m)) / ((v * as_like(&inv_c2, v)).sqrt() + eps))?;
        self.moments = Some((m, v));
        Ok(dir)
    }

    fn state_tree(&self) -> Tree {
        let state = Tree::dict([("step", Tree::leaf(self.t.clone())), ("lr", Tree::leaf(self.lr.clone()))]);
        match &self.moments {
            Some((m, v)) => state.with("m", m.clone()).with("v", v.clone()),
            None => state,
        }
    }

    fn load(&mut self, name: &'static str, state: &Tree) -> Result<()> {
        let mut c = StateCheck::new(name, state, &["step", "lr", "m", "v"]);
        let t = c.scalar(state, "step", DType::I64);
        let lr = c.scalar(state, "lr", DType::F64);
        let moments = c.moments(state, ["m", "v"], self.moments.as_ref().map(|(m, v)| [m, v]));
        c.finish()?;
        self.t = t.expect("checked");
        self.lr = lr.expect("checked");
        if let Some([m, v]) = moments {
            self.moments = Some((m, v));
        }
        Ok(())
    }
}

impl Optimizer for Adam {
    fn step(&mut self, params: &Tree, grads: &Tree) -> Result<Tree> {
        let wd = self.weight_decay;
        let g = if wd != 0.0 { grads.zip(params, |_, g, p| g + p * wd)? } else { grads.clone() };
        let dir = self.direction(&g)?;
        let lr = &self.lr;
        params.zip(&dir, |_, p, d| p - d * as_like(lr, p))
    }
    fn state(&self) -> Tree {
        self.state_tree()
    }
    fn load_state(&mut self, state: &Tree) -> Result<()> {
        self.load("Adam", state)
    }
    fn init(&mut self, params: &Tree) {
        if self.moments.is_none() {
            self.moments = Some((params.map(|_, p| ct::zeros_like(p)), params.map(|_, p| ct::zeros_like(p))));
        }
    }
    fn lr(&self) -> Result<f64> {
        self.lr.item::<f64>()
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr_array(lr, self.lr.device());
    }
}

/// AdamW (Loshchilov & Hutter): Adam with decoupled weight decay,
/// `p -= lr · (m̂ / (√v̂ + ε) + wd · p)`. Its state is [`Adam`]'s.
///
/// ```
/// use cotangent::{self as ct, Array};
/// use cotangent_nn::optim::{AdamW, Optimizer};
/// use cotangent_nn::Tree;
/// let p = Tree::dict([("w", Tree::leaf(Array::scalar(1.0f64)))]);
/// let g = Tree::dict([("w", Tree::leaf(Array::scalar(0.0f64)))]);
/// let mut opt = AdamW::new(0.1, 0.5);
/// opt.set_lr(0.2);
/// let p = opt.step(&p, &g)?; // a zero gradient: only the decay acts
/// assert_eq!(p.require("w")?.item::<f64>()?, 1.0 - 0.2 * 0.5);
/// assert_eq!(opt.lr()?, 0.2);
/// # Ok::<(), ct::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct AdamW {
    /// The Adam part (its `weight_decay` is unused).
    pub adam: Adam,
    /// Decoupled weight decay.
    pub weight_decay: f64,
}

impl AdamW {
    /// AdamW with `betas = (0.9, 0.999)`, `eps = 1e-8` and weight decay `wd`.
    pub fn new(lr: f64, weight_decay: f64) -> Self {
        AdamW { adam: Adam::new(lr), weight_decay }
    }

    /// The number of steps taken (reads the `step` array).
    pub fn steps(&self) -> Result<u64> {
        self.adam.steps()
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, params: &Tree, grads: &Tree) -> Result<Tree> {
        let dir = self.adam.direction(grads)?;
        let (lr, wd) = (&self.adam.lr, self.weight_decay);
        params.zip(&dir, |_, p, d| p - (d + p * wd) * as_like(lr, p))
    }
    fn state(&self) -> Tree {
        self.adam.state_tree()
    }
    fn load_state(&mut self, state: &Tree) -> Result<()> {
        self.adam.load("AdamW", state)
    }
    fn init(&mut self, params: &Tree) {
        self.adam.init(params)
    }
    fn lr(&self) -> Result<f64> {
        self.adam.lr()
    }
    fn set_lr(&mut self, lr: f64) {
        self.adam.set_lr(lr)
    }
}

/// The mean outputs and mean gradients of `value_and_grad` (e.g. from
/// [`crate::value_and_grad`]) over `micro_batches`: gradient accumulation. Each micro-batch's
/// outputs and gradients are evaluated before the next one starts, so only one micro-batch's
/// activations are alive at a time. With a mean loss over micro-batches of equal size, this is
/// the gradient of the whole batch's mean loss.
///
/// The sums run in micro-batch order and the mean is the sum divided by the count, so the
/// result does not depend on threads.
///
/// # Panics
/// If `micro_batches` is empty.
///
/// ```
/// use cotangent::{self as ct, Array, DType};
/// use cotangent_nn::{self as nn, optim, Linear, Module};
/// let model = Linear::new(&ct::random::key(0), 1, 1, false, DType::F64);
/// let vg = nn::value_and_grad(|m: &Linear, b: &[Array]| m.forward(&b[0]).mean_all());
/// let micro = [vec![Array::from_slice(&[1.0f64], &[1, 1])], vec![Array::from_slice(&[3.0f64], &[1, 1])]];
/// let (_, grads) = optim::accumulate_gradients(&vg, &model, &micro)?;
/// // d mean(w x) / dw over x = 1 and 3
/// assert_eq!(grads.require("weight")?.to_vec::<f64>()?, vec![2.0]);
/// # Ok::<(), ct::Error>(())
/// ```
#[track_caller]
pub fn accumulate_gradients<M, F>(value_and_grad: F, model: &M, micro_batches: &[Vec<Array>]) -> Result<ValueAndGrad>
where
    F: Fn(&M, &[Array]) -> Result<ValueAndGrad>,
{
    assert!(
        !micro_batches.is_empty(),
        "cotangent_nn::optim::accumulate_gradients needs at least one micro-batch, but got none"
    );
    let mut sum: Option<ValueAndGrad> = None;
    for batch in micro_batches {
        let (outs, grads) = value_and_grad(model, batch)?;
        let (outs, grads) = match sum.take() {
            None => (outs, grads),
            Some((so, sg)) => {
                if so.len() != outs.len() {
                    return Err(Error::Other(format!(
                        "accumulate_gradients: a micro-batch gave {} outputs, the first gave {}",
                        outs.len(),
                        so.len()
                    )));
                }
                let outs = so.iter().zip(&outs).map(|(a, b)| a + b).collect();
                (outs, sg.zip(&grads, |_, a, b| a + b)?)
            }
        };
        let mut all = outs.clone();
        all.extend(grads.leaves());
        ct::eval(&all)?;
        sum = Some((outs, grads));
    }
    let (outs, grads) = sum.expect("at least one micro-batch");
    let n = micro_batches.len() as f64;
    Ok((outs.iter().map(|o| o / n).collect(), grads.map(|_, g| g / n)))
}

/// A training step compiled with [`compile_step`]: `step(&mut model, &mut optimizer, batch)`
/// returns the loss function's outputs (then the gradient norm before clipping, when
/// clipping), and has written the new parameters into the model and the new state into the
/// optimizer, all evaluated.
pub trait CompiledStep<M, O>:
    Fn(&mut M, &mut O, &[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
{
}
impl<M, O, T> CompiledStep<M, O> for T where
    T: Fn(&mut M, &mut O, &[Array]) -> Result<Vec<Array>> + Send + Sync + Clone + 'static
{
}

/// Compile a whole training step of `model` — `loss_fn(model, batch)`, its gradients over the
/// trainable parameters, optional global-norm clipping to `max_grad_norm`, and `optimizer`'s
/// step — with [`ct::compile`].
///
/// The compiled function takes the trainable parameters, the optimizer state (moments, step
/// count, learning rate) and the batch as inputs, so each call replays the traced program on
/// the current values: the step count advances and a learning rate set with
/// [`Optimizer::set_lr`] between calls takes effect without tracing again. On the CPU its
/// losses, parameters and state are bit-identical to the uncompiled step (`value_and_grad`,
/// `clip_grad_norm`, [`Optimizer::update`]). `model` and `optimizer` give the structure and the
/// constants: the frozen parameters and the optimizer's `betas`, `eps` and weight decay are
/// those of the call to `compile_step` (compile again after changing them). A batch of new
/// shapes traces again. `loss_fn` must not read values of arrays (see [`ct::compile`]).
///
/// ```
/// use cotangent::{self as ct, Array, DType};
/// use cotangent_nn::optim::{self, AdamW, Optimizer};
/// use cotangent_nn::{Linear, Module};
/// let loss = |m: &Linear, b: &[Array]| (m.forward(&b[0]) - &b[1]).square().mean_all();
/// let mut model = Linear::new(&ct::random::key(0), 1, 1, true, DType::F32);
/// let mut opt = AdamW::new(0.1, 0.0);
/// let step = optim::compile_step(loss, &model, &opt, Some(1.0));
/// let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3, 1]);
/// let y = Array::from_slice(&[3.0f32, 5.0, 7.0], &[3, 1]);
/// let first = step(&mut model, &mut opt, &[x.clone(), y.clone()])?[0].item::<f32>()?;
/// for _ in 0..200 {
///     step(&mut model, &mut opt, &[x.clone(), y.clone()])?;
/// }
/// let last = step(&mut model, &mut opt, &[x, y])?[0].item::<f32>()?;
/// assert!(last < 0.01 * first, "{first} -> {last}");
/// assert_eq!(opt.steps()?, 202);
/// # Ok::<(), ct::Error>(())
/// ```
pub fn compile_step<M, O, F, L>(
    loss_fn: F,
    model: &M,
    optimizer: &O,
    max_grad_norm: Option<f64>,
) -> impl CompiledStep<M, O>
where
    M: Module + Send + Sync + 'static,
    O: Optimizer + Clone + Send + Sync + 'static,
    F: Fn(&M, &[Array]) -> L + Send + Sync + 'static,
    L: IntoOutputs + 'static,
{
    // structures only: lazy zeros that are never evaluated, so the closure keeps no buffers
    let params = model.trainable_parameters().map(|_, p| ct::zeros(p.shape(), p.dtype()).to_device(p.device()));
    let mut template = model.clone();
    template.update(&params).expect("the model's own structure");
    let mut template_opt = optimizer.clone();
    template_opt.init(&params);
    let state = template_opt.state().map(|_, a| ct::zeros(a.shape(), a.dtype()).to_device(a.device()));
    let (np, ns) = (params.len(), state.len());
    let vg = crate::value_and_grad(loss_fn);
    let (p_tree, s_tree) = (params.clone(), state.clone());
    let traced = ct::compile(move |xs: &[Array]| -> Result<Vec<Array>> {
        let (p, rest) = xs.split_at(np);
        let (s, batch) = rest.split_at(ns);
        let mut m = template.clone();
        let current = p_tree.with_leaves(p.to_vec())?;
        m.update(&current)?;
        let mut o = template_opt.clone();
        o.load_state(&s_tree.with_leaves(s.to_vec())?)?;
        let (mut outs, grads) = vg(&m, batch)?;
        let grads = match max_grad_norm {
            Some(max) => {
                let (clipped, norm) = clip_grad_norm(&grads, max);
                outs.push(norm);
                clipped
            }
            None => grads,
        };
        let new = o.step(&current, &grads)?;
        outs.extend(new.leaves());
        outs.extend(o.state().leaves());
        Ok(outs)
    });
    move |model: &mut M, opt: &mut O, batch: &[Array]| {
        let params = model.trainable_parameters();
        opt.init(&params);
        let state = opt.state();
        if params.len() != np || state.len() != ns {
            return Err(Error::Other(format!(
                "compile_step: the step was compiled for {np} trainable parameters and {ns} state arrays, \
                 but the model has {} and the optimizer {}",
                params.len(),
                state.len()
            )));
        }
        let mut args = params.leaves();
        args.extend(state.leaves());
        args.extend_from_slice(batch);
        let mut outs = traced(&args)?;
        ct::eval(&outs)?;
        let n_out = outs.len() - np - ns;
        let new_state = outs.split_off(n_out + np);
        let new_params = outs.split_off(n_out);
        model.update(&params.with_leaves(new_params)?)?;
        opt.load_state(&state.with_leaves(new_state)?)?;
        Ok(outs)
    }
}

/// The global L2 norm of all leaves of `grads` (a 0-d array, in the first leaf's dtype).
pub fn global_norm(grads: &Tree) -> Array {
    let leaves = grads.leaves();
    let sq = leaves.iter().map(|g| g.square().sum_all()).reduce(|a, b| a + b);
    match sq {
        Some(s) => s.sqrt(),
        None => Array::scalar(0.0f32),
    }
}

/// Scale `grads` so their global L2 norm is at most `max_norm`: every leaf is multiplied by
/// `min(1, max_norm / (norm + 1e-6))`. Returns the clipped tree and the norm before clipping.
pub fn clip_grad_norm(grads: &Tree, max_norm: f64) -> (Tree, Array) {
    let norm = global_norm(grads);
    let scale = (ct::full_like(&norm, max_norm) / (&norm + 1e-6)).minimum(1.0);
    let clipped = grads.map(|_, g| g * scale.astype(g.dtype()));
    (clipped, norm)
}

/// Learning-rate schedules: functions from the step (0-based) to a rate.
pub mod schedules {
    /// Linear warmup from `init` to `peak` over `steps` steps, then constant `peak`.
    pub fn linear_warmup(init: f64, peak: f64, steps: usize) -> impl Fn(usize) -> f64 + Clone + Send + Sync {
        move |t| if steps == 0 || t >= steps { peak } else { init + (peak - init) * t as f64 / steps as f64 }
    }

    /// Cosine decay from `init` to `end` over `steps` steps, then constant `end`.
    pub fn cosine_decay(init: f64, steps: usize, end: f64) -> impl Fn(usize) -> f64 + Clone + Send + Sync {
        move |t| {
            let frac = if steps == 0 { 1.0 } else { (t.min(steps) as f64) / steps as f64 };
            end + (init - end) * 0.5 * (1.0 + (std::f64::consts::PI * frac).cos())
        }
    }

    /// Linear warmup from 0 to `peak` over `warmup` steps, then cosine decay to `end` at step
    /// `total`.
    pub fn warmup_cosine(
        peak: f64,
        warmup: usize,
        total: usize,
        end: f64,
    ) -> impl Fn(usize) -> f64 + Clone + Send + Sync {
        let w = linear_warmup(0.0, peak, warmup);
        let c = cosine_decay(peak, total.saturating_sub(warmup), end);
        move |t| if t < warmup { w(t) } else { c(t - warmup) }
    }
}
