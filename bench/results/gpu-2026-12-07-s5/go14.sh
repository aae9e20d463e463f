#!/usr/bin/env bash
# device call 1, shortened (2026-12-07 session 5: little device time left), binaries of the head named in the log (the library code of
# 8e8165c, first run on a GPU for 04b99ee..48e2db4): the one-hot take_along_axis gradient and its index check on CUDA (reduce_index,
# bad_values, eval_errors, transforms, compile with COTANGENT_DEVICE=cuda), lib fused/index unit
# tests, the graph (and its memory) and gather tests, checkpoint memory on CUDA, compiled batch-128
# MLP against JAX (interleaved).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf .gpu; tar -xJf .gpuc/pack.tar.xz
b=$(cat .gpu/built-in); [ -e "$b" ] || { mkdir -p "$(dirname "$b")"; ln -s "$PWD" "$b"; }
nvidia-smi --query-gpu=name --format=csv,noheader; date; cut -c1-8 .gpu/head
sps() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1])["results"]; print(" ".join(f"{m}={r[m]["steps_per_s"]:.0f} (eval {r[m]["eval_us"]:.0f} wait {r[m]["wait_us"]:.0f} us, graphs/step {r[m].get("graph_launches_per_step",-1)})" for m in r))'; }
T() { echo "-- $*"; }
cd crates/cotangent
for t in reduce_index bad_values eval_errors; do T "$t on cuda"; COTANGENT_DEVICE=cuda timeout 100 ../../.gpu/bin/cotangent/$t 2>&1 | grep -E "test result|panicked" -A5; done
T "graph + gather"; timeout 90 ../../.gpu/bin/cotangent/cuda_kernels compiled_calls_run_as_cuda_graphs a_dropped_compiled_function_gives_its_graph_memory_back gather_and_scatter_add_match_cpu 2>&1 | grep -E "test result|panicked" -A3
date
T "compile on cuda"; COTANGENT_DEVICE=cuda COMPILE_FUZZ_CASES=10 timeout 100 ../../.gpu/bin/cotangent/compile 2>&1 | grep -E "test result|panicked" -A3
cd ../..; date
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
for i in 1; do timeout 60 python3 /tmp/jax_mlp.py; echo -n "cotangent b128: "; timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 5 --steps-per-sync 50 --modes compiled | sps; done
date
date
