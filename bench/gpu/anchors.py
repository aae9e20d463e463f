#!/usr/bin/env python3
"""GPU anchors on one H200: what a cotangent CUDA backend must beat.

Sections (each prints JSON lines; failures print {"section", "error"} and go on):
  gdn      gated delta rule fwd+bwd, B=1, H=16, K=V=128 (Qwen3-Next-like heads), T in TS:
           fla chunk_gated_delta_rule (Triton, bf16 and fp32), fla fused_recurrent (fwd only
           for the time, bwd where supported), torch op-by-op recurrence (fp32, T<=2048),
           JAX lax.scan naive jit and chunked jax.checkpoint jit (fp32).
  matmul   fp32 (TF32 off) and bf16 n x n products, torch and jax.
  overhead eager per-op launch cost: chain of N x (sin(x)*1.01+0.1) on 16 floats, fwd and grad.
  mlp      784-512-512-10 relu, b=128, SGD step: torch eager, torch CUDA graph-free, jax jit.
Time = median of reps after warm-up, synchronised. Memory = peak allocated by the framework
(torch.cuda.max_memory_allocated; JAX: device memory_stats peak_bytes_in_use) minus before.
"""
import json, math, os, sys, time, traceback

OUT = os.environ.get("OUT", ".")
LINES = []


def emit(d):
    d.setdefault("ts", time.strftime("%H:%M:%S"))
    s = json.dumps(d)
    print(s, flush=True)
    LINES.append(s)
    with open(os.path.join(OUT, "anchors.jsonl"), "a") as f:
        f.write(s + "\n")


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


# ---------------------------------------------------------------- torch helpers
def torch_time(fn, reps=5, warm=2):
    import torch
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return med(ts)


def torch_peak(fn):
    import torch
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def gdn_inputs(T, B=1, H=16, K=128, V=128, dtype=None, seed=0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g, dtype=torch.float32)
    q = torch.nn.functional.normalize(r(B, T, H, K), dim=-1)
    k = torch.nn.functional.normalize(r(B, T, H, K), dim=-1)
    v = r(B, T, H, V)
    a = r(B, T, H)
    b = r(B, T, H)
    gate = -torch.nn.functional.softplus(a)          # log of the decay, in (-inf, 0)
    beta = torch.sigmoid(b)
    w = r(B, T, H, V)
    xs = [q, k, v, gate, beta]
    if dtype is not None:
        xs = [x.to(dtype) for x in xs]
    return [x.detach().requires_grad_(True) for x in xs], w


def section_gdn(TS):
    import torch
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except Exception as e:  # noqa
        emit({"section": "gdn", "error": f"fla import: {e!r}"})
        chunk_gated_delta_rule = fused_recurrent_gated_delta_rule = None
    for T in TS:
        for dt_name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            if chunk_gated_delta_rule is None:
                break
            try:
                xs, w = gdn_inputs(T, dtype=dt)
                wd = w.to(dt)

                def step():
                    for x in xs:
                        x.grad = None
                    o, _ = chunk_gated_delta_rule(*xs, scale=1.0)
                    (o.float() * wd.float()).sum().backward()

                t = torch_time(step)
                m = torch_peak(step)

                def fwd():
                    with torch.no_grad():
                        chunk_gated_delta_rule(*xs, scale=1.0)

                tf = torch_time(fwd)
                emit({"section": "gdn", "impl": "fla_chunk", "dtype": dt_name, "T": T, "B": 1, "H": 16,
                      "K": 128, "V": 128, "fwd_bwd_ms": t * 1e3, "fwd_ms": tf * 1e3, "peak_MiB": m})
            except Exception as e:
                emit({"section": "gdn", "impl": "fla_chunk", "dtype": dt_name, "T": T, "error": repr(e)[:400]})
            try:
                xs, w = gdn_inputs(T, dtype=dt)
                wd = w.to(dt)

                def step_r():
                    for x in xs:
                        x.grad = None
                    o, _ = fused_recurrent_gated_delta_rule(xs[0], xs[1], xs[2], g=xs[3], beta=xs[4], scale=1.0)
                    (o.float() * wd.float()).sum().backward()

                t = torch_time(step_r)
                m = torch_peak(step_r)
                emit({"section": "gdn", "impl": "fla_fused_recurrent", "dtype": dt_name, "T": T,
                      "fwd_bwd_ms": t * 1e3, "peak_MiB": m})
            except Exception as e:
                emit({"section": "gdn", "impl": "fla_fused_recurrent", "dtype": dt_name, "T": T, "error": repr(e)[:400]})
        # torch op by op, fp32
        if T <= 2048:
            try:
                xs, w = gdn_inputs(T)

                def naive():
                    for x in xs:
                        x.grad = None
                    q, k, v, gate, beta = xs
                    B, T_, H, K = q.shape
                    S = torch.zeros(B, H, K, v.shape[-1], device="cuda")
                    ys = []
                    for t in range(T_):
                        S = S * gate[:, t].exp()[..., None, None]
                        kv = torch.einsum("bhk,bhkv->bhv", k[:, t], S)
                        delta = (v[:, t] - kv) * beta[:, t][..., None]
                        S = S + k[:, t][..., :, None] * delta[..., None, :]
                        ys.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
                    o = torch.stack(ys, 1)
                    (o * w).sum().backward()

                t = torch_time(naive, reps=3, warm=1)
                m = torch_peak(naive)
                emit({"section": "gdn", "impl": "torch_op_by_op", "dtype": "fp32", "T": T, "fwd_bwd_ms": t * 1e3, "peak_MiB": m})
            except Exception as e:
                emit({"section": "gdn", "impl": "torch_op_by_op", "T": T, "error": repr(e)[:400]})
        # reference check: fla fp32 vs torch op by op at small T
    try:
        xs, w = gdn_inputs(256)
        q, k, v, gate, beta = xs
        o_ref = []
        S = torch.zeros(1, 16, 128, 128, device="cuda")
        for t in range(256):
            S = S * gate[:, t].exp()[..., None, None]
            kv = torch.einsum("bhk,bhkv->bhv", k[:, t], S)
            S = S + k[:, t][..., :, None] * ((v[:, t] - kv) * beta[:, t][..., None])[..., None, :]
            o_ref.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
        o_ref = torch.stack(o_ref, 1)
        o, _ = chunk_gated_delta_rule(q, k, v, gate, beta, scale=1.0)
        emit({"section": "gdn", "check": "fla_chunk_fp32_vs_loop_T256",
              "max_rel": float((o - o_ref).abs().max() / o_ref.abs().max())})
    except Exception as e:
        emit({"section": "gdn", "check": "fla_vs_loop", "error": repr(e)[:400]})


def section_gdn_jax(TS):
    try:
        import jax, jax.numpy as jnp
        from jax import lax
    except Exception as e:
        emit({"section": "gdn_jax", "error": repr(e)})
        return
    dev = jax.devices()[0]

    def rec(q, k, v, a, b, S0):
        gate = jnp.exp(-jax.nn.softplus(a))
        beta = jax.nn.sigmoid(b)

        def body(S, xs):
            qt, kt, vt, gt, bt = xs
            S = S * gt[..., None, None]
            kv = jnp.einsum("bhk,bhkv->bhv", kt, S)
            S = S + kt[..., :, None] * ((vt - kv) * bt[..., None])[..., None, :]
            return S, jnp.einsum("bhk,bhkv->bhv", qt, S)

        S, ys = lax.scan(body, S0, (q, k, v, gate, beta))
        return S, ys

    def loss_naive(q, k, v, a, b, w):
        S0 = jnp.zeros(q.shape[1:3] + (q.shape[3], v.shape[3]), q.dtype)
        _, ys = rec(q, k, v, a, b, S0)
        return jnp.sum(ys * w)

    def loss_chunk(q, k, v, a, b, w, C=64):
        T = q.shape[0]
        S0 = jnp.zeros(q.shape[1:3] + (q.shape[3], v.shape[3]), q.dtype)
        split = lambda x: x.reshape((T // C, C) + x.shape[1:])

        @jax.checkpoint
        def chunk(S, xs):
            return rec(*xs, S)

        _, ys = lax.scan(chunk, S0, tuple(split(x) for x in (q, k, v, a, b)))
        return jnp.sum(ys.reshape(w.shape) * w)

    for T in TS:
        key = jax.random.PRNGKey(0)
        ks = jax.random.split(key, 6)
        B, H, K, V = 1, 16, 128, 128
        nrm = lambda x: x / jnp.sqrt(jnp.sum(x * x, -1, keepdims=True) + 1e-6)
        q = nrm(jax.random.normal(ks[0], (T, B, H, K)))
        k = nrm(jax.random.normal(ks[1], (T, B, H, K)))
        v = jax.random.normal(ks[2], (T, B, H, V))
        a = jax.random.normal(ks[3], (T, B, H))
        b = jax.random.normal(ks[4], (T, B, H))
        w = jax.random.normal(ks[5], (T, B, H, V))
        for name, lf in (("jax_scan_jit", loss_naive), ("jax_chunk_ckpt_jit", loss_chunk)):
            if os.environ.get("IMPL") and os.environ["IMPL"] != name:
                continue
            try:
                f = jax.jit(jax.value_and_grad(lf, argnums=(0, 1, 2, 3, 4)))
                r = f(q, k, v, a, b, w)
                jax.block_until_ready(r)
                del r
                st = dev.memory_stats() or {}
                base = st.get("bytes_in_use", 0)
                ts = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    r = f(q, k, v, a, b, w)
                    jax.block_until_ready(r)
                    ts.append(time.perf_counter() - t0)
                    del r
                st = dev.memory_stats() or {}
                emit({"section": "gdn", "impl": name, "dtype": "fp32", "T": T, "fwd_bwd_ms": med(ts) * 1e3,
                      "peak_MiB_since_start": (st.get("peak_bytes_in_use", 0) - base) / 2**20})
            except Exception as e:
                emit({"section": "gdn", "impl": name, "T": T, "error": repr(e)[:400]})


def section_matmul():
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    for n in (1024, 4096, 8192):
        for dt_name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            a = torch.randn(n, n, device="cuda", dtype=dt)
            b = torch.randn(n, n, device="cuda", dtype=dt)
            t = torch_time(lambda: a @ b, reps=10, warm=3)
            emit({"section": "matmul", "fw": "torch", "dtype": dt_name, "n": n, "TFLOPs": 2 * n**3 / t / 1e12})
    try:
        import jax, jax.numpy as jnp
        for n in (1024, 4096, 8192):
            for dt_name, dt in (("fp32", jnp.float32), ("bf16", jnp.bfloat16)):
                a = jax.random.normal(jax.random.PRNGKey(0), (n, n)).astype(dt)
                b = jax.random.normal(jax.random.PRNGKey(1), (n, n)).astype(dt)
                f = jax.jit(lambda x, y: jnp.matmul(x, y, precision="highest"))
                jax.block_until_ready(f(a, b))
                ts = []
                for _ in range(10):
                    t0 = time.perf_counter()
                    jax.block_until_ready(f(a, b))
                    ts.append(time.perf_counter() - t0)
                emit({"section": "matmul", "fw": "jax", "dtype": dt_name, "n": n, "TFLOPs": 2 * n**3 / med(ts) / 1e12})
    except Exception as e:
        emit({"section": "matmul", "fw": "jax", "error": repr(e)[:400]})


def section_copy():
    """Bandwidth ceiling and one large element-wise chain link in PyTorch (2^28 f32)."""
    import torch
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    t = torch_time(lambda: y.copy_(x), reps=10, warm=3)
    emit({"section": "copy", "fw": "torch", "op": "copy", "n": n, "GBs": 2 * 4 * n / t / 1e9})
    t = torch_time(lambda: torch.sin(x) * 1.01 + 0.1, reps=10, warm=3)
    emit({"section": "copy", "fw": "torch", "op": "chain", "n": n, "GBs": 3 * 2 * 4 * n / t / 1e9})


def section_overhead():
    import torch
    for N in (100, 1000):
        x = torch.randn(16, device="cuda", requires_grad=True)

        def fwd():
            y = x
            for _ in range(N):
                y = torch.sin(y) * 1.01 + 0.1
            return y.sum()

        with torch.no_grad():
            t = torch_time(fwd, reps=5, warm=2)
        def grad():
            x.grad = None
            fwd().backward()
        tg = torch_time(grad, reps=5, warm=2)
        emit({"section": "overhead", "fw": "torch_eager", "N": N, "fwd_us_per_op": t / (3 * N) * 1e6,
              "grad_us_per_op": tg / (3 * N) * 1e6})
    try:
        import jax, jax.numpy as jnp
        for N in (100,):
            x = jnp.ones(16)

            def f(x):
                for _ in range(N):
                    x = jnp.sin(x) * 1.01 + 0.1
                return x.sum()
            jax.block_until_ready(f(x))
            ts = []
            for _ in range(3):
                t0 = time.perf_counter(); jax.block_until_ready(f(x)); ts.append(time.perf_counter() - t0)
            jf = jax.jit(jax.grad(f))
            jax.block_until_ready(jf(x))
            tj = []
            for _ in range(5):
                t0 = time.perf_counter(); jax.block_until_ready(jf(x)); tj.append(time.perf_counter() - t0)
            jv = jax.jit(f)
            jax.block_until_ready(jv(x))
            tv = []
            for _ in range(5):
                t0 = time.perf_counter(); jax.block_until_ready(jv(x)); tv.append(time.perf_counter() - t0)
            emit({"section": "overhead", "fw": "jax", "N": N, "eager_fwd_us_per_op": med(ts) / (3 * N) * 1e6,
                  "jit_grad_us_per_op": med(tj) / (3 * N) * 1e6, "jit_fwd_us_per_op": med(tv) / (3 * N) * 1e6})
    except Exception as e:
        emit({"section": "overhead", "fw": "jax", "error": repr(e)[:400]})


MLP_DIMS = [784, 512, 512, 10]


def torch_mlp_step(B):
    """One eager PyTorch SGD step of the 784-512-512-10 relu MLP at batch B (TF32 off), as a
    function of nothing that updates its parameters in place."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    dims = MLP_DIMS
    Ws = [(torch.randn(i, o, device="cuda") * (2 / i) ** 0.5).requires_grad_(True) for i, o in zip(dims, dims[1:])]
    bs = [torch.zeros(o, device="cuda", requires_grad=True) for o in dims[1:]]
    X = torch.randn(B, 784, device="cuda")
    y = torch.randint(0, 10, (B,), device="cuda")

    def step():
        h = X
        for i, (W, b) in enumerate(zip(Ws, bs)):
            h = h @ W + b
            if i < 2:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, y)
        gs = torch.autograd.grad(loss, Ws + bs)
        with torch.no_grad():
            for p, g in zip(Ws + bs, gs):
                p.sub_(0.01 * g)

    return step


def jax_mlp_step(B):
    """The same step under jax.jit (precision highest), and the initial parameters:
    `params = step(params)`."""
    import jax, jax.numpy as jnp
    dims = MLP_DIMS
    key = jax.random.PRNGKey(0)
    params = []
    for i, o in zip(dims, dims[1:]):
        key, k1 = jax.random.split(key)
        params.append((jax.random.normal(k1, (i, o)) * (2 / i) ** 0.5, jnp.zeros(o)))
    X = jax.random.normal(key, (B, 784))
    y = jax.random.randint(key, (B,), 0, 10)

    def loss(ps):
        h = X
        for i, (W, b) in enumerate(ps):
            h = jnp.matmul(h, W, precision="highest") + b
            if i < 2:
                h = jax.nn.relu(h)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(h), y[:, None], 1))

    @jax.jit
    def step(ps):
        g = jax.grad(loss)(ps)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, ps, g)

    return step, params


def jax_mlp_rate(B, rounds=5, steps=50):
    """JAX jit's MLP training steps per second at batch B: the median of `rounds` rounds of
    `steps` steps after one warm-up step, one block_until_ready per round."""
    import jax
    step, params = jax_mlp_step(B)
    params = step(params)
    jax.block_until_ready(params)
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            params = step(params)
        jax.block_until_ready(params)
        ts.append(time.perf_counter() - t0)
    return steps / med(ts)


def section_mlp():
    for B in (128, 4096):
        step = torch_mlp_step(B)
        n = 50
        t = torch_time(lambda: [step() for _ in range(n)], reps=3, warm=1)
        emit({"section": "mlp", "fw": "torch_eager", "batch": B, "steps_per_s": n / t})
    try:
        import jax
        for B in (128, 4096):
            emit({"section": "mlp", "fw": "jax_jit", "batch": B, "steps_per_s": jax_mlp_rate(B, rounds=3)})
    except Exception as e:
        emit({"section": "mlp", "fw": "jax", "error": repr(e)[:400]})


if __name__ == "__main__":
    which = sys.argv[1:] or ["gdn", "gdn_jax", "matmul", "overhead", "mlp"]
    TS = [int(t) for t in os.environ.get("TS", "2048,8192").split(",")]
    import torch
    emit({"section": "env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)})
    for s in which:
        t0 = time.time()
        try:
            if s == "gdn":
                section_gdn(TS)
            elif s == "gdn_jax":
                section_gdn_jax(TS)
            else:
                globals()["section_" + s]()
        except Exception as e:
            emit({"section": s, "error": traceback.format_exc()[-800:]})
        emit({"section": s, "wall_s": round(time.time() - t0, 1)})
