#!/usr/bin/env python3
"""One line per mode from the last JSON line of cotangent's `mlp` benchmark on stdin: steps/s,
host eval and wait per step, graph launches per step.

    .gpu/bench/mlp --device cuda --batch 128 --modes compiled | python3 bench/gpu/mlp_rates.py
"""
import json
import sys

results = json.loads(sys.stdin.read().strip().splitlines()[-1])["results"]
print(" ".join(
    f"{m}={r['steps_per_s']:.0f} (eval {r['eval_us']:.0f} wait {r['wait_us']:.0f} us, "
    f"graphs/step {r.get('graph_launches_per_step', -1)})"
    for m, r in results.items()))
