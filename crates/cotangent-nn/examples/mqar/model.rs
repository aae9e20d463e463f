//! The MQAR task and model of the `mqar` example: configuration, data, the 2-layer Gated
//! DeltaNet language model and one training step. `main.rs` drives it; the tests
//! `threads` (losses bit-identical whatever the thread counts) and `soak` (memory flat over
//! thousands of steps) include this file to train the same model at a small size.
use cotangent::{self as ct, Array, DType, Result};
use cotangent_nn::losses::{cross_entropy, Reduction};
use cotangent_nn::optim::{clip_grad_norm, schedules, AdamW, Optimizer};
use cotangent_nn::{self as nn, Activation, Embedding, GatedDeltaNet, GatedDeltaNetConfig, Linear, Mlp, Module};
use cotangent_nn::{RMSNorm, RecurrenceMode, Visitor};
use std::path::Path;

// ---------------------------------------------------------------------------------------------
// Settings

#[derive(Clone, Debug)]
pub struct Config {
    pub vocab: usize,
    pub pairs: usize,
    pub seq_len: usize,
    pub dim: usize,
    pub heads: usize,
    /// Key and value width of each delta-rule head (`None`: `dim / heads`).
    pub head_dim: Option<usize>,
    /// Logits from the embedding matrix (weights tied) instead of an output projection.
    pub tie_head: bool,
    /// Run the loss and its gradients through `ct::compile` (traced once, replayed after).
    pub compile: bool,
    pub batch: usize,
    pub steps: usize,
    pub lr: f64,
    pub seed: u64,
    pub chunk: usize,
    pub recurrent: bool,
    pub test_size: usize,
    pub eval_every: usize,
    pub stop_at: f64,
    pub out: String,
    pub eval: Option<String>,
    /// Stop after this many steps, keeping the schedule of `steps`.
    pub stop_after: Option<usize>,
    /// Print each step's loss, with its bits, on a line of its own.
    pub print_losses: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            vocab: 64,
            pairs: 4,
            seq_len: 64,
            dim: 64,
            heads: 2,
            head_dim: None,
            tie_head: false,
            compile: false,
            batch: 32,
            steps: 1500,
            lr: 1e-2,
            seed: 0,
            chunk: 16,
            recurrent: false,
            test_size: 512,
            eval_every: 100,
            stop_at: 1.0,
            out: default_out(),
            eval: None,
            stop_after: None,
            print_losses: false,
        }
    }
}

impl Config {
    /// The Zoology-scale setting (`--hard`): 64 pairs in sequences of 512 over a vocabulary of
    /// 8192, model width 128, two delta-rule heads of width 128, logits from the embedding
    /// matrix. Without the tied head the model stays at chance (loss ≈ ln 4096) for thousands of
    /// steps: an untied output row must be learnt separately for each of the 4096 values.
    pub fn hard() -> Self {
        Config {
            vocab: 8192,
            pairs: 64,
            seq_len: 512,
            dim: 128,
            heads: 2,
            head_dim: Some(128),
            tie_head: true,
            batch: 64,
            steps: 4000,
            lr: 1e-2,
            chunk: 64,
            eval_every: 50,
            stop_at: 0.99,
            ..Config::default()
        }
    }
}

/// `target/mqar/mqar` in the workspace: beside the build, ignored by git.
pub fn default_out() -> String {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    workspace.join("target/mqar/mqar").display().to_string()
}

// ---------------------------------------------------------------------------------------------
// Data

/// A small seeded generator (SplitMix64) so the data are reproducible.
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// `k` distinct values from `lo..hi`.
    fn distinct(&mut self, k: usize, lo: usize, hi: usize) -> Vec<usize> {
        let mut pool: Vec<usize> = (lo..hi).collect();
        for i in 0..k {
            let j = i + self.below(pool.len() - i);
            pool.swap(i, j);
        }
        pool.truncate(k);
        pool
    }
}

/// A batch: input tokens `[n, T]`, the positions of the queried keys `[n, pairs]` (in order
/// along the sequence) and the values the model must predict there `[n, pairs]`.
pub struct Batch {
    pub inputs: Array,
    pub query_positions: Array,
    pub answers: Array,
}

impl Batch {
    /// The arrays `loss_and_correct` takes, in its order.
    pub fn arrays(&self) -> [Array; 3] {
        [self.inputs.clone(), self.query_positions.clone(), self.answers.clone()]
    }
}

pub fn mqar_batch(rng: &mut Rng, n: usize, c: &Config) -> Batch {
    let (t, p) = (c.seq_len, c.pairs);
    let half = c.vocab / 2;
    let (mut inputs, mut positions, mut answers) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let keys = rng.distinct(p, 1, half); // token 0 is the filler
        let values = rng.distinct(p, half, c.vocab);
        let mut seq = vec![0usize; t];
        for i in 0..p {
            seq[2 * i] = keys[i];
            seq[2 * i + 1] = values[i];
        }
        // each key is asked once, at a random free slot of two tokens after the context
        let slots = rng.distinct(p, 0, (t - 2 * p) / 2);
        let order = rng.distinct(p, 0, p);
        // (position, index of the pair asked there), in order along the sequence
        let mut asked: Vec<(usize, usize)> = slots.iter().zip(&order).map(|(&s, &i)| (2 * p + 2 * s, i)).collect();
        asked.sort_unstable();
        for &(pos, i) in &asked {
            seq[pos] = keys[i];
            seq[pos + 1] = values[i];
            positions.push(pos as i32);
            answers.push(values[i] as i32);
        }
        inputs.extend(seq.iter().map(|&x| x as i32));
    }
    Batch {
        inputs: Array::from_vec(inputs, &[n, t]),
        query_positions: Array::from_vec(positions, &[n, p]),
        answers: Array::from_vec(answers, &[n, p]),
    }
}

// ---------------------------------------------------------------------------------------------
// Model: embedding, 2 × (x + GDN(norm(x)), x + MLP(norm(x))), norm, output projection

#[derive(Clone)]
pub struct Block {
    norm1: RMSNorm,
    mixer: GatedDeltaNet,
    norm2: RMSNorm,
    mlp: Mlp,
}

impl Block {
    fn forward(&self, x: &Array) -> Result<Array> {
        let x = x + self.mixer.forward(&self.norm1.forward(x))?;
        Ok(&x + self.mlp.forward(&self.norm2.forward(&x)))
    }
}

impl Module for Block {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("norm1", &mut self.norm1);
        v.child("mixer", &mut self.mixer);
        v.child("norm2", &mut self.norm2);
        v.child("mlp", &mut self.mlp);
    }
}

#[derive(Clone)]
pub struct LanguageModel {
    embed: Embedding,
    layers: Vec<Block>,
    norm: RMSNorm,
    /// The output projection; `None` when the logits use the embedding matrix (`tie_head`).
    head: Option<Linear>,
}

impl LanguageModel {
    pub fn new(key: &Array, c: &Config) -> Self {
        let keys = ct::random::split_keys(key, 2 + 2 * 2);
        let mut gdn = GatedDeltaNetConfig::new(c.dim, c.heads);
        if let Some(d) = c.head_dim {
            (gdn.head_dim_k, gdn.head_dim_v) = (d, d);
        }
        gdn.mode = if c.recurrent { RecurrenceMode::Recurrent } else { RecurrenceMode::Chunked(c.chunk) };
        let layers = (0..2)
            .map(|i| Block {
                norm1: RMSNorm::new(c.dim, 1e-5, DType::F32),
                mixer: GatedDeltaNet::new(&keys[2 + 2 * i], gdn, DType::F32),
                norm2: RMSNorm::new(c.dim, 1e-5, DType::F32),
                mlp: Mlp::new(&keys[3 + 2 * i], c.dim, 2 * c.dim, Activation::Gelu, DType::F32),
            })
            .collect();
        let mut embed = Embedding::new(&keys[0], c.vocab, c.dim, DType::F32);
        embed.weight = &embed.weight * 0.1;
        LanguageModel {
            embed,
            layers,
            norm: RMSNorm::new(c.dim, 1e-5, DType::F32),
            head: (!c.tie_head).then(|| Linear::new(&keys[1], c.dim, c.vocab, false, DType::F32)),
        }
    }

    /// The last block's output `[B, T, dim]` for tokens `[B, T]`.
    pub fn hidden(&self, tokens: &Array) -> Result<Array> {
        let mut x = self.embed.forward(tokens);
        for layer in &self.layers {
            x = layer.forward(&x)?;
        }
        Ok(x)
    }

    /// Logits `[..., vocab]` of hidden states `[..., dim]`.
    pub fn logits(&self, hidden: &Array) -> Array {
        let x = self.norm.forward(hidden);
        match &self.head {
            Some(head) => head.forward(&x),
            None => self.embed.as_linear(&x),
        }
    }
}

impl Module for LanguageModel {
    fn visit(&mut self, v: &mut dyn Visitor) {
        v.child("embed", &mut self.embed);
        v.child("layers", &mut self.layers);
        v.child("norm", &mut self.norm);
        if let Some(head) = &mut self.head {
            v.child("head", head);
        }
    }
}

/// Mean cross-entropy of the answers at the query positions, and the number of answers the
/// model gets right. `batch` is `[inputs, query_positions, answers]` (see [`Batch`]); logits are
/// computed only at the query positions (a `[B, pairs, vocab]` array, not `[B, T, vocab]`:
/// every other position has no loss).
pub fn loss_and_correct(model: &LanguageModel, batch: &[Array]) -> Result<Vec<Array>> {
    let (inputs, positions, answers) = (&batch[0], &batch[1], &batch[2]);
    let hidden = model.hidden(inputs)?.take_along_axis(&positions.expand_dims(&[-1]), 1);
    let logits = model.logits(&hidden);
    let loss = cross_entropy(&logits, answers, 0.0, Reduction::Mean);
    let hit = logits.argmax(-1, false).equal(answers).astype(DType::F32);
    Ok(vec![loss, hit.sum_all()])
}

/// Accuracy on the query positions of `data`, in batches.
pub fn evaluate(model: &LanguageModel, data: &[Batch]) -> Result<f64> {
    let (mut correct, mut total) = (0.0, 0.0);
    for b in data {
        let out = loss_and_correct(model, &b.arrays())?;
        correct += out[1].item::<f32>()? as f64;
        total += b.answers.size() as f64;
    }
    Ok(correct / total)
}

// ---------------------------------------------------------------------------------------------
// Training

/// A model's loss outputs and gradients for a batch (what `nn::value_and_grad` makes).
type LossAndGrad = Box<dyn Fn(&LanguageModel, &[Array]) -> Result<nn::module::ValueAndGrad> + Send + Sync>;

/// [`loss_and_correct`] and its gradients with respect to the model's trainable parameters,
/// through `ct::compile`: one function of the flat parameters and the batch, traced on its first
/// call and replayed after. Results are bit-identical to `nn::value_and_grad`'s on the CPU.
fn compiled_loss_and_grad(model: &LanguageModel) -> LossAndGrad {
    let structure = model.trainable_parameters();
    let leaves = structure.leaves().len();
    let template = model.clone();
    let tree = structure.clone();
    let vg = ct::value_and_grad_argnums(
        move |xs: &[Array]| -> Result<Vec<Array>> {
            let (params, batch) = xs.split_at(leaves);
            let mut m = template.clone();
            m.update(&tree.with_leaves(params.to_vec())?)?;
            loss_and_correct(&m, batch)
        },
        &(0..leaves).collect::<Vec<_>>(),
    );
    let step = ct::compile(move |xs: &[Array]| -> Result<Vec<Array>> {
        let (mut outs, grads) = vg(xs)?;
        outs.extend(grads);
        Ok(outs)
    });
    Box::new(move |model: &LanguageModel, batch: &[Array]| {
        let mut args = model.trainable_parameters().leaves();
        args.extend_from_slice(batch);
        let mut outs = step(&args)?;
        let grads = outs.split_off(2);
        Ok((outs, structure.with_leaves(grads)?))
    })
}

/// What `main` trains: the model, AdamW under a warmup + cosine schedule over `c.steps`, and
/// the seeded stream of training batches.
pub struct Training {
    pub model: LanguageModel,
    opt: AdamW,
    schedule: Box<dyn Fn(usize) -> f64 + Send + Sync>,
    loss_and_grad: LossAndGrad,
    rng: Rng,
    batch: usize,
    config: Config,
    pub step: usize,
}

/// One step's loss and training accuracy on the queried positions.
pub struct StepResult {
    pub loss: f32,
    pub train_acc: f64,
}

impl Training {
    pub fn new(c: &Config) -> Self {
        let model = LanguageModel::new(&ct::random::key(c.seed), c);
        let loss_and_grad =
            if c.compile { compiled_loss_and_grad(&model) } else { Box::new(nn::value_and_grad(loss_and_correct)) };
        Training {
            model,
            opt: AdamW::new(c.lr, 0.01),
            schedule: Box::new(schedules::warmup_cosine(c.lr, c.steps / 20, c.steps, c.lr / 20.0)),
            loss_and_grad,
            rng: Rng(c.seed),
            batch: c.batch,
            config: c.clone(),
            step: 0,
        }
    }

    /// One step: a fresh batch, gradients clipped to norm 1, an AdamW update.
    pub fn step(&mut self) -> Result<StepResult> {
        let b = mqar_batch(&mut self.rng, self.batch, &self.config);
        let (outs, grads) = (self.loss_and_grad)(&self.model, &b.arrays())?;
        let (grads, _norm) = clip_grad_norm(&grads, 1.0);
        self.opt.set_lr((self.schedule)(self.step));
        self.opt.update(&mut self.model, &grads)?;
        self.step += 1;
        let loss = outs[0].item::<f32>()?;
        let train_acc = outs[1].item::<f32>()? as f64 / b.answers.size() as f64;
        Ok(StepResult { loss, train_acc })
    }
}
