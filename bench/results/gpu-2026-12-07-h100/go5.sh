#!/usr/bin/env bash
# device call (2026-12-07 session 3), warm machine: the MLP comparisons of go3.sh.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
[ -x .gpu/bench/mlp ] || tar -xJf .gpuc/pack.tar.xz
sps() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1])["results"]; print(" ".join(f"{m}={r[m]["steps_per_s"]:.0f} (build {r[m]["build_us"]:.0f} eval {r[m]["eval_us"]:.0f} wait {r[m]["wait_us"]:.0f} us, graphs/step {r[m].get("graph_launches_per_step",-1)}, checks/step {r[m].get("index_check_waits_per_step",-1)})" for m in r))'; }
mlp() { echo -n "$1 b$2 $3: "; timeout 40 "$4"/mlp --device cuda --batch "$2" --reps 3 --steps-per-sync 50 --modes "$3" | sps; }
torch_mlp() { python3 - <<'PY'
import sys; sys.path.insert(0, "bench/gpu"); import anchors, torch
torch.backends.cuda.matmul.allow_tf32 = False
step = anchors.torch_mlp_step(4096)
t = anchors.torch_time(lambda: [step() for _ in range(50)], reps=3, warm=1)
print(f"torch_eager b4096: {50 / t:.0f} steps/s", flush=True)
PY
}
mlp new 4096 eager .gpu/bench; mlp prev 4096 eager .gpu/bench-prev; mlp base 4096 eager .gpu/bench-base
torch_mlp
mlp new 128 eager,compiled .gpu/bench
mlp new 4096 compiled .gpu/bench
mlp new 4096 eager .gpu/bench; mlp base 4096 eager .gpu/bench-base
torch_mlp
date
