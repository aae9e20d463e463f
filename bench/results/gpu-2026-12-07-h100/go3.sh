#!/usr/bin/env bash
# device call 1 (2026-12-07 session 3): CUDA graphs for compiled replays. 1. the graph test;
# 2. MLP: the peers (torch eager, jax jit) and cotangent (new = this session's binaries,
# prev = 2f7ed33's mlp, base = 678b371's) alternating; 3. cuda_kernels on the CPU mode (all but
# the NVRTC compile-everything test).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
tar -xJf .gpuc/pack.tar.xz
built_in=$(cat .gpu/built-in)
[ -e "$built_in" ] || { mkdir -p "$(dirname "$built_in")"; ln -s "$PWD" "$built_in"; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader; date
echo "== graph test"
(cd crates/cotangent && timeout 150 ../../.gpu/bin/cotangent/cuda_kernels compiled_calls_run_as_cuda_graphs --nocapture 2>&1 | tail -25)
date
sps() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1])["results"]; print(" ".join(f"{m}={r[m]["steps_per_s"]:.0f} (build {r[m]["build_us"]:.0f} eval {r[m]["eval_us"]:.0f} wait {r[m]["wait_us"]:.0f} us, graphs/step {r[m].get("graph_launches_per_step",-1)}, checks/step {r[m].get("index_check_waits_per_step",-1)})" for m in r))'; }
mlp() { echo -n "$1 b$2 $4: "; timeout 40 "$3"/mlp --device cuda --batch "$2" --reps 3 --steps-per-sync 50 --modes "$4" | sps; }
echo "== peers"; timeout 150 python3 bench/gpu/anchors.py mlp 2>&1 | grep '"mlp"'
mlp new 4096 eager .gpu/bench; mlp prev 4096 eager .gpu/bench-prev; mlp base 4096 eager .gpu/bench-base
mlp new 128 eager,compiled .gpu/bench
mlp new 4096 compiled .gpu/bench
echo -n "graphs off: "; COTANGENT_CUDA_GRAPHS=0 timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 3 --steps-per-sync 50 --modes compiled | sps
mlp new 4096 eager .gpu/bench; mlp base 4096 eager .gpu/bench-base
date; echo "== cuda_kernels (cpu mode)"
(cd crates/cotangent && timeout 200 ../../.gpu/bin/cotangent/cuda_kernels -q --skip every_generated_elementwise_kernel_compiles 2>&1 | grep -E "^test result|FAILED|panicked|^---- " -A3 | head -60)
date
