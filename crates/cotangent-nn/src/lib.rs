//! `cotangent-nn`: neural-network building blocks on top of [`cotangent`].
//!
//! - [`Tree`]: nested, named parameter trees (`"layers.0.attn.q_proj.weight"`), with
//!   flatten/unflatten, map and zip; gradients and optimizer state are trees of the same shape.
//! - [`Module`]: models hold their parameters and name each once in [`Module::visit`] (a
//!   [`Visitor`] from which parameter trees, updates and checkpoint loading derive);
//!   [`value_and_grad`] differentiates a loss over a model's trainable parameters ([`Freeze`]
//!   excludes some) and returns a gradient tree.
//! - Layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`RMSNorm`], [`Dropout`], [`Mlp`],
//!   [`MultiHeadAttention`] and the [`GatedDeltaNet`] layer, whose recurrence runs as a
//!   chunk-recompute custom function ([`gated_delta`]).
//! - [`qwen3_next`]: Qwen3-Next's Gated DeltaNet and linear-attention decoder layer, with
//!   Hugging Face parameter names (checkpoints load by name), checked against transformers.
//! - [`lora`]: LoRA adapters on a frozen base (targets by name pattern, merge, PEFT files).
//! - [`models`]: whole Qwen3-Next / Qwen3.5 causal LMs from Hugging Face folders (load, logits, loss, generate).
//! - [`activations`], [`init`]ialisers, [`losses`], [`optim`]izers and schedules, and
//!   safetensors [`io`].
//!
//! ```
//! use cotangent::{self as ct, Array, DType};
//! use cotangent_nn::{self as nn, optim::Optimizer, Linear, Module};
//! let mut model = Linear::new(&ct::random::key(0), 1, 1, true, DType::F32);
//! let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3, 1]);
//! let y = Array::from_slice(&[3.0f32, 5.0, 7.0], &[3, 1]); // y = 2x + 1
//! let vg = nn::value_and_grad(|m: &Linear, b: &[Array]| {
//!     nn::losses::mse(&m.forward(&b[0]), &b[1], nn::losses::Reduction::Mean)
//! });
//! let mut opt = nn::optim::Adam::new(0.1);
//! for _ in 0..300 {
//!     let (_loss, grads) = vg(&model, &[x.clone(), y.clone()]).unwrap();
//!     opt.update(&mut model, &grads).unwrap();
//! }
//! let w = model.weight.item::<f32>().unwrap();
//! assert!((w - 2.0).abs() < 0.05, "w = {w}");
//! ```
#![warn(missing_docs)]

pub mod activations;
mod checks;
pub mod gated_delta;
pub mod init;
pub mod io;
pub mod layers;
pub mod lora;
pub mod losses;
pub mod models;
pub mod module;
pub mod optim;
pub mod qwen3_next;
pub mod tree;

pub use gated_delta::{GatedDeltaNet, GatedDeltaNetConfig, RecurrenceMode};
pub use layers::{Activation, Dropout, Embedding, LayerNorm, Linear, Mlp, MultiHeadAttention, RMSNorm};
pub use module::{value_and_grad, Freeze, Module, Visitor};
pub use tree::Tree;
