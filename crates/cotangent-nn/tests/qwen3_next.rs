//! The Qwen3-Next layers against transformers itself.
//!
//! `tests/qwen3_next/*.safetensors` were written by `tests/qwen3_next/gen_reference.py` with
//! transformers' own `Qwen3NextGatedDeltaNet` / `Qwen3NextDecoderLayer` (float32, the
//! pure-PyTorch path, chunks of 64): the parameters under their checkpoint names, an input, the
//! output, and the gradients of `sum(output · cotangent)` with respect to the input and every
//! parameter. Here the layer is built from the file's metadata, loaded by name with
//! `io::load_into_with_prefix`, and its output and gradients compared.
//!
//! Error measure, per tensor: `max |ours − theirs| / max |theirs|` (the largest difference
//! relative to the largest reference magnitude); every tensor must be within 1e-4.
use cotangent::{self as ct, Array, DType, Result};
use cotangent_nn::io::{self, load_into_with_prefix, load_metadata};
use cotangent_nn::qwen3_next::{Qwen3NextConfig, Qwen3NextDecoderLayer, Qwen3NextGatedDeltaNet};
use cotangent_nn::{Module, RecurrenceMode, Tree};
use std::path::PathBuf;

const TOLERANCE: f64 = 1e-4;

const GATED_DELTA_NET_FILES: [&str; 3] = ["gdn_heads2_t70", "gdn_grouped_t100", "gdn_grouped_t17_hf_decay"];
const DECODER_LAYER_FILE: &str = "decoder_grouped_t70";

fn reference_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/qwen3_next").join(format!("{name}.safetensors"))
}

/// A reference file: its config, its parameter prefix and its tensors.
struct Reference {
    config: Qwen3NextConfig,
    prefix: String,
    tensors: Tree,
    path: PathBuf,
}

impl Reference {
    fn read(name: &str) -> Reference {
        let path = reference_path(name);
        let meta = load_metadata(&path).unwrap();
        let config = Qwen3NextConfig::from_fields(|k| meta.get(k).cloned()).unwrap();
        Reference { config, prefix: meta["prefix"].clone(), tensors: io::load(&path).unwrap(), path }
    }

    fn tensor(&self, name: &str) -> &Array {
        self.tensors.require(name).unwrap()
    }
}

/// `max |a − b| / max |b|`.
fn relative_error(ours: &Array, theirs: &Array) -> f64 {
    assert_eq!(ours.shape(), theirs.shape());
    let (a, b) = (ours.to_f64_vec().unwrap(), theirs.to_f64_vec().unwrap());
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    let scale = b.iter().map(|y| y.abs()).fold(0.0, f64::max);
    diff / scale.max(f64::MIN_POSITIVE)
}

/// Output, input gradient and parameter gradients of `forward` with the reference's weights,
/// compared with the reference; returns the largest relative error.
fn compare<M: Module + Send + Sync + 'static>(
    reference: &Reference,
    model: M,
    forward: fn(&M, &Array) -> Result<Array>,
    what: &str,
) -> f64 {
    let params = model.parameters();
    let names = params.names();
    let template = model.clone();
    let f = move |xs: &[Array]| -> Result<Vec<Array>> {
        let mut m = template.clone();
        m.update(&params.with_leaves(xs[1..].to_vec())?)?;
        Ok(vec![forward(&m, &xs[0])?])
    };
    let mut primals = vec![reference.tensor("input").clone()];
    primals.extend(model.parameters().leaves());
    let (outputs, grads) = ct::vjp(f, &primals, &[reference.tensor("cotangent").clone()]).unwrap();

    let mut checks = vec![
        ("output".to_string(), outputs[0].clone(), reference.tensor("output").clone()),
        ("grad.input".to_string(), grads[0].clone(), reference.tensor("grad.input").clone()),
    ];
    for (name, grad) in names.iter().zip(&grads[1..]) {
        let key = format!("grad.{}{name}", reference.prefix);
        checks.push((key.clone(), grad.clone(), reference.tensor(&key).clone()));
    }
    let mut worst = 0.0f64;
    for (name, ours, theirs) in &checks {
        let err = relative_error(ours, theirs);
        assert!(err <= TOLERANCE, "{what}: `{name}` differs from transformers by {err:.2e} (relative)");
        worst = worst.max(err);
    }
    eprintln!("{what}: {} tensors, max relative error {worst:.2e}", checks.len());
    worst
}

fn modes() -> [RecurrenceMode; 3] {
    [RecurrenceMode::Chunked(64), RecurrenceMode::Chunked(16), RecurrenceMode::Recurrent]
}

#[test]
fn gated_delta_net_matches_transformers() {
    for name in GATED_DELTA_NET_FILES {
        let reference = Reference::read(name);
        for mode in modes() {
            let mut config = reference.config;
            config.recurrence = mode;
            let mut layer = Qwen3NextGatedDeltaNet::new(&ct::random::key(0), config, DType::F32);
            load_into_with_prefix(&mut layer, &reference.path, &reference.prefix).unwrap();
            compare(&reference, layer, Qwen3NextGatedDeltaNet::forward, &format!("{name} {mode:?}"));
        }
    }
}

#[test]
fn decoder_layer_matches_transformers() {
    let reference = Reference::read(DECODER_LAYER_FILE);
    for mode in modes() {
        let mut config = reference.config;
        config.recurrence = mode;
        let mut layer = Qwen3NextDecoderLayer::new(&ct::random::key(0), config, DType::F32);
        load_into_with_prefix(&mut layer, &reference.path, &reference.prefix).unwrap();
        compare(&reference, layer, Qwen3NextDecoderLayer::forward, &format!("{DECODER_LAYER_FILE} {mode:?}"));
    }
}

#[test]
fn half_precision_checkpoints_load_converted() {
    let reference = Reference::read(DECODER_LAYER_FILE);
    let dir = std::env::temp_dir().join(format!("ct_nn_qwen3_next_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for dtype in [DType::BF16, DType::F16] {
        let path = dir.join(format!("{dtype}.safetensors"));
        io::save(&path, &reference.tensors, Some(dtype)).unwrap();
        let mut layer = Qwen3NextDecoderLayer::new(&ct::random::key(0), reference.config, DType::F32);
        load_into_with_prefix(&mut layer, &path, &reference.prefix).unwrap();
        assert_eq!(layer.linear_attn.in_proj_qkvz.weight.dtype(), DType::F32);
        let key = format!("{}linear_attn.in_proj_qkvz.weight", reference.prefix);
        let err = relative_error(&layer.linear_attn.in_proj_qkvz.weight, reference.tensor(&key));
        assert!(err < 1e-2, "{dtype}: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn loading_names_every_missing_extra_and_misshaped_tensor() {
    let reference = Reference::read(DECODER_LAYER_FILE);
    let p = &reference.prefix;
    let removed = [format!("{p}linear_attn.dt_bias"), format!("{p}mlp.up_proj.weight")];
    let reshaped = format!("{p}linear_attn.in_proj_ba.weight");
    let extra = format!("{p}linear_attn.surprise");
    let mut tensors: Vec<(String, Array)> =
        reference.tensors.flatten().into_iter().filter(|(n, _)| !removed.contains(n)).collect();
    for (name, a) in &mut tensors {
        if *name == reshaped {
            *a = a.t();
        }
    }
    tensors.push((extra.clone(), Array::scalar(1.0f32)));
    let dir = std::env::temp_dir().join(format!("ct_nn_qwen3_next_broken_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("broken.safetensors");
    io::save(&path, &Tree::unflatten(tensors).unwrap(), None).unwrap();

    let mut layer = Qwen3NextDecoderLayer::new(&ct::random::key(0), reference.config, DType::F32);
    let before = layer.parameters().leaves()[0].to_vec::<f32>().unwrap();
    let message = load_into_with_prefix(&mut layer, &path, p).unwrap_err().to_string();
    for name in removed.iter().chain([&reshaped, &extra]) {
        assert!(message.contains(&format!("`{name}`")), "`{name}` not named in: {message}");
    }
    assert!(message.contains("missing") && message.contains("not a parameter"), "{message}");
    assert_eq!(layer.parameters().leaves()[0].to_vec::<f32>().unwrap(), before, "a failed load changes nothing");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn parameter_names_and_shapes_are_transformers() {
    let reference = Reference::read(DECODER_LAYER_FILE);
    let layer = Qwen3NextDecoderLayer::new(&ct::random::key(0), reference.config, DType::F32);
    let mut ours: Vec<(String, Vec<usize>)> = layer
        .parameters()
        .flatten()
        .into_iter()
        .map(|(n, a)| (format!("{}{n}", reference.prefix), a.shape().to_vec()))
        .collect();
    let mut theirs: Vec<(String, Vec<usize>)> = reference
        .tensors
        .flatten()
        .into_iter()
        .filter(|(n, _)| n.starts_with(&reference.prefix))
        .map(|(n, a)| (n, a.shape().to_vec()))
        .collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
}
