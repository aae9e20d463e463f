//! Greedy generation with a Qwen3-Next / Qwen3.5 model from a Hugging Face folder, timing the
//! prefill and the decode steps.
//!
//! ```text
//! cargo run --release -p cotangent-nn --example qwen3_next_generate -- \
//!     [--model DIR] [--prompt-ids 1,2,3] [--new-tokens 32] [--dtype f32|bf16|f16] [--prompt-len 128] [--json]
//! ```
//!
//! With `--json` it first runs the prefill and a few decode steps once untimed (so that kernel
//! compilation is not timed), then prints one JSON line: prefill seconds, decode tokens/s, and the
//! device memory the prefill needed beyond the weights (`peak_extra_mib`, on a GPU). This is the
//! cotangent side of `bench/gpu/generate_peers.py`.
//!
//! Without `--model`, a small random Qwen3-Next (MoE, linear and full attention layers) is
//! written to a temporary folder with `save_pretrained` and loaded from there. Without
//! `--prompt-ids`, a prompt of `--prompt-len` ids is drawn at random.
use cotangent::{self as ct, Array, DType};
use cotangent_nn::models::{from_pretrained, CausalLm, GenerationConfig, ModelConfig};
use std::time::Instant;

const TINY_QWEN3_NEXT: &str = r#"{
  "model_type": "qwen3_next", "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 256,
  "num_hidden_layers": 4, "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
  "linear_conv_kernel_dim": 4, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
  "shared_expert_intermediate_size": 128, "norm_topk_prob": true, "rms_norm_eps": 1e-6,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
  "tie_word_embeddings": false
}"#;

fn main() -> cotangent::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let new_tokens: usize = value("--new-tokens").map_or(32, |v| v.parse().expect("--new-tokens N"));
    let prompt_len: usize = value("--prompt-len").map_or(128, |v| v.parse().expect("--prompt-len N"));
    let dtype = match value("--dtype").as_deref() {
        None | Some("f32") => DType::F32,
        Some("bf16") => DType::BF16,
        Some("f16") => DType::F16,
        Some(other) => panic!("--dtype {other}: use f32, bf16 or f16"),
    };
    let dir = match value("--model") {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            let dir = std::env::temp_dir().join(format!("qwen3_next_generate_{}", std::process::id()));
            let config = ModelConfig::from_json(TINY_QWEN3_NEXT)?;
            CausalLm::new(&ct::random::key(0), config, DType::F32).save_pretrained(&dir)?;
            println!("wrote a tiny random Qwen3-Next to {}", dir.display());
            dir
        }
    };
    let start = Instant::now();
    let model = from_pretrained(&dir, dtype)?;
    println!(
        "loaded {} ({} layers, vocab {}) as {dtype} in {:.2} s",
        model.config.model_type.name(),
        model.config.num_hidden_layers,
        model.config.vocab_size,
        start.elapsed().as_secs_f64()
    );
    let prompt: Vec<i64> = match value("--prompt-ids") {
        Some(ids) => ids.split(',').map(|s| s.trim().parse().expect("--prompt-ids 1,2,3")).collect(),
        None => ct::random::randint(&ct::random::key(1), 0, model.config.vocab_size as i64, &[prompt_len], DType::I64)
            .to_vec::<i64>()?,
    };
    let t = prompt.len();
    let ids = Array::from_vec(prompt, &[1, t]);
    let json = args.iter().any(|a| a == "--json");
    let device = ct::default_device();
    if json {
        // untimed: the first prefill and decode steps compile their kernels
        let mut cache = model.new_cache();
        model.logits_with_cache(&ids, &mut cache)?.eval()?;
        for _ in 0..3 {
            model.logits_with_cache(&Array::from_vec(vec![0i64], &[1, 1]), &mut cache)?.eval()?;
        }
        device.synchronize()?;
    }
    let in_use_before = device.memory_stats().map_or(0, |m| m.in_use);
    device.reset_peak_memory();

    // prefill, then one token at a time through the cache
    let mut cache = model.new_cache();
    let start = Instant::now();
    let logits = model.logits_with_cache(&ids, &mut cache)?;
    let last = logits.slice_axis(1, Some(t as isize - 1), None, 1).to_vec::<f32>()?;
    cache.eval()?;
    let prefill = start.elapsed().as_secs_f64();
    let peak_extra = device.memory_stats().map(|m| m.peak.saturating_sub(in_use_before));
    let argmax = |v: &[f32]| v.iter().enumerate().fold(0, |b, (i, &x)| if x > v[b] { i } else { b }) as i64;
    let mut tokens = vec![argmax(&last)];
    let start = Instant::now();
    while tokens.len() < new_tokens {
        let next = Array::from_vec(vec![*tokens.last().unwrap()], &[1, 1]);
        let logits = model.logits_with_cache(&next, &mut cache)?.to_vec::<f32>()?;
        cache.eval()?;
        tokens.push(argmax(&logits));
    }
    let decode = start.elapsed().as_secs_f64();
    let steps = tokens.len().saturating_sub(1).max(1);
    if json {
        let mib = |b: usize| format!("{:.1}", b as f64 / (1 << 20) as f64);
        println!(
            "{{\"framework\": \"cotangent\", \"model\": \"{}\", \"device\": \"{device:?}\", \"dtype\": \"{dtype}\", \"prompt_len\": {t}, \"prefill_s\": {prefill:.5}, \"decode_tokens\": {steps}, \"decode_tokens_per_s\": {:.2}, \"peak_extra_mib\": {}, \"tokens_head\": {:?}}}",
            dir.display(),
            steps as f64 / decode,
            peak_extra.map_or("null".to_string(), mib),
            &tokens[..tokens.len().min(8)]
        );
        return Ok(());
    }
    println!("prefill: {t} tokens in {:.3} s = {:.1} tokens/s", prefill, t as f64 / prefill);
    println!("decode: {steps} tokens in {:.3} s = {:.1} tokens/s", decode, steps as f64 / decode);
    println!("tokens: {tokens:?}");

    // the same through generate()
    let again = model.generate(&ids, &GenerationConfig::greedy(new_tokens).with_stop_tokens(&[]))?;
    assert_eq!(again.to_vec::<i64>()?, tokens, "generate() agrees with the hand-written loop");
    Ok(())
}
