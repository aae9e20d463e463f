//! Optimizers ([`Sgd`], [`Adam`], [`AdamW`]), global-norm gradient clipping and
//! learning-rate schedules.
//!
//! An optimizer's state is a [`Tree`] shaped like the parameters. `step(params, grads)` returns
//! the new parameters (lazy arrays); evaluate them, and the state, once per step — e.g. with
//! [`Optimizer::update`], which also writes them into a model.
//!
//! Set the learning rate from a schedule each step: `opt.lr` for [`Sgd`] and [`Adam`], [`AdamW::set_lr`] for AdamW.
use crate::{Module, Tree};
use cotangent::{self as ct, Array, Result};

/// A first-order optimizer.
pub trait Optimizer {
    /// New parameters from the current ones and their gradients (trees of the same names).
    /// Advances the step count and the state.
    fn step(&mut self, params: &Tree, grads: &Tree) -> Result<Tree>;

    /// The optimizer state as a tree (empty when stateless).
    fn state(&self) -> Tree;

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
}

/// Stochastic gradient descent with optional momentum (heavy-ball or Nesterov) and L2 weight
/// decay, as PyTorch's `SGD`:
/// `g += wd·p; b = μ b + g; p -= lr · (nesterov ? g + μ b : b)` (`b = g` on the first step).
#[derive(Clone, Debug)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f64,
    /// Momentum `μ` (0: plain SGD).
    pub momentum: f64,
    /// Use Nesterov momentum.
    pub nesterov: bool,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Momentum buffers (`None` until the first step).
    pub buffers: Option<Tree>,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Sgd { lr, momentum: 0.0, nesterov: false, weight_decay: 0.0, buffers: None }
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
            return params.zip(&g, |_, p, g| p - g * self.lr);
        }
        let mu = self.momentum;
        let buf = match &self.buffers {
            None => g.clone(),
            Some(b) => b.zip(&g, |_, b, g| b * mu + g)?,
        };
        let dir = if self.nesterov { g.zip(&buf, |_, g, b| g + b * mu)? } else { buf.clone() };
        self.buffers = Some(buf);
        params.zip(&dir, |_, p, d| p - d * self.lr)
    }
    fn state(&self) -> Tree {
        self.buffers.clone().unwrap_or_default()
    }
}

/// Adam (Kingma & Ba): `m = β₁m + (1-β₁)g; v = β₂v + (1-β₂)g²;
/// p -= lr · m̂ / (√v̂ + ε)` with bias-corrected `m̂ = m/(1-β₁ᵗ)`, `v̂ = v/(1-β₂ᵗ)`.
/// `weight_decay` adds an L2 term to the gradient (PyTorch's `Adam`); for decoupled decay use
/// [`AdamW`].
#[derive(Clone, Debug)]
pub struct Adam {
    /// Learning rate.
    pub lr: f64,
    /// `(β₁, β₂)`.
    pub betas: (f64, f64),
    /// `ε`.
    pub eps: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Steps taken.
    pub t: u64,
    /// First moments.
    pub m: Option<Tree>,
    /// Second moments.
    pub v: Option<Tree>,
}

impl Adam {
    /// Adam with `betas = (0.9, 0.999)`, `eps = 1e-8`.
    pub fn new(lr: f64) -> Self {
        Adam { lr, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.0, t: 0, m: None, v: None }
    }

    /// Advance the moments and return the bias-corrected update direction `m̂ / (√v̂ + ε)`.
    fn direction(&mut self, grads: &Tree) -> Result<Tree> {
        let (b1, b2) = self.betas;
        self.t += 1;
        let m = match &self.m {
            None => grads.map(|_, g| g * (1.0 - b1)),
            Some(m) => m.zip(grads, |_, m, g| m * b1 + g * (1.0 - b1))?,
        };
        let v = match &self.v {
            None => grads.map(|_, g| g.square() * (1.0 - b2)),
            Some(v) => v.zip(grads, |_, v, g| v * b2 + g.square() * (1.0 - b2))?,
        };
        let c1 = 1.0 - b1.powi(self.t as i32);
        let c2 = 1.0 - b2.powi(self.t as i32);
        let eps = self.eps;
        let dir = m.zip(&v, |_, m, v| (m * (1.0 / c1)) / ((v * (1.0 / c2)).sqrt() + eps))?;
        self.m = Some(m);
        self.v = Some(v);
        Ok(dir)
    }
}

fn moments_state(m: &Option<Tree>, v: &Option<Tree>) -> Tree {
    match (m, v) {
        (Some(m), Some(v)) => Tree::dict([("m", m.clone()), ("v", v.clone())]),
        _ => Tree::empty(),
    }
}

impl Optimizer for Adam {
    fn step(&mut self, params: &Tree, grads: &Tree) -> Result<Tree> {
        let wd = self.weight_decay;
        let g = if wd != 0.0 { grads.zip(params, |_, g, p| g + p * wd)? } else { grads.clone() };
        let dir = self.direction(&g)?;
        params.zip(&dir, |_, p, d| p - d * self.lr)
    }
    fn state(&self) -> Tree {
        moments_state(&self.m, &self.v)
    }
}

/// AdamW (Loshchilov & Hutter): Adam with decoupled weight decay,
/// `p -= lr · (m̂ / (√v̂ + ε) + wd · p)`.
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
    /// Set the learning rate (e.g. from a schedule).
    pub fn set_lr(&mut self, lr: f64) {
        self.adam.lr = lr;
    }
    /// The learning rate.
    pub fn lr(&self) -> f64 {
        self.adam.lr
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, params: &Tree, grads: &Tree) -> Result<Tree> {
        let dir = self.adam.direction(grads)?;
        let (lr, wd) = (self.adam.lr, self.weight_decay);
        params.zip(&dir, |_, p, d| p - (d + p * wd) * lr)
    }
    fn state(&self) -> Tree {
        moments_state(&self.adam.m, &self.adam.v)
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
