#!/usr/bin/env bash
# device call (2026-12-07 session 3), binaries of the one-pass column commit (prev = 1456273's mlp):
# graph test and reductions, compiled batch-128 MLP against JAX, then issue 20's absolute targets on this code: gated
# delta T=2048/8192 (time, peak memory), eager per-op cost, the large element-wise op.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf .gpu/bin; tar -xJf .gpuc/pack.tar.xz
b=$(cat .gpu/built-in); [ -e "$b" ] || { mkdir -p "$(dirname "$b")"; ln -s "$PWD" "$b"; }
nvidia-smi --query-gpu=name --format=csv,noheader; date
(cd crates/cotangent && timeout 150 ../../.gpu/bin/cotangent/cuda_kernels compiled_calls_run_as_cuda_graphs reductions_match_cpu long_axes_and_non_finite 2>&1 | grep -E "test result|panicked" -A3)
sps() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1])["results"]; print(" ".join(f"{m}={r[m]["steps_per_s"]:.0f} (eval {r[m]["eval_us"]:.0f} wait {r[m]["wait_us"]:.0f} us, graphs/step {r[m].get("graph_launches_per_step",-1)})" for m in r))'; }
timeout 60 python3 - <<'PY'
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
for d in bench bench-prev bench bench-prev; do echo -n "$d b128: "; timeout 40 .gpu/$d/mlp --device cuda --batch 128 --reps 5 --steps-per-sync 50 --modes eager compiled | sps; done
echo -n "bench b4096: "; timeout 40 .gpu/bench/mlp --device cuda --batch 4096 --reps 3 --steps-per-sync 50 --modes eager compiled | sps
date; echo "== gated delta"
for t in 2048 8192; do echo -n "T=$t "; timeout 90 .gpu/bench/gated_delta_layer --device cuda --t $t --reps 3 --warmup 1 | tail -1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.read())["results"]; print({k: r[k] for k in r if k in ("ms_per_step","peak_mib","T","t")})'; done
date; echo "== overhead"
timeout 60 .gpu/bench/overhead --device cuda --n 100 1000 | tail -1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.read())["results"]; [print(n, {m: round(r[n][m]["per_op_us"],3) for m in r[n] if isinstance(r[n][m], dict) and "per_op_us" in r[n][m]}) for n in r]'
date; echo "== elementwise"
timeout 80 python3 bench/gpu/compare.py --bin .gpu/bench --python python3 elementwise 2>&1 | grep -v '^{' | tail -4
date
