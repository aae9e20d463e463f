//! LoRA adapters on small random Qwen3-Next (fused projections, a dense and an MoE layer) and
//! Qwen3.5 (split projections) models: gradients against finite differences and against the
//! full-weight gradient projected onto the adapters, a frozen base, merge, a bf16 base
//! training f32 adapters, and PEFT-layout files (round trip, a hand-written file, errors).
use cotangent::{self as ct, Array, DType};
use cotangent_nn::lora::{self, LoraConfig};
use cotangent_nn::models::{CausalLm, ModelConfig};
use cotangent_nn::optim::{AdamW, Optimizer};
use cotangent_nn::{self as nn, Activation, Linear, Mlp, Module, Tree};
use std::path::PathBuf;

/// Qwen3-Next: layer 0 linear attention (`in_proj_qkvz`, `in_proj_ba`) with a dense MLP,
/// layer 1 full attention with a sparse MoE (3 experts, top 2, shared expert).
fn next_moe_config() -> ModelConfig {
    ModelConfig::from_json(
        r#"{"model_type": "qwen3_next", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 12,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
        "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 4,
        "linear_value_head_dim": 4, "layer_types": ["linear_attention", "full_attention"],
        "mlp_only_layers": [0], "num_experts": 3, "num_experts_per_tok": 2, "moe_intermediate_size": 6,
        "shared_expert_intermediate_size": 6, "partial_rotary_factor": 0.5}"#,
    )
    .unwrap()
}

/// Qwen3.5 dense: layer 0 linear attention (`in_proj_qkv`, `in_proj_z`, ...), layer 1 full.
fn split_config() -> ModelConfig {
    ModelConfig::from_json(
        r#"{"model_type": "qwen3_5_text", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 12,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
        "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 4,
        "linear_value_head_dim": 4, "full_attention_interval": 2, "partial_rotary_factor": 0.5}"#,
    )
    .unwrap()
}

fn ids() -> Array {
    Array::from_slice(&[1i64, 5, 2, 9, 3, 7, 0, 4, 11, 6, 15, 2], &[2, 6])
}

/// A fresh directory under the system temp dir.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cotangent_lora_{name}_{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    dir
}

/// Give every `lora_B` (and, if `a_too`, every `lora_A`) random values so the adapters matter.
fn randomize_adapters<M: Module>(model: &mut M, seed: u64, a_too: bool) {
    let trainable = model.trainable_parameters();
    let mut i = 0;
    let new = trainable.map(|name, p| {
        i += 1;
        if name.ends_with("lora_B") || a_too {
            ct::random::normal(&ct::random::fold_in(&ct::random::key(seed), i), p.shape(), p.dtype()) * 0.3
        } else {
            p.clone()
        }
    });
    model.update(&new).unwrap();
}

fn f64s(a: &Array) -> Vec<f64> {
    a.astype(DType::F64).to_vec::<f64>().unwrap()
}

/// Row-major `[m, k] x [k, n]` in f64 on the host (the reference for the projection test).
fn host_matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                out[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    out
}

fn host_transpose(a: &[f64], m: usize, n: usize) -> Vec<f64> {
    (0..n * m).map(|ji| a[(ji % m) * n + ji / m]).collect()
}

fn assert_close(what: &str, got: &[f64], want: &[f64], rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= rel * scale, "{what}[{i}]: got {g}, want {w} (scale {scale})");
    }
}

fn loss_fn(m: &CausalLm, b: &[Array]) -> Array {
    m.loss(&b[0], &b[0]).unwrap()
}

#[test]
fn apply_targets_layers_by_pattern_and_freezes_the_rest() {
    let mut model = CausalLm::new(&ct::random::key(0), next_moe_config(), DType::F32);
    let all_before = model.parameters().names();
    let config = LoraConfig::new(2, 4.0, &["q_proj", "in_proj_qkvz", "experts.*.up_proj", "layers.0.mlp.down_proj"]);
    let adapted = lora::apply(&mut model, &config, &ct::random::key(1)).unwrap();
    assert_eq!(
        adapted,
        [
            "model.layers.0.linear_attn.in_proj_qkvz",
            "model.layers.0.mlp.down_proj",
            "model.layers.1.self_attn.q_proj",
            "model.layers.1.mlp.experts.0.up_proj",
            "model.layers.1.mlp.experts.1.up_proj",
            "model.layers.1.mlp.experts.2.up_proj",
        ]
    );
    let want: Vec<String> = adapted.iter().flat_map(|n| [format!("{n}.lora_A"), format!("{n}.lora_B")]).collect();
    assert_eq!(model.trainable_parameters().names(), want);
    // every base parameter is still a parameter (and in checkpoints), the adapters too
    let all = model.parameters().names();
    assert!(all_before.iter().all(|n| all.contains(n)));
    assert_eq!(all.len(), all_before.len() + want.len());
    // shapes and init: A [r, in] within 1/sqrt(in), B [out, r] zero
    for (name, adapter) in lora::adapters(&mut model) {
        let w = model.parameters().get(&format!("{name}.weight")).unwrap().clone();
        let (out_f, in_f) = (w.shape()[0], w.shape()[1]);
        assert_eq!(adapter.a.shape(), &[2, in_f], "{name}");
        assert_eq!(adapter.b.shape(), &[out_f, 2], "{name}");
        let bound = 1.0 / (in_f as f64).sqrt();
        let a = f64s(&adapter.a);
        assert!(a.iter().all(|v| v.abs() <= bound) && a.iter().any(|v| v.abs() > bound / 10.0), "{name}: {a:?}");
        assert!(f64s(&adapter.b).iter().all(|&v| v == 0.0));
        assert_eq!(adapter.a.dtype(), DType::F32);
    }
    // B = 0: the adapted model computes what the base did
    let base = CausalLm::new(&ct::random::key(0), next_moe_config(), DType::F32);
    assert_eq!(f64s(&model.logits(&ids()).unwrap()), f64s(&base.logits(&ids()).unwrap()));
    // a second apply on adapted layers, and targets matching nothing, are errors
    let err = lora::apply(&mut model, &config, &ct::random::key(1)).unwrap_err().to_string();
    assert!(err.contains("already have adapters") && err.contains("model.layers.1.self_attn.q_proj"), "{err}");
    let err =
        lora::apply(&mut model, &LoraConfig::new(2, 4.0, &["nope_proj"]), &ct::random::key(1)).unwrap_err().to_string();
    assert!(err.contains("no Linear layer matches") && err.contains("nope_proj"), "{err}");
    let err = lora::apply(&mut model, &LoraConfig::new(0, 4.0, &["o_proj"]), &ct::random::key(1)).unwrap_err();
    assert!(err.to_string().contains("the rank is 0"), "{err}");
}

/// Central differences in f64 of a module made only of f64 layers: exact to rounding.
#[test]
fn gradients_match_finite_differences_in_f64() {
    let mut mlp = Mlp::new(&ct::random::key(3), 3, 5, Activation::Tanh, DType::F64);
    lora::apply(&mut mlp, &LoraConfig::new(2, 3.0, &["fc1", "fc2"]), &ct::random::key(4)).unwrap();
    randomize_adapters(&mut mlp, 5, false);
    let x = ct::random::normal(&ct::random::key(6), &[4, 3], DType::F64);
    let target = ct::random::normal(&ct::random::key(7), &[4, 3], DType::F64);
    let loss = |m: &Mlp, b: &[Array]| (m.forward(&b[0]) - &b[1]).square().sum_all();
    let vg = nn::value_and_grad(loss);
    let batch = [x, target];
    let (_, grads) = vg(&mlp, &batch).unwrap();
    let params = mlp.trainable_parameters();
    assert_eq!(grads.names(), params.names());
    let eps = 1e-6;
    for (name, p) in params.flatten() {
        let values = f64s(&p);
        let g = f64s(grads.get(&name).unwrap());
        let mut fd = Vec::new();
        for i in 0..values.len() {
            let at = |d: f64| {
                let mut v = values.clone();
                v[i] += d;
                let mut m = mlp.clone();
                m.update(&Tree::unflatten([(name.clone(), Array::from_slice(&v, p.shape()))]).unwrap()).unwrap();
                loss(&m, &batch).item::<f64>().unwrap()
            };
            fd.push((at(eps) - at(-eps)) / (2.0 * eps));
        }
        assert_close(&name, &g, &fd, 1e-6);
    }
}

/// Directional central differences of the causal-LM loss of a whole model (the model's
/// internals run partly in f32, so the tolerance is f32's).
#[test]
fn model_gradients_match_finite_differences() {
    let mut model = CausalLm::new(&ct::random::key(10), split_config(), DType::F64);
    let config = LoraConfig::new(2, 4.0, &["in_proj_qkv", "in_proj_z", "q_proj", "o_proj", "up_proj", "down_proj"]);
    lora::apply(&mut model, &config, &ct::random::key(11)).unwrap();
    randomize_adapters(&mut model, 12, false);
    // a loss in f64 from the final hidden states (the logits are f32)
    let w = ct::random::normal(&ct::random::key(13), &[2, 6, 8], DType::F64);
    let loss = move |m: &CausalLm, b: &[Array]| (m.hidden_states(&b[0], None).unwrap() * &w).sum_all();
    let vg = nn::value_and_grad(loss.clone());
    let batch = [ids()];
    let (_, grads) = vg(&model, &batch).unwrap();
    let params = model.trainable_parameters();
    assert_eq!(grads.names(), params.names());
    for dir_seed in 0..3u32 {
        // a random unit direction over all adapter parameters
        let raw = params.map(|name, p| {
            let k = ct::random::fold_in(&ct::random::key(100 + dir_seed as u64), name.len() as u32 * 7 + dir_seed);
            ct::random::normal(&k, p.shape(), DType::F64)
        });
        let norm = raw.leaves().iter().map(|d| f64s(d).iter().map(|v| v * v).sum::<f64>()).sum::<f64>().sqrt();
        let dirs = raw.map(|_, d| d * (1.0 / norm));
        let analytic: f64 = params
            .names()
            .iter()
            .map(|n| {
                f64s(grads.get(n).unwrap()).iter().zip(f64s(dirs.get(n).unwrap())).map(|(g, d)| g * d).sum::<f64>()
            })
            .sum();
        let at = |t: f64| {
            let mut m = model.clone();
            m.update(&params.zip(&dirs, |_, p, d| p + d * t).unwrap()).unwrap();
            loss(&m, &batch).item::<f64>().unwrap()
        };
        // central differences at h and h/2, Richardson-extrapolated (error O(h⁴) plus f32 noise / h)
        let h = 5e-2;
        let central = |h: f64| (at(h) - at(-h)) / (2.0 * h);
        let fd = (4.0 * central(h / 2.0) - central(h)) / 3.0;
        assert!(
            (fd - analytic).abs() <= 1e-4 * analytic.abs().max(1.0),
            "direction {dir_seed}: fd {fd}, grad {analytic}"
        );
    }
}

/// With `W_eff = W + s·B·A`: `dL/dA = s·Bᵀ·G` and `dL/dB = s·G·Aᵀ`, `G = dL/dW_eff` from
/// differentiating the merged model.
fn check_projection(config_json: ModelConfig, targets: &[&str]) {
    let mut model = CausalLm::new(&ct::random::key(20), config_json, DType::F64);
    let config = LoraConfig::new(3, 6.0, targets);
    let adapted = lora::apply(&mut model, &config, &ct::random::key(21)).unwrap();
    randomize_adapters(&mut model, 22, false);
    let vg = nn::value_and_grad(loss_fn);
    let batch = [ids()];
    let (loss_adapted, adapter_grads) = vg(&model, &batch).unwrap();
    let mut merged = model.clone();
    lora::merge(&mut merged).unwrap();
    assert!(lora::adapters(&mut merged).is_empty());
    let (loss_merged, full_grads) = vg(&merged, &batch).unwrap();
    let (la, lm) = (loss_adapted[0].item::<f32>().unwrap(), loss_merged[0].item::<f32>().unwrap());
    assert!((la - lm).abs() < 1e-5, "loss adapted {la}, merged {lm}");
    let s = config.scale();
    for (name, adapter) in lora::adapters(&mut model) {
        assert!(adapted.contains(&name));
        let g = f64s(full_grads.get(&format!("{name}.weight")).unwrap()); // [out, in]
        let (r, in_f, out_f) = (adapter.rank(), adapter.a.shape()[1], adapter.b.shape()[0]);
        let (a, b) = (f64s(&adapter.a), f64s(&adapter.b));
        let want_a: Vec<f64> =
            host_matmul(&host_transpose(&b, out_f, r), &g, r, out_f, in_f).iter().map(|v| v * s).collect();
        let want_b: Vec<f64> =
            host_matmul(&g, &host_transpose(&a, r, in_f), out_f, in_f, r).iter().map(|v| v * s).collect();
        assert_close(
            &format!("{name}.lora_A"),
            &f64s(adapter_grads.get(&format!("{name}.lora_A")).unwrap()),
            &want_a,
            1e-4,
        );
        assert_close(
            &format!("{name}.lora_B"),
            &f64s(adapter_grads.get(&format!("{name}.lora_B")).unwrap()),
            &want_b,
            1e-4,
        );
    }
}

#[test]
fn gradients_are_the_full_weight_gradient_projected_split_model() {
    check_projection(split_config(), &["in_proj_qkv", "in_proj_b", "k_proj", "v_proj", "gate_proj", "lm_head"]);
}

#[test]
fn gradients_are_the_full_weight_gradient_projected_moe_model() {
    check_projection(
        next_moe_config(),
        &["in_proj_qkvz", "in_proj_ba", "out_proj", "q_proj", "experts.*.up_proj", "shared_expert.down_proj"],
    );
}

#[test]
fn frozen_base_has_no_gradient_and_merge_keeps_the_logits() {
    let mut model = CausalLm::new(&ct::random::key(30), next_moe_config(), DType::F32);
    let adapted = lora::apply(
        &mut model,
        &LoraConfig::new(2, 2.0, &["q_proj", "v_proj", "in_proj_qkvz", "experts.*.down_proj"]),
        &ct::random::key(31),
    )
    .unwrap();
    randomize_adapters(&mut model, 32, true);
    let (_, grads) = nn::value_and_grad(loss_fn)(&model, &[ids()]).unwrap();
    let names = grads.names();
    assert_eq!(names.len(), 2 * adapted.len());
    assert!(names.iter().all(|n| n.ends_with(".lora_A") || n.ends_with(".lora_B")), "{names:?}");
    assert!(grads.get("model.layers.1.self_attn.q_proj.weight").is_none());
    assert!(grads.get("model.embed_tokens.weight").is_none());
    assert!(grads.leaves().iter().all(|g| f64s(g).iter().all(|v| v.is_finite())));
    assert!(grads.leaves().iter().any(|g| f64s(g).iter().any(|&v| v != 0.0)));

    let adapted_logits = f64s(&model.logits(&ids()).unwrap());
    let base = CausalLm::new(&ct::random::key(30), next_moe_config(), DType::F32);
    let base_logits = f64s(&base.logits(&ids()).unwrap());
    assert!(
        adapted_logits.iter().zip(&base_logits).any(|(a, b)| (a - b).abs() > 1e-3),
        "the adapters change the logits"
    );
    let mut merged = model.clone();
    lora::merge(&mut merged).unwrap();
    assert_close("merged logits", &f64s(&merged.logits(&ids()).unwrap()), &adapted_logits, 1e-5);
    // the merged model has no adapters and trains every parameter again
    assert_eq!(merged.trainable_parameters().names(), base.parameters().names());
}

#[test]
fn bf16_base_trains_f32_adapters() {
    let mut model = CausalLm::new(&ct::random::key(40), next_moe_config(), DType::BF16);
    let base_before: Vec<(String, Vec<f64>)> =
        model.parameters().flatten().iter().map(|(n, a)| (n.clone(), f64s(a))).collect();
    lora::apply(
        &mut model,
        &LoraConfig::new(4, 8.0, &["q_proj", "v_proj", "in_proj_qkvz", "out_proj", "experts.*.up_proj"]),
        &ct::random::key(41),
    )
    .unwrap();
    let vg = nn::value_and_grad(loss_fn);
    let mut opt = AdamW::new(2e-2, 0.0);
    let batch = [ids()];
    let mut losses = Vec::new();
    for _ in 0..6 {
        let (loss, grads) = vg(&model, &batch).unwrap();
        losses.push(loss[0].item::<f32>().unwrap());
        assert!(grads.leaves().iter().all(|g| g.dtype() == DType::F32));
        opt.update(&mut model, &grads).unwrap();
    }
    assert!(losses[5] < losses[0] - 0.05, "losses {losses:?}");
    // optimizer state only for the adapters, in f32
    let state = opt.state();
    assert!(!state.is_empty());
    for (name, s) in state.flatten() {
        // the step count and learning rate are 0-d arrays of the state too (i64, f64)
        if name == "step" || name == "lr" {
            continue;
        }
        assert!(name.ends_with("lora_A") || name.ends_with("lora_B"), "{name}");
        assert_eq!(s.dtype(), DType::F32, "{name}");
    }
    // the base is untouched, still bf16
    let params = model.parameters();
    for (name, values) in base_before {
        let p = params.get(&name).unwrap();
        assert_eq!(p.dtype(), DType::BF16, "{name}");
        assert_eq!(f64s(p), values, "{name} changed");
    }
    for (name, adapter) in lora::adapters(&mut model) {
        assert_eq!((adapter.a.dtype(), adapter.b.dtype()), (DType::F32, DType::F32), "{name}");
    }
    assert_eq!(model.logits(&ids()).unwrap().dtype(), DType::F32);
}

#[test]
fn save_load_round_trip_gives_identical_logits() {
    let dir = temp_dir("round_trip");
    let mut model = CausalLm::new(&ct::random::key(50), next_moe_config(), DType::F32);
    let config = LoraConfig::new(2, 5.0, &["in_proj_qkvz", "k_proj", "experts.*.gate_proj"]).with_dropout(0.05);
    lora::apply(&mut model, &config, &ct::random::key(51)).unwrap();
    randomize_adapters(&mut model, 52, true);
    lora::save_adapters(&model, &config, &dir).unwrap();

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(json["peft_type"], "LORA");
    assert_eq!(json["r"], 2);
    assert_eq!(json["lora_alpha"], 5);
    assert_eq!(json["lora_dropout"], 0.05);
    assert_eq!(json["bias"], "none");
    assert_eq!(json["task_type"], "CAUSAL_LM");
    let tensors = nn::io::load(dir.join("adapter_model.safetensors")).unwrap();
    assert_eq!(
        tensors.get("base_model.model.model.layers.1.mlp.experts.2.gate_proj.lora_B.weight").unwrap().shape(),
        &[6, 2]
    );
    assert_eq!(
        tensors.get("base_model.model.model.layers.0.linear_attn.in_proj_qkvz.lora_A.weight").unwrap().shape(),
        &[2, 8]
    );

    let mut fresh = CausalLm::new(&ct::random::key(50), next_moe_config(), DType::F32);
    let loaded = lora::load_adapters(&mut fresh, &dir).unwrap();
    assert_eq!(loaded, config);
    assert_eq!(fresh.trainable_parameters().names(), model.trainable_parameters().names());
    assert_eq!(f64s(&fresh.logits(&ids()).unwrap()), f64s(&model.logits(&ids()).unwrap()));
    std::fs::remove_dir_all(&dir).ok();
}

/// A PEFT-layout folder written by hand: `adapter_config.json` as PEFT writes it and tensors
/// in bf16 under PEFT's names.
fn write_peft(dir: &PathBuf, config: &str, tensors: &[(&str, Vec<usize>, Vec<f32>)]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("adapter_config.json"), config).unwrap();
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect())
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| {
            (n.to_string(), safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, s.clone(), b).unwrap())
        })
        .collect();
    std::fs::write(dir.join("adapter_model.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
}

const PEFT_CONFIG: &str = r#"{
  "alpha_pattern": {},
  "auto_mapping": null,
  "base_model_name_or_path": "Qwen/Qwen3.5-tiny",
  "bias": "none",
  "fan_in_fan_out": false,
  "inference_mode": true,
  "init_lora_weights": true,
  "layer_replication": null,
  "layers_pattern": null,
  "layers_to_transform": null,
  "loftq_config": {},
  "lora_alpha": 16,
  "lora_dropout": 0.1,
  "megatron_config": null,
  "megatron_core": "megatron.core",
  "modules_to_save": null,
  "peft_type": "LORA",
  "r": 2,
  "rank_pattern": {},
  "revision": null,
  "target_modules": ["in_proj_qkv", "q_proj"],
  "task_type": "CAUSAL_LM",
  "use_dora": false,
  "use_rslora": false
}"#;

/// bf16-exact values (multiples of 1/16, small) so the file's rounding does not matter.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 7 + seed * 3) % 11) as f32 - 5.0) / 16.0).collect()
}

#[test]
fn a_hand_written_peft_file_loads() {
    let dir = temp_dir("hand_written");
    // in_proj_qkv: hidden 8 -> 2·4 + 8 = 16; q_proj: 8 -> 2 heads · 4 · 2 = 16
    let (qkv_a, qkv_b, q_a, q_b) = (values(2 * 8, 1), values(16 * 2, 2), values(2 * 8, 3), values(16 * 2, 4));
    write_peft(
        &dir,
        PEFT_CONFIG,
        &[
            ("base_model.model.model.layers.0.linear_attn.in_proj_qkv.lora_A.weight", vec![2, 8], qkv_a.clone()),
            ("base_model.model.model.layers.0.linear_attn.in_proj_qkv.lora_B.weight", vec![16, 2], qkv_b.clone()),
            ("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight", vec![2, 8], q_a.clone()),
            ("base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight", vec![16, 2], q_b.clone()),
        ],
    );
    let mut model = CausalLm::new(&ct::random::key(60), split_config(), DType::F64);
    let config = lora::load_adapters(&mut model, &dir).unwrap();
    assert_eq!(config, LoraConfig::new(2, 16.0, &["in_proj_qkv", "q_proj"]).with_dropout(0.1));
    assert_eq!(
        model.trainable_parameters().names(),
        [
            "model.layers.0.linear_attn.in_proj_qkv.lora_A",
            "model.layers.0.linear_attn.in_proj_qkv.lora_B",
            "model.layers.1.self_attn.q_proj.lora_A",
            "model.layers.1.self_attn.q_proj.lora_B",
        ]
    );
    // the reference: a plain model whose weights are W + (16 / 2)·B·A, computed on the host
    let mut reference = CausalLm::new(&ct::random::key(60), split_config(), DType::F64);
    let params = reference.parameters();
    let effective = |name: &str, a: &[f32], b: &[f32]| {
        let w = f64s(params.get(name).unwrap());
        let (a, b): (Vec<f64>, Vec<f64>) =
            (a.iter().map(|&v| v as f64).collect(), b.iter().map(|&v| v as f64).collect());
        let ba = host_matmul(&b, &a, 16, 2, 8);
        let v: Vec<f64> = w.iter().zip(ba).map(|(w, d)| w + 8.0 * d).collect();
        (name.to_string(), Array::from_slice(&v, &[16, 8]))
    };
    reference
        .update(
            &Tree::unflatten([
                effective("model.layers.0.linear_attn.in_proj_qkv.weight", &qkv_a, &qkv_b),
                effective("model.layers.1.self_attn.q_proj.weight", &q_a, &q_b),
            ])
            .unwrap(),
        )
        .unwrap();
    assert_close("logits", &f64s(&model.logits(&ids()).unwrap()), &f64s(&reference.logits(&ids()).unwrap()), 1e-5);
    // and they are not the base model's
    let base = CausalLm::new(&ct::random::key(60), split_config(), DType::F64);
    let (l, b) = (f64s(&model.logits(&ids()).unwrap()), f64s(&base.logits(&ids()).unwrap()));
    assert!(l.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-3));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_peft_files_are_errors_naming_the_tensors() {
    let dir = temp_dir("bad");
    write_peft(
        &dir,
        PEFT_CONFIG,
        &[
            // A [r, in] must be [2, 8]
            ("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight", vec![2, 7], values(14, 0)),
            ("base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight", vec![16, 2], values(32, 0)),
            // no such layer
            ("base_model.model.model.layers.1.self_attn.r_proj.lora_A.weight", vec![2, 8], values(16, 0)),
            ("base_model.model.model.layers.1.self_attn.r_proj.lora_B.weight", vec![16, 2], values(32, 0)),
            // not PEFT's form
            ("base_model.model.model.layers.0.linear_attn.in_proj_qkv.lora_magnitude_vector", vec![16], values(16, 0)),
            // half a pair
            ("base_model.model.model.layers.0.mlp.up_proj.lora_B.weight", vec![12, 2], values(24, 0)),
        ],
    );
    let mut model = CausalLm::new(&ct::random::key(70), split_config(), DType::F32);
    let err = lora::load_adapters(&mut model, &dir).unwrap_err().to_string();
    for needle in [
        "4 problems",
        "self_attn.q_proj.lora_A.weight` has shape [2, 7]",
        "needs [2, 8]",
        "`model.layers.1.self_attn.r_proj`",
        "is not a Linear layer",
        "in_proj_qkv.lora_magnitude_vector` is not named",
        "`model.layers.0.mlp.up_proj` has no lora_A tensor",
    ] {
        assert!(err.contains(needle), "`{needle}` not in: {err}");
    }
    // the model is left unchanged
    assert!(lora::adapters(&mut model).is_empty());

    // only the shape is wrong: a shape error
    std::fs::remove_dir_all(&dir).ok();
    write_peft(
        &dir,
        PEFT_CONFIG,
        &[
            ("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight", vec![3, 8], values(24, 0)),
            ("base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight", vec![16, 3], values(48, 0)),
        ],
    );
    let err = lora::load_adapters(&mut model, &dir).unwrap_err();
    assert!(matches!(err, ct::Error::Shape(_)), "{err}");
    assert!(err.to_string().contains("at rank 2"), "{err}");

    // configurations this crate does not compute
    let dora = PEFT_CONFIG
        .replace(r#""use_dora": false"#, r#""use_dora": true"#)
        .replace(r#""bias": "none""#, r#""bias": "all""#);
    std::fs::write(dir.join("adapter_config.json"), dora).unwrap();
    let err = lora::load_adapters(&mut model, &dir).unwrap_err().to_string();
    assert!(err.contains("use_dora is true") && err.contains("bias is \"all\""), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Dropout on the adapter input: with a key, the adapter term is that of a masked, rescaled
/// input; without one, the layer is deterministic.
#[test]
fn dropout_masks_the_adapter_input() {
    let mut mlp = Mlp::new(&ct::random::key(80), 6, 4, Activation::Tanh, DType::F64);
    lora::apply(&mut mlp, &LoraConfig::new(2, 2.0, &["fc1"]).with_dropout(0.5), &ct::random::key(81)).unwrap();
    randomize_adapters(&mut mlp, 82, false);
    let x = ct::random::normal(&ct::random::key(83), &[50, 6], DType::F64);
    let layer: Linear = mlp.fc1.clone();
    let base = Linear { lora: None, ..layer.clone() };
    let (eval, plain) = (f64s(&layer.forward(&x)), f64s(&base.forward(&x)));
    lora::set_dropout_key(&mut mlp, Some(&ct::random::key(84)));
    let train = f64s(&mlp.fc1.forward(&x));
    assert_ne!(train, eval);
    // per row, the adapter term s·(m ⊙ x / (1 - p))·Aᵀ·Bᵀ is linear in the kept inputs: rows
    // where every input is dropped get the base output exactly, and the mean term over many
    // rows is close to the undropped one
    let adapter = mlp.fc1.lora.clone().unwrap();
    let (a, b) = (f64s(&adapter.a), f64s(&adapter.b));
    let xs = f64s(&x);
    let mut kept_total = 0usize;
    for row in 0..50 {
        let term: Vec<f64> = (0..4).map(|o| train[row * 4 + o] - plain[row * 4 + o]).collect();
        // recover which inputs were kept: try every mask (2^6) and find the one that fits
        let fits = (0..64u32).find(|mask| {
            let xm: Vec<f64> = (0..6).map(|i| if mask >> i & 1 == 1 { xs[row * 6 + i] * 2.0 } else { 0.0 }).collect();
            let h = host_matmul(&xm, &host_transpose(&a, 2, 6), 1, 6, 2);
            let want = host_matmul(&h, &host_transpose(&b, 4, 2), 1, 2, 4);
            want.iter().zip(&term).all(|(w, t)| (w * 1.0 - t).abs() < 1e-9)
        });
        let mask = fits.unwrap_or_else(|| panic!("row {row}: no dropout mask explains the output {term:?}"));
        kept_total += mask.count_ones() as usize;
    }
    let kept = kept_total as f64 / 300.0;
    assert!((0.35..0.65).contains(&kept), "kept fraction {kept}");
    lora::set_dropout_key(&mut mlp, None);
    assert_eq!(f64s(&mlp.fc1.forward(&x)), eval);
}
