#!/usr/bin/env bash
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
[ -x .gpu/bench/mlp ] || tar -xJf .gpuc/pack.tar.xz
sps() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1])["results"]; print(" ".join(f"{m}={r[m]["steps_per_s"]:.0f} (build {r[m]["build_us"]:.0f} eval {r[m]["eval_us"]:.0f} wait {r[m]["wait_us"]:.0f} us, graphs/step {r[m].get("graph_launches_per_step",-1)})" for m in r))'; }
for i in 1 2; do
echo -n "b128 compiled graphs: "; timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 3 --steps-per-sync 50 --modes compiled | sps
echo -n "b128 compiled no graphs: "; COTANGENT_CUDA_GRAPHS=0 timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 3 --steps-per-sync 50 --modes compiled | sps
done
echo -n "b128 compiled graphs, 1 step per wait: "; timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 3 --steps-per-sync 1 --modes compiled | sps
date
ONLY="compile eager_fusion transforms" MODES=cuda TEST_TIMEOUT=200 JOBS=3 OUT=$OUT .gpu/run
date
timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 2000 --launch-count 200 --csv --page raw \
  .gpu/bench/mlp --device cuda --batch 128 --reps 1 --warmup 1 --min-time 0 --modes compiled > $OUT/ncu_b128.csv 2>$OUT/ncu.err
python3 bench/gpu/ncu_kernels.py $OUT/ncu_b128.csv | head -40
date
