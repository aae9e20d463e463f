#!/usr/bin/env bash
# device call (2026-12-07 session 3): the 16-byte copy kernel. Graph test, then the compiled
# batch-128 MLP step: JAX jit and cotangent (new = 16-byte copies, prev = 8-byte) alternating.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf .gpu/bin; tar -xJf .gpuc/pack.tar.xz
b=$(cat .gpu/built-in); [ -e "$b" ] || { mkdir -p "$(dirname "$b")"; ln -s "$PWD" "$b"; }
nvidia-smi --query-gpu=name --format=csv,noheader; date
(cd crates/cotangent && timeout 100 ../../.gpu/bin/cotangent/cuda_kernels compiled_calls_run_as_cuda_graphs 2>&1 | grep -E "test result|panicked" -A3)
sps() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1])["results"]; print(" ".join(f"{m}={r[m]["steps_per_s"]:.0f} (eval {r[m]["eval_us"]:.0f} wait {r[m]["wait_us"]:.0f} us, graphs/step {r[m].get("graph_launches_per_step",-1)})" for m in r))'; }
jax_mlp() { timeout 60 python3 - <<'PY'
import sys, time; sys.path.insert(0, "bench/gpu"); import anchors, jax
step, params = anchors.jax_mlp_step(128)
params = step(params); jax.block_until_ready(params)
for _ in range(2):
    ts = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(50): params = step(params)
        jax.block_until_ready(params); ts.append(time.perf_counter() - t0)
    print(f"jax_jit b128: {50 / sorted(ts)[1]:.0f} steps/s", flush=True)
PY
}
for i in 1 2; do
  jax_mlp
  echo -n "new b128 compiled: "; timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 5 --steps-per-sync 50 --modes compiled | sps
  echo -n "prev b128 compiled: "; timeout 40 .gpu/bench-prev/mlp --device cuda --batch 128 --reps 5 --steps-per-sync 50 --modes compiled | sps
done
date
