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


def time_products(batch, reps):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    res = {}
    for m, k, n, lay in shapes(batch):
        a = torch.randn(k, m, device="cuda").t() if lay[0] == "t" else torch.randn(m, k, device="cuda")
        b = torch.randn(n, k, device="cuda").t() if lay[1] == "t" else torch.randn(k, n, device="cuda")
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) / 20)
        ts.sort()
        us = ts[len(ts) // 2] * 1e6
        res[f"{m},{k},{n},{lay}"] = {"us": us, "gflops": 2 * m * k * n / us / 1e3}
    print(json.dumps({"bench": "products", "fw": "torch", "batch": batch, "results": res}))


def time_products_jax(batch, reps):
    import jax
    import jax.numpy as jnp
    res = {}
    key = jax.random.PRNGKey(0)
    for m, k, n, lay in shapes(batch):
        ka, kb = jax.random.split(key)
        a = jax.random.normal(ka, (k, m) if lay[0] == "t" else (m, k))
        b = jax.random.normal(kb, (n, k) if lay[1] == "t" else (k, n))
        ta, tb = lay[0] == "t", lay[1] == "t"
        f = jax.jit(lambda a, b: jnp.matmul(a.T if ta else a, b.T if tb else b, precision="highest"))
        for _ in range(3):
            f(a, b).block_until_ready()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(20):
                r = f(a, b)
            r.block_until_ready()
            ts.append((time.perf_counter() - t0) / 20)
        ts.sort()
        us = ts[len(ts) // 2] * 1e6
        res[f"{m},{k},{n},{lay}"] = {"us": us, "gflops": 2 * m * k * n / us / 1e3}
    print(json.dumps({"bench": "products", "fw": "jax", "batch": batch, "results": res}))


def torch_steps(batch, steps):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    dims = [784, 512, 512, 10]
    ws = [(torch.randn(i, o, device="cuda") * (2 / i) ** 0.5).requires_grad_(True) for i, o in zip(dims, dims[1:])]
    bs = [torch.zeros(o, device="cuda", requires_grad=True) for o in dims[1:]]
    x = torch.randn(batch, 784, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    for _ in range(steps):
        h = x
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = h @ w + b
            if i < 2:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, y)
        gs = torch.autograd.grad(loss, ws + bs)
        with torch.no_grad():
            for p, g in zip(ws + bs, gs):
                p.sub_(0.01 * g)
    torch.cuda.synchronize()


def jax_steps(batch, steps):
    import jax
    import jax.numpy as jnp
    dims = [784, 512, 512, 10]
    key = jax.random.PRNGKey(0)
    params = []
    for i, o in zip(dims, dims[1:]):
        key, k1 = jax.random.split(key)
        params.append((jax.random.normal(k1, (i, o)) * (2 / i) ** 0.5, jnp.zeros(o)))
    x = jax.random.normal(key, (batch, 784))
    y = jax.random.randint(key, (batch,), 0, 10)

    def loss(ps):
        h = x
        for i, (w, b) in enumerate(ps):
            h = jnp.matmul(h, w, precision="highest") + b
            if i < 2:
                h = jax.nn.relu(h)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(h), y[:, None], 1))

    @jax.jit
    def step(ps):
        g = jax.grad(loss)(ps)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, ps, g)

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
    if a.step == "torch":
        torch_steps(a.batch, a.steps)
    elif a.step == "jax":
        jax_steps(a.batch, a.steps)
    elif a.framework == "jax":
        time_products_jax(a.batch, a.reps)
    else:
        time_products(a.batch, a.reps)
