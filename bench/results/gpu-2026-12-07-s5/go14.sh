#!/usr/bin/env bash
# Device call prepared in the 2026-12-07 fifth session (never run: no machine could be had):
# binaries of the head named in the log. The one-hot take_along_axis gradient and its index check
# on CUDA (reduce_index, bad_values, eval_errors with COTANGENT_DEVICE=cuda; first GPU run of
# 04b99ee..48e2db4), the graph tests (with its memory) and the gather test, compile with
# COTANGENT_DEVICE=cuda, then compiled batch-128 MLP against JAX jit.
. bench/gpu/device_prelude.sh
T() { echo "-- $*"; }
cd crates/cotangent
for t in reduce_index bad_values eval_errors; do T "$t on cuda"; COTANGENT_DEVICE=cuda timeout 100 ../../.gpu/bin/cotangent/$t 2>&1 | grep -E "test result|panicked" -A5; done
T "graph + gather"; timeout 90 ../../.gpu/bin/cotangent/cuda_kernels compiled_calls_run_as_cuda_graphs a_dropped_compiled_function_gives_its_graph_memory_back gather_and_scatter_add_match_cpu 2>&1 | grep -E "test result|panicked" -A3
date
T "compile on cuda"; COTANGENT_DEVICE=cuda COMPILE_FUZZ_CASES=10 timeout 100 ../../.gpu/bin/cotangent/compile 2>&1 | grep -E "test result|panicked" -A3
cd ../..; date
timeout 60 python3 bench/gpu/jax_mlp_rate.py
echo -n "cotangent b128: "; timeout 40 .gpu/bench/mlp --device cuda --batch 128 --reps 5 --steps-per-sync 50 --modes compiled | python3 bench/gpu/mlp_rates.py
date
