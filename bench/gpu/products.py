#!/usr/bin/env python3
"""The f32 products of the MLP benchmark's step (784-512-512-10, TF32 off), timed one by one
with PyTorch in the layouts a dense layer's passes produce, beside cotangent's
`matmul_transposed --shapes m,k,n,layout` (same shapes and layouts); and `--step torch|jax`:
run MLP training steps in a loop (for a kernel profiler such as ncu to attach to).

Layouts: `nn` is A (m×k) @ B (k×n) as stored; `nt` is A @ Wᵀ with W stored n×k; `tn` is Xᵀ @ G
with X stored k×m (a weight gradient).

    python3 bench/gpu/products.py --batch 4096            # one JSON line of µs per product
    ncu ... python3 bench/gpu/products.py --step torch --batch 4096 --steps 20
"""
import argparse
import json
import os
import sys
import time


def shapes(batch, dims=(784, 512, 512, 10)):
    """(m, k, n, layout) of each product of one training step: forward, input and weight grads."""
    out = []
    for i, (din, dout) in enumerate(zip(dims, dims[1:])):
        out.append((batch, din, dout, "nn"))
        if i > 0:
            out.append((batch, dout, din, "nt"))
        out.append((din, batch, dout, "tn"))
    return out


def median_us(call, wait, reps, inner=20):
    """Median µs per call of `call` over `reps` loops of `inner` calls, each loop ended by `wait`
    on the last call's result (after 3 warm-up calls)."""
    for _ in range(3):
        wait(call())
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            r = call()
        wait(r)
        ts.append((time.perf_counter() - t0) / inner)
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def time_products(batch, reps, fw):
    """One JSON line: µs per product of each of the step's products, with PyTorch or JAX."""
    res = {}
    if fw == "torch":
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        import jax
        import jax.numpy as jnp
        key = jax.random.PRNGKey(0)
    for m, k, n, lay in shapes(batch):
        ta, tb = lay[0] == "t", lay[1] == "t"
        if fw == "torch":
            a = torch.randn(k, m, device="cuda").t() if ta else torch.randn(m, k, device="cuda")
            b = torch.randn(n, k, device="cuda").t() if tb else torch.randn(k, n, device="cuda")
            us = median_us(lambda: a @ b, lambda r: torch.cuda.synchronize(), reps)
        else:
            ka, kb = jax.random.split(key)
            a = jax.random.normal(ka, (k, m) if ta else (m, k))
            b = jax.random.normal(kb, (n, k) if tb else (k, n))
            f = jax.jit(lambda a, b: jnp.matmul(a.T if ta else a, b.T if tb else b, precision="highest"))
            us = median_us(lambda: f(a, b), lambda r: r.block_until_ready(), reps)
        res[f"{m},{k},{n},{lay}"] = {"us": us, "gflops": 2 * m * k * n / us / 1e3}
    print(json.dumps({"bench": "products", "fw": fw, "batch": batch, "results": res}))


def run_steps(fw, batch, steps):
    """`steps` MLP training steps of `bench/gpu/anchors.py` (PyTorch eager or JAX jit), then a
    wait: a loop for a kernel profiler to attach to."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import anchors
    if fw == "torch":
        import torch
        step = anchors.torch_mlp_step(batch)
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    else:
        import jax
        step, params = anchors.jax_mlp_step(batch)
        for _ in range(steps):
            params = step(params)
        jax.block_until_ready(params)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--step", choices=["torch", "jax"], help="run training steps instead of timing products")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--framework", choices=["torch", "jax"], default="torch", help="whose products to time")
    a = p.parse_args()
    if a.step:
        run_steps(a.step, a.batch, a.steps)
    else:
        time_products(a.batch, a.reps, a.framework)
