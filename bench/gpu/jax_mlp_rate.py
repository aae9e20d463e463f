#!/usr/bin/env python3
"""JAX jit's rate for the MLP training step on the GPU, as the device scripts measure it beside
cotangent's (`anchors.jax_mlp_rate`: the median of 5 rounds of 50 steps).

    python3 bench/gpu/jax_mlp_rate.py [--batch 128]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import anchors  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=128)
batch = p.parse_args().batch
print(f"jax_jit b{batch}: {anchors.jax_mlp_rate(batch):.0f} steps/s", flush=True)
