#!/usr/bin/env bash
# device call (2026-12-07 session 4), binaries of 56aad4e : batch and graph
# tests, the compile suite on CUDA, compiled batch-128 MLP against JAX (alternating), and
# the kernels of one compiled step (ncu).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf .gpu; tar -xJf .gpuc/pack.tar.xz
b=$(cat .gpu/built-in); [ -e "$b" ] || { mkdir -p "$(dirname "$b")"; ln -s "$PWD" "$b"; }
nvidia-smi --query-gpu=name --format=csv,noheader; date
sps() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1])["results"]; print(" ".join(f"{m}={r[m]["steps_per_s"]:.0f} (eval {r[m]["eval_us"]:.0f} wait {r[m]["wait_us"]:.0f} us, graphs/step {r[m].get("graph_launches_per_step",-1)})" for m in r))'; }
jax() { timeout 60 python3 - <<'PY'
import sys, time; sys.path.insert(0, "bench/gpu"); import anchors, jax
step, params = anchors.jax_mlp_step(128)
params = step(params); jax.block_until_ready(params)
ts = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(50): params = step(params)
    jax.block_until_ready(params); ts.append(time.perf_counter() - t0)
print(f"jax_jit b128: {50 / sorted(ts)[2]:.0f} steps/s", flush=True)
PY
}
jax
for d in bench bench bench; do echo -n "$d b128: "; timeout 40 .gpu/$d/mlp --device cuda --batch 128 --reps 5 --steps-per-sync 50 --modes compiled | sps; done
jax
echo -n "bench b128 eager: "; timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 3 --steps-per-sync 50 --modes eager | sps
date; echo "== tests"
(cd crates/cotangent && timeout 100 ../../.gpu/bin/cotangent/cotangent-unit fused 2>&1 | grep -E "test result|panicked" -A3)
(cd crates/cotangent && timeout 120 ../../.gpu/bin/cotangent/cuda_kernels compiled_calls_run_as_cuda_graphs 2>&1 | grep -E "test result|panicked" -A3)
(cd crates/cotangent && COTANGENT_DEVICE=cuda COMPILE_FUZZ_CASES=60 timeout 150 ../../.gpu/bin/cotangent/compile 2>&1 | grep -E "^test |test result|panicked" -A3)
date; echo "== ncu"
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 2000 --launch-count 200 --csv --page raw \
  .gpu/bench/mlp --device cuda --batch 128 --reps 1 --warmup 1 --min-time 0 --modes compiled > $OUT/ncu_b128.csv 2>$OUT/ncu.err
python3 bench/gpu/ncu_kernels.py $OUT/ncu_b128.csv | head -40
date
