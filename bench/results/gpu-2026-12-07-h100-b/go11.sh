#!/usr/bin/env bash
# device call 3 (2026-12-07 session 4), binaries of the head named in the log: lib fused tests, the
# graph test, cuda_kernels (CPU mode) whole, index/compile/transforms/eager-fusion suites on CUDA, compiled batch-128
# MLP against JAX (interleaved, four each), the kernels of compiled steps (ncu).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf .gpu; tar -xJf .gpuc/pack.tar.xz
b=$(cat .gpu/built-in); [ -e "$b" ] || { mkdir -p "$(dirname "$b")"; ln -s "$PWD" "$b"; }
nvidia-smi --query-gpu=name --format=csv,noheader; date; cat .gpu/head
sps() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1])["results"]; print(" ".join(f"{m}={r[m]["steps_per_s"]:.0f} (eval {r[m]["eval_us"]:.0f} wait {r[m]["wait_us"]:.0f} us, graphs/step {r[m].get("graph_launches_per_step",-1)})" for m in r))'; }
cat > /tmp/jax_mlp.py <<'PY'
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
for i in 1 2 3 4; do timeout 60 python3 /tmp/jax_mlp.py; echo -n "cotangent b128: "; timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 5 --steps-per-sync 50 --modes compiled | sps; done
cat > /tmp/torch_mlp.py <<'PY'
import sys, time; sys.path.insert(0, "bench/gpu"); import anchors, torch
step = anchors.torch_mlp_step(4096)
for _ in range(3): step()
torch.cuda.synchronize(); ts = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(50): step()
    torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
print(f"torch eager b4096: {50 / sorted(ts)[2]:.0f} steps/s", flush=True)
PY
for i in 1 2; do timeout 60 python3 /tmp/torch_mlp.py; echo -n "cotangent b4096 eager: "; timeout 40 .gpu/bench/mlp --device cuda --batch 4096 --reps 3 --steps-per-sync 50 --modes eager | sps; done
echo -n "cotangent b128 eager: "; timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 3 --steps-per-sync 50 --modes eager | sps
date; echo "== tests"
(cd crates/cotangent && timeout 100 ../../.gpu/bin/cotangent/cotangent-unit fused 2>&1 | grep -E "test result|panicked" -A3)
(cd crates/cotangent && timeout 220 ../../.gpu/bin/cotangent/cuda_kernels 2>&1 | grep -E "test result|panicked" -A3)
date
for t in reduce_index bad_values transforms eager_fusion; do echo "-- $t on cuda"; (cd crates/cotangent && COTANGENT_DEVICE=cuda timeout 120 ../../.gpu/bin/cotangent/$t 2>&1 | grep -E "test result|panicked" -A5); done
date
(cd crates/cotangent && COTANGENT_DEVICE=cuda COMPILE_FUZZ_CASES=40 timeout 200 ../../.gpu/bin/cotangent/compile 2>&1 | grep -E "test result|panicked" -A3)
date; echo "== ncu"
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 500 --launch-count 120 --csv --page raw \
  .gpu/bench/mlp --device cuda --batch 128 --reps 20 --warmup 2 --min-time 0 --modes compiled > $OUT/ncu_b128.csv 2>$OUT/ncu.err
python3 bench/gpu/ncu_kernels.py $OUT/ncu_b128.csv | head -40
date
