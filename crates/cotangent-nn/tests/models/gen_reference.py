"""Reference folders for tests/models.rs: whole Qwen3-Next / Qwen3.5 / Qwen3.5-MoE causal LMs
made and run by transformers itself.

Run from the repository root with a Python that has torch, transformers (5.17), safetensors
and numpy (no network needed; nothing is downloaded):

    python3 crates/cotangent-nn/tests/models/gen_reference.py

For each case below it builds a tiny random config of the model type, constructs transformers'
`*ForCausalLM` in float32, fills every parameter with seeded random values and writes, into
`tests/models/<case>/` (the weights are float32 values; the reference outputs are computed
with the model converted to float64 — transformers' gated delta rule and attention softmax
still run in float32 inside — so that they carry little rounding of their own):

  - the Hugging Face folder, written by `save_pretrained` (`config.json` and
    `model.safetensors`, or shards and `model.safetensors.index.json`). The composite case
    (`model_type` `qwen3_5_moe` with a `text_config`) is written from the text model and then
    rearranged as the hub lays such checkpoints out: the weights under
    `model.language_model.*`, and `mtp.*` and `model.visual.*` tensors (which a text model
    ignores) added;
  - `reference.safetensors` (float32 unless said): `input_ids` and `labels` (int64, some labels
    -100), `logits` [B, T, vocab], `loss` (0-d, transformers' causal-LM loss), `grad.<name>`
    for every checkpoint tensor `<name>` (per-expert names, as the checkpoint has them),
    `prompt` (int64) and `greedy` (int64, `generate(do_sample=False)`'s new tokens; the same
    with and without the cache, checked here).

The pure-PyTorch paths run (`torch_chunk_gated_delta_rule` in chunks of 64, `F.conv1d`): the
script refuses to run if `fla` or `causal_conv1d` are importable. Greedy decoding and top-k
routing must not hinge on near-ties: the script checks the margins and says so if one is small.
"""

import importlib.util
import json
import os
import shutil

import torch
import transformers
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))

COMMON_ATTENTION = dict(
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6, hidden_act="silu",
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6,
    linear_conv_kernel_dim=4, max_position_embeddings=512,
)

CASES = [
    # Qwen3-Next: MoE (4 experts, top 2, normalised) on layers 0, 1, 3; a dense MLP on layer 2
    # (mlp_only_layers); attention every 2nd layer; partial rotary 0.5; untied head; T = 70.
    dict(
        name="qwen3_next_moe",
        cls="Qwen3NextForCausalLM", config_cls="Qwen3NextConfig",
        config=dict(
            vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=4,
            full_attention_interval=2, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
            moe_intermediate_size=16, shared_expert_intermediate_size=24, decoder_sparse_step=1,
            mlp_only_layers=[2], tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5),
            **COMMON_ATTENTION,
        ),
        batch=2, time=70, prompt=70, new_tokens=6, seed=11, shard=None,
    ),
    # Qwen3.5 dense: explicit layer_types (linear, full, linear), tied embeddings, a sharded
    # checkpoint; T = 37.
    dict(
        name="qwen3_5_dense_sharded",
        cls="Qwen3_5ForCausalLM", config_cls="Qwen3_5TextConfig",
        config=dict(
            vocab_size=120, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
            layer_types=["linear_attention", "full_attention", "linear_attention"],
            tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
                                 mrope_section=[1, 1, 0], mrope_interleaved=True),
            **COMMON_ATTENTION,
        ),
        batch=2, time=37, prompt=9, new_tokens=8, seed=12, shard="30KB",
    ),
    # Qwen3.5-MoE in the hub's composite layout (model_type qwen3_5_moe, text_config,
    # model.language_model.*, extra mtp.* / model.visual.* tensors); 4 experts, top 2;
    # layers full, linear; untied head; T = 45.
    dict(
        name="qwen3_5_moe_composite",
        cls="Qwen3_5MoeForCausalLM", config_cls="Qwen3_5MoeTextConfig",
        config=dict(
            vocab_size=100, hidden_size=32, num_hidden_layers=2,
            layer_types=["full_attention", "linear_attention"],
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
            shared_expert_intermediate_size=24, tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
                                 mrope_section=[1, 1, 0], mrope_interleaved=True),
            **COMMON_ATTENTION,
        ),
        batch=2, time=45, prompt=7, new_tokens=8, seed=13, shard=None, composite="qwen3_5_moe",
    ),
]


def randomize(model):
    """Seeded random values for every parameter (the default init leaves norms at 0 or 1)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.05, 1.0).log())
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif name.endswith("linear_attn.norm.weight"):  # gated norm: scale = weight
                p.copy_(1.0 + torch.randn_like(p) * 0.1)
            elif "norm" in name:  # zero-centred RMS norms: scale = 1 + weight
                p.copy_(torch.randn_like(p) * 0.1)
            elif name.endswith("conv1d.weight"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif name.endswith("mlp.gate.weight"):  # router: spread-out logits
                p.copy_(torch.randn_like(p) * 2.0 / p.shape[1] ** 0.5)
            else:  # linear weights [out, in] and stacked experts [E, out, in]
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)


def checkpoint_gradients(model):
    """Every parameter's gradient under the checkpoint's names (stacked experts split)."""
    grads = {}
    for name, p in model.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        if name.endswith("mlp.experts.gate_up_proj"):  # [E, 2I, H] = [gate; up] per expert
            base = name[: -len("gate_up_proj")]
            inter = g.shape[1] // 2
            for e in range(g.shape[0]):
                grads[f"{base}{e}.gate_proj.weight"] = g[e, :inter]
                grads[f"{base}{e}.up_proj.weight"] = g[e, inter:]
        elif name.endswith("mlp.experts.down_proj"):  # [E, H, I]
            base = name[: -len("down_proj")]
            for e in range(g.shape[0]):
                grads[f"{base}{e}.down_proj.weight"] = g[e]
        else:
            grads[name] = g
    return grads


def routing_margin(model, ids):
    """Smallest gap between the k-th and (k+1)-th router probability over all tokens and layers."""
    margins = []

    def hook(module, _inputs, output):
        probs = torch.softmax(output[0].float(), dim=-1)
        top = torch.topk(probs, module.top_k + 1, dim=-1).values
        margins.append((top[:, module.top_k - 1] - top[:, module.top_k]).min().item())

    handles = [m.register_forward_hook(hook) for m in model.modules() if type(m).__name__.endswith("TopKRouter")]
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    return min(margins) if margins else float("inf")


def greedy_margin(model, prompt, tokens):
    """Smallest top-1/top-2 logit gap along the greedy continuation."""
    seq = torch.cat([prompt, tokens], dim=1)
    with torch.no_grad():
        logits = model(seq).logits[:, prompt.shape[1] - 1 : -1]
    top = torch.topk(logits, 2, dim=-1).values
    return (top[..., 0] - top[..., 1]).min().item()


def all_files(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".safetensors") and f != "reference.safetensors")


def make_composite(folder, composite_type):
    """Rearrange a text model's folder as a hub composite (vision-language) checkpoint."""
    with open(os.path.join(folder, "config.json")) as f:
        text_config = json.load(f)
    for key in ("architectures", "transformers_version", "dtype"):
        text_config.pop(key, None)
    config = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": composite_type,
        "text_config": text_config,
        "vision_config": {"model_type": composite_type, "depth": 1, "hidden_size": 8},
        "tie_word_embeddings": text_config.get("tie_word_embeddings", False),
        "transformers_version": transformers.__version__,
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for file in all_files(folder):
        path = os.path.join(folder, file)
        tensors = load_file(path)
        renamed = {}
        for k, v in tensors.items():
            renamed["model.language_model." + k[len("model."):] if k.startswith("model.") else k] = v
        renamed["mtp.fc.weight"] = torch.randn(4, 4)
        renamed["model.visual.patch_embed.proj.weight"] = torch.randn(8, 3)
        save_file({k: v.contiguous() for k, v in renamed.items()}, path, metadata={"format": "pt"})


def generate_case(case):
    name = case["name"]
    folder = os.path.join(HERE, name)
    shutil.rmtree(folder, ignore_errors=True)
    torch.manual_seed(case["seed"])
    config_cls = getattr(transformers, case["config_cls"])
    config = config_cls(**case["config"])
    model = getattr(transformers, case["cls"])(config).float().eval()
    randomize(model)
    b, t, vocab = case["batch"], case["time"], config.vocab_size

    ids = torch.randint(0, vocab, (b, t))
    labels = torch.randint(0, vocab, (b, t))
    labels[torch.rand(b, t) < 0.2] = -100

    # the folder holds the float32 weights; the reference runs in float64 from those same values
    # (transformers' gated delta rule and attention softmax still compute in float32 inside)
    if case["shard"]:
        model.save_pretrained(folder, max_shard_size=case["shard"])
    else:
        model.save_pretrained(folder)
    model = model.double()
    model.set_experts_implementation("eager")  # grouped_mm has no float64 kernel
    margin = routing_margin(model, ids)

    out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    grads = checkpoint_gradients(model)

    prompt = ids[:, : case["prompt"]].clone()
    # an explicit attention mask: without one, generate() masks prompt tokens equal to pad_token_id
    kwargs = dict(max_new_tokens=case["new_tokens"], do_sample=False, pad_token_id=0, eos_token_id=None,
                  attention_mask=torch.ones_like(prompt))
    with torch.no_grad():
        cached = model.generate(prompt, use_cache=True, **kwargs)[:, prompt.shape[1]:]
        uncached = model.generate(prompt, use_cache=False, **kwargs)[:, prompt.shape[1]:]
    assert torch.equal(cached, uncached), (cached, uncached)
    gap = greedy_margin(model, prompt, cached)
    with torch.no_grad():
        full = model(torch.cat([prompt, cached], 1)).logits[:, prompt.shape[1] - 1 : -1].argmax(-1)
    assert torch.equal(full, cached), "greedy tokens disagree with the full forward pass"

    saved = {}
    for file in all_files(folder):
        saved.update(load_file(os.path.join(folder, file)))
    missing = sorted(set(grads) - set(saved))
    extra = sorted(set(saved) - set(grads))
    assert not missing and not extra, f"checkpoint names differ from the gradients': {missing} / {extra}"
    if case.get("composite"):
        make_composite(folder, case["composite"])
        grads = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v
                 for k, v in grads.items()}

    tensors = {
        "input_ids": ids, "labels": labels, "logits": out.logits.detach().float(),
        "loss": out.loss.detach().float(), "prompt": prompt, "greedy": cached,
    }
    tensors.update({"grad." + k: v.float() for k, v in grads.items()})
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    save_file(tensors, os.path.join(folder, "reference.safetensors"),
              metadata={"transformers_version": transformers.__version__, "torch_version": torch.__version__})
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"{name}: {size // 1024} KiB, files {sorted(os.listdir(folder))}, loss {out.loss.item():.5f}, "
          f"greedy {cached.tolist()}, routing margin {margin:.2e}, greedy margin {gap:.2e}")
    if margin < 1e-5 or gap < 1e-3:
        print(f"  warning: {name} has a small margin; pick another seed")


def main():
    for package in ("fla", "causal_conv1d"):
        if importlib.util.find_spec(package) is not None:
            raise SystemExit(f"`{package}` is installed: uninstall it so that the pure-PyTorch fallback runs")
    torch.set_num_threads(1)
    for case in CASES:
        generate_case(case)


if __name__ == "__main__":
    main()
