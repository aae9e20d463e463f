#!/usr/bin/env python3
"""Generation with a whole Qwen3-Next causal LM on one GPU: transformers (eager) beside cotangent.

For each config below (tiny and small, random weights from transformers' own initialisation,
seeded) this script writes a Hugging Face folder with `save_pretrained` (float32 weights), then
for each dtype and prompt length measures, on the same folder:

  transformers  Qwen3NextForCausalLM, attn_implementation="eager", the pure-PyTorch gated delta
                paths (the script refuses to run if `fla` or `causal_conv1d` import), under
                torch.no_grad(): one prefill call with use_cache=True, then greedy decode one
                token at a time through the returned cache (argmax on the GPU, `.item()`).
  cotangent     the `qwen3_next_generate` example (--cotangent BIN) with --json: the same
                folder, the same prompt, the same loop (its greedy token is read back each step).

Both sides run the prefill and three decode steps once untimed first. Output: one JSON line per
(framework, model, dtype, prompt_len): prefill_s, decode_tokens_per_s, peak_extra_mib (device
memory the prefill needed beyond what was allocated before it: weights and inputs), and the
first greedy tokens; then a line per pair with the ratios (cotangent / transformers time).

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 COTANGENT_DEVICE=cuda \
      python3 bench/gpu/generate_peers.py --cotangent .gpu/qwen3_next_generate
"""
import argparse
import json
import os
import subprocess
import sys
import time

CONFIGS = {
    # the example's own tiny model: 4 layers (3 linear attention, 1 full), 8 experts
    "tiny": dict(
        vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=64, shared_expert_intermediate_size=128,
    ),
    # a small Qwen3-Next: 8 layers in Qwen3-Next's 3:1 pattern, its head sizes, 32 experts
    "small": dict(
        vocab_size=32768, hidden_size=1024, intermediate_size=2048, num_hidden_layers=8,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 2,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256,
        linear_num_key_heads=8, linear_num_value_heads=16, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=32, num_experts_per_tok=4,
        moe_intermediate_size=256, shared_expert_intermediate_size=512,
    ),
}
COMMON = dict(
    model_type="qwen3_next", norm_topk_prob=True, rms_norm_eps=1e-6, tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    decoder_sparse_step=1, mlp_only_layers=[],
)


def write_folder(name, root):
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    path = os.path.join(root, name)
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    kw = dict(COMMON, **CONFIGS[name])
    kw.pop("model_type")
    config = Qwen3NextConfig(**kw)
    torch.manual_seed(0)
    Qwen3NextForCausalLM(config).float().save_pretrained(path)
    return path


def transformers_side(path, dtype, prompt, new_tokens):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, dtype), attn_implementation="eager").cuda().eval()
    ids = torch.tensor([prompt], device="cuda")

    def run(steps):
        out = model(ids, use_cache=True)
        cache = out.past_key_values
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens = [token.item()]
        torch.cuda.synchronize()
        prefill_done = time.perf_counter()
        while len(tokens) < steps:
            out = model(token, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(token.item())
        return tokens, prefill_done

    with torch.no_grad():
        run(4)  # untimed
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        out = model(ids, use_cache=True)
        token = out.logits[:, -1].argmax(-1)
        token.item()
        prefill = time.perf_counter() - start
        peak_extra = torch.cuda.max_memory_allocated() - before
        del out, token
        tokens, prefill_done = run(new_tokens)
        decode = time.perf_counter() - prefill_done
    del model
    torch.cuda.empty_cache()
    import transformers
    return {
        "framework": "transformers", "version": transformers.__version__, "torch": torch.__version__,
        "dtype": dtype, "prompt_len": len(prompt), "prefill_s": round(prefill, 5),
        "decode_tokens": len(tokens) - 1,
        "decode_tokens_per_s": round((len(tokens) - 1) / decode, 2),
        "peak_extra_mib": round(peak_extra / 2**20, 1), "tokens_head": tokens[:8],
    }


def cotangent_side(binary, path, dtype, prompt, new_tokens):
    short = {"float32": "f32", "bfloat16": "bf16"}[dtype]
    cmd = [binary, "--model", path, "--dtype", short, "--new-tokens", str(new_tokens), "--json",
           "--prompt-ids", ",".join(map(str, prompt))]
    env = dict(os.environ, COTANGENT_DEVICE=os.environ.get("COTANGENT_DEVICE", "cuda"))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return {"framework": "cotangent", "error": (p.stdout + p.stderr)[-2000:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cotangent", help="the qwen3_next_generate binary (built with --features cuda)")
    ap.add_argument("--models", nargs="+", default=["tiny", "small"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--prompt-lens", nargs="+", type=int, default=[128, 4096])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--root", default="/tmp/generate_peers")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "generate_peers.jsonl"))
    args = ap.parse_args()
    for mod in ("fla", "causal_conv1d"):
        try:
            __import__(mod)
            sys.exit(f"{mod} is importable: this benchmark measures transformers' own PyTorch paths")
        except ImportError:
            pass
    import torch

    out = open(args.out, "a")

    def emit(d):
        line = json.dumps(d)
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()

    for name in args.models:
        path = write_folder(name, args.root)
        vocab = CONFIGS[name]["vocab_size"]
        for dtype in args.dtypes:
            for t in args.prompt_lens:
                g = torch.Generator().manual_seed(t)
                prompt = torch.randint(0, vocab, (t,), generator=g).tolist()
                common = {"model": name, "device": torch.cuda.get_device_name()}
                try:
                    tf = dict(common, **transformers_side(path, dtype, prompt, args.new_tokens))
                except Exception as e:  # noqa: BLE001 - a failed peer is a line, not a crash
                    tf = dict(common, framework="transformers", dtype=dtype, prompt_len=t, error=repr(e))
                emit(tf)
                if args.cotangent:
                    ct = dict(cotangent_side(args.cotangent, path, dtype, prompt, args.new_tokens), model=name)
                    emit(ct)
                    if "error" not in tf and "error" not in ct:
                        emit({"ratio": "cotangent/transformers", "model": name, "dtype": dtype,
                              "prompt_len": t,
                              "prefill_time": round(ct["prefill_s"] / tf["prefill_s"], 3),
                              "decode_time": round(tf["decode_tokens_per_s"] / ct["decode_tokens_per_s"], 3),
                              "peak_extra_memory": round(ct["peak_extra_mib"] / max(tf["peak_extra_mib"], 1e-9), 3)
                              if ct.get("peak_extra_mib") is not None else None,
                              "same_first_tokens": ct["tokens_head"] == tf["tokens_head"]})


if __name__ == "__main__":
    main()
