"""Reference outputs and gradients of transformers' Qwen3-Next modules, for tests/qwen3_next.rs.

Run from the repository root with a Python that has torch, transformers, safetensors and numpy
(no network needed; nothing is downloaded):

    python3 crates/cotangent-nn/tests/qwen3_next/gen_reference.py

For each configuration below it builds transformers' own `Qwen3NextGatedDeltaNet` (or a
linear-attention `Qwen3NextDecoderLayer`) from a `Qwen3NextConfig`, fills every parameter with
seeded random values, runs it in float32 on a seeded random input, and differentiates
`loss = sum(output * cotangent)` for a seeded random cotangent. The pure-PyTorch paths run
(`torch_chunk_gated_delta_rule` with chunks of 64, `causal_conv1d_fn` = `F.conv1d`): the script
refuses to run if the optional `fla` or `causal_conv1d` packages are importable, and checks
that the fallback's `torch.linalg.solve_triangular` and `F.conv1d` were called.

Each `<name>.safetensors` holds, in float32:
  - the parameters under their Hugging Face checkpoint names, `<prefix><param>`, e.g.
    `model.layers.0.linear_attn.in_proj_qkvz.weight` (prefix in the metadata);
  - `input` [B, T, hidden], `cotangent` and `output` (same shape);
  - `grad.input` and `grad.<prefix><param>` for every parameter;
and, as string metadata, the config fields (`hidden_size`, `linear_num_key_heads`, ...), `kind`
(`gated_delta_net` or `decoder_layer`), `prefix` and the library versions.
"""

import importlib.util
import os

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from transformers import Qwen3NextConfig
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

HERE = os.path.dirname(os.path.abspath(__file__))

# name, kind, batch, time, config fields, range of A = exp(A_log), seed
CONFIGURATIONS = [
    # equal key and value heads, T = 70: one full chunk of 64 and a padded one
    ("gdn_heads2_t70", "gated_delta_net", 1, 70,
     dict(hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8,
          linear_value_head_dim=8, linear_conv_kernel_dim=4), (0.05, 1.0), 1),
    # grouped value heads (2 key heads, 4 value heads), T = 100, different key and value widths
    ("gdn_grouped_t100", "gated_delta_net", 1, 100,
     dict(hidden_size=24, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
          linear_value_head_dim=6, linear_conv_kernel_dim=4), (0.02, 0.5), 2),
    # shorter than one chunk, kernel 3, Hugging Face's own init range of A (fast decays)
    ("gdn_grouped_t17_hf_decay", "gated_delta_net", 2, 17,
     dict(hidden_size=24, linear_num_key_heads=1, linear_num_value_heads=3, linear_key_head_dim=8,
          linear_value_head_dim=8, linear_conv_kernel_dim=3), (0.01, 16.0), 3),
    # a whole linear-attention decoder layer: norms, residuals, SwiGLU MLP; grouped heads, T = 70
    ("decoder_grouped_t70", "decoder_layer", 1, 70,
     dict(hidden_size=24, intermediate_size=32, linear_num_key_heads=2, linear_num_value_heads=4,
          linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=4), (0.05, 1.0), 4),
]

RMS_NORM_EPS = 1e-6


def make_config(fields):
    return Qwen3NextConfig(
        vocab_size=16,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        num_experts=0,
        hidden_act="silu",
        rms_norm_eps=RMS_NORM_EPS,
        intermediate_size=fields.get("intermediate_size", 64),
        **{k: v for k, v in fields.items() if k != "intermediate_size"},
    )


def randomize(module, a_range):
    """Seeded random values for every parameter (the default init leaves norms at 0 or 1)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(*a_range).log())
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif "layernorm" in name:  # Qwen3NextRMSNorm scales by (1 + weight)
                p.copy_(torch.randn_like(p) * 0.1)
            elif name.endswith("norm.weight"):  # Qwen3NextRMSNormGated scales by weight
                p.copy_(1.0 + torch.randn_like(p) * 0.1)
            elif name.endswith("conv1d.weight"):
                p.copy_(torch.randn_like(p) * 0.5)
            else:
                assert leaf == "weight" and p.ndim == 2, name
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)


class CallCounter:
    """Counts calls of `owner.attr` (to show which implementation ran)."""

    def __init__(self, owner, attr):
        self.owner, self.attr, self.calls = owner, attr, 0
        self.original = getattr(owner, attr)

    def __enter__(self):
        def counted(*args, **kwargs):
            self.calls += 1
            return self.original(*args, **kwargs)

        setattr(self.owner, self.attr, counted)
        return self

    def __exit__(self, *exc):
        setattr(self.owner, self.attr, self.original)


def generate(name, kind, batch, time, fields, a_range, seed):
    torch.manual_seed(seed)
    config = make_config(fields)
    if kind == "gated_delta_net":
        module = qwen3_next.Qwen3NextGatedDeltaNet(config, layer_idx=0)
        prefix = "model.layers.0.linear_attn."
    else:
        module = qwen3_next.Qwen3NextDecoderLayer(config, layer_idx=0)
        assert isinstance(module.mlp, qwen3_next.Qwen3NextMLP)
        prefix = "model.layers.0."
    module = module.float()
    randomize(module, a_range)
    x = torch.randn(batch, time, config.hidden_size, requires_grad=True)
    cotangent = torch.randn(batch, time, config.hidden_size)
    with CallCounter(torch.linalg, "solve_triangular") as solves, CallCounter(F, "conv1d") as convs:
        if kind == "gated_delta_net":
            y = module(x)
        else:
            y = module(x, position_embeddings=None)
    assert solves.calls > 0 and convs.calls > 0, "the pure-PyTorch fallback did not run"
    (y * cotangent).sum().backward()

    tensors = {"input": x.detach(), "cotangent": cotangent, "output": y.detach(), "grad.input": x.grad}
    for pname, p in module.named_parameters():
        tensors[prefix + pname] = p.detach()
        tensors["grad." + prefix + pname] = p.grad
    tensors = {k: v.float().contiguous() for k, v in tensors.items()}
    metadata = {k: str(v) for k, v in fields.items()}
    metadata.update(
        kind=kind,
        prefix=prefix,
        rms_norm_eps=repr(RMS_NORM_EPS),
        intermediate_size=str(config.intermediate_size),
        transformers_version=transformers.__version__,
        torch_version=torch.__version__,
    )
    path = os.path.join(HERE, name + ".safetensors")
    save_file(tensors, path, metadata=metadata)
    print(f"{path}: {os.path.getsize(path) // 1024} KiB, {len(tensors)} tensors")


def main():
    for package in ("fla", "causal_conv1d"):
        if importlib.util.find_spec(package) is not None:
            raise SystemExit(f"`{package}` is installed: uninstall it so that the pure-PyTorch fallback runs")
    torch.set_num_threads(1)
    for c in CONFIGURATIONS:
        generate(*c)


if __name__ == "__main__":
    main()
