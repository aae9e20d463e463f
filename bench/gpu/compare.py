#!/usr/bin/env python3
"""GPU benchmarks side by side: cotangent on CUDA and the peers (PyTorch eager, JAX jit) in one run.

Usage, on a GPU machine (the binaries are built elsewhere by `bench/gpu/build`):

    PEERS_PYTHON=python3 python3 bench/gpu/compare.py [--bin .gpu/bench] [--python PY] [sections]

Sections: matmul (f32 with TF32 off, bf16; n = 4096, 8192), elementwise (one op over 2^28 f32
against a device-to-device copy), overhead (eager per-op cost of `sin(x)*1.01+0.1` on 16 floats),
mlp (784-512-512-10 SGD step, batch 128 and 4096; cotangent with a wait after every step and once per 50 steps, as the peers), gated_delta (fwd+bwd of the gated delta rule,
f32, B=1, 16 heads of 128x128, T = 2048 and 8192, and 32768 for cotangent alone: cotangent-nn's chunked custom function against
JAX's chunked checkpointed scan; time and peak device memory). cotangent's programs print one JSON record
each; the peers' side is `anchors.py` (JSON lines). Every record is also appended to
`$OUT/gpu_bench.jsonl` when OUT is set. The table at the end gives each workload's numbers and
cotangent's ratio to PyTorch (higher is better for rates, lower for times).
"""
import argparse, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def log(rec):
    print(json.dumps(rec), flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_bench.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")


def ours(bindir, prog, *args):
    cmd = [os.path.join(bindir, prog), "--device", "cuda", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        rec = {"framework": "cotangent", "bench": prog, "error": (p.stderr or p.stdout)[-800:]}
        log(rec)
        return None
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    log(rec)
    return rec


def peers(py, section, **extra_env):
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", **extra_env)
    p = subprocess.run([py, os.path.join(HERE, "anchors.py"), section], capture_output=True, text=True, env=env)
    out = []
    for line in p.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        log(rec)
        out.append(rec)
    if p.returncode != 0:
        log({"section": section, "error": p.stderr[-800:]})
    return out


def pick(recs, **kv):
    for r in recs:
        if all(r.get(k) == v for k, v in kv.items()):
            return r
    return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=".gpu/bench")
    ap.add_argument("--python", default=os.environ.get("PEERS_PYTHON", "python3"))
    ap.add_argument("sections", nargs="*", default=["matmul", "elementwise", "overhead", "mlp"])
    a = ap.parse_args()
    rows = []  # (workload, unit, cotangent, torch, jax, higher_is_better)
    for s in a.sections:
        if s == "matmul":
            pr = peers(a.python, "matmul")
            for dt, name in (("fp32", "float32"), ("bf16", "bfloat16")):
                # timed as the peers are (anchors.py's torch_time): after 3 warm-up calls, the
                # median of 10 single calls, each followed by a synchronise. A sustained loop
                # (the default --min-time) runs the GPU at its power limit: bf16 products then
                # take ~10 % longer on the same cuBLAS kernel (bench/RESULTS.md)
                r = ours(a.bin, "matmul", "--sizes", 4096, 8192, "--dtype", name, "--reps", 10, "--warmup", 3,
                         "--min-time", 0)
                for n in (4096, 8192):
                    c = r and r["results"][str(n)]["gflops"] / 1e3
                    rows.append((f"matmul {dt} n={n}", "TFLOP/s", c,
                                 pick(pr, fw="torch", dtype=dt, n=n).get("TFLOPs"),
                                 pick(pr, fw="jax", dtype=dt, n=n).get("TFLOPs"), True))
        elif s == "elementwise":
            pr = peers(a.python, "copy")
            r = ours(a.bin, "elementwise_chain", "--n", 1, "--size", 1 << 28, "--reps", 5, "--warmup", 2)
            rows.append(("sin(x)*1.01+0.1, 2^28 f32, per op", "GB/s", r and r["results"]["gb_per_s"],
                         pick(pr, fw="torch", op="chain").get("GBs"), pick(pr, fw="torch", op="copy").get("GBs"), True))
        elif s == "overhead":
            pr = peers(a.python, "overhead")
            r = ours(a.bin, "overhead", "--n", 100, 1000)
            for n in (100, 1000):
                t = pick(pr, fw="torch_eager", N=n)
                j = pick(pr, fw="jax", N=n)
                res = r and r["results"][str(n)]
                rows.append((f"per op fwd, N={n}", "us", res and res["fwd_eager"]["per_op_us"],
                             t.get("fwd_us_per_op"), j.get("eager_fwd_us_per_op"), False))
                rows.append((f"per op grad, N={n}", "us", res and res["grad_eager"]["per_op_us"],
                             t.get("grad_us_per_op"), j.get("jit_grad_us_per_op"), False))
                # compile(f) and compile(grad(f)) against JAX jit (the torch column stays eager)
                rows.append((f"per op fwd compiled, N={n}", "us", res and res["fwd_compiled"]["per_op_us"],
                             t.get("fwd_us_per_op"), j.get("jit_fwd_us_per_op"), False))
                rows.append((f"per op grad compiled, N={n}", "us", res and res["grad_compiled"]["per_op_us"],
                             t.get("grad_us_per_op"), j.get("jit_grad_us_per_op"), False))
        elif s == "mlp":
            pr = peers(a.python, "mlp")
            # the peers time loops of 50 steps with one wait for the GPU; cotangent both ways:
            # a wait after every step, and 50 steps per wait as the peers
            for b in (128, 4096):
                for per_sync in (1, 50):
                    r = ours(a.bin, "mlp", "--batch", b, "--reps", 5, "--steps-per-sync", per_sync)
                    for mode in ("eager", "compiled"):
                        rows.append((f"MLP step, batch {b}, {mode}, {per_sync}/wait", "steps/s",
                                     r and r["results"][mode]["steps_per_s"],
                                     pick(pr, fw="torch_eager", batch=b).get("steps_per_s"),
                                     pick(pr, fw="jax_jit", batch=b).get("steps_per_s"), True))
        elif s == "gated_delta":
            pr = peers(a.python, "gdn_jax", IMPL="jax_chunk_ckpt_jit", TS="2048,8192")
            # T = 32768 for cotangent only: it must run, with memory linear in T
            for t in (2048, 8192, 32768):
                reps = (5, 2) if t < 32768 else (2, 1)
                r = ours(a.bin, "gated_delta_layer", "--t", t, "--reps", reps[0], "--warmup", reps[1])
                j = pick(pr, impl="jax_chunk_ckpt_jit", T=t)
                res = r and r["results"]
                rows.append((f"gated delta fwd+bwd T={t}", "ms", res and res["ms_per_step"], None,
                             j.get("fwd_bwd_ms"), False))
                rows.append((f"gated delta peak memory T={t}", "MiB", res and res["peak_mib"], None,
                             j.get("peak_MiB_since_start"), False))
    print()
    print(f"{'workload':40} {'unit':8} {'cotangent':>10} {'torch':>10} {'jax':>10} {'vs torch':>9} {'vs jax':>9}")
    for w, u, c, t, j, hib in rows:
        f = lambda v: f"{v:10.3g}" if isinstance(v, (int, float)) else f"{'-':>10}"
        ratio = lambda peer: (c / peer if hib else peer / c) if c and peer else None
        print(f"{w:40} {u:8} {f(c)} {f(t)} {f(j)} {f(ratio(t))} {f(ratio(j))}")
        log({"table": w, "unit": u, "cotangent": c, "torch": t, "jax": j, "speedup_vs_torch": ratio(t),
             "speedup_vs_jax": ratio(j)})


if __name__ == "__main__":
    main()
