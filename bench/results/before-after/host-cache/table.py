"""Before/after table of bench/compare.py records: 49d207e ("before") against the final commit
("after"), rounds alternated. Usage: python3 table.py DIR (DIR holds before-N/ and after-N/)."""
import json
import statistics
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "."
METRICS = [  # (label, bench, path in results, higher is better)
    ("overhead fwd eager µs/op N=100", "overhead", "100.fwd_eager.per_op_us", False),
    ("overhead fwd eager µs/op N=1000", "overhead", "1000.fwd_eager.per_op_us", False),
    ("overhead grad eager µs/op N=100", "overhead", "100.grad_eager.per_op_us", False),
    ("overhead grad eager µs/op N=1000", "overhead", "1000.grad_eager.per_op_us", False),
    ("matmul GFLOP/s n=256", "matmul", "256.gflops", True),
    ("matmul GFLOP/s n=1024", "matmul", "1024.gflops", True),
    ("matmul GFLOP/s n=2048", "matmul", "2048.gflops", True),
    ("mlp eager steps/s", "mlp", "eager.steps_per_s", True),
    ("custom_vjp eager ms", "custom_vjp", "eager.s_per_call", False),
    ("custom_vjp eager_plain ms", "custom_vjp", "eager_plain.s_per_call", False),
    ("checkpoint_memory segment Δ MiB", "checkpoint_memory", "eager.segment.delta_rss_run_mib", False),
    ("checkpoint_memory none s/grad", "checkpoint_memory", "eager.none.s_per_grad", False),
    ("checkpoint_memory segment s/grad", "checkpoint_memory", "eager.segment.s_per_grad", False),
    ("gated_delta T=2048 chunked s/grad", "gated_delta", "2048.chunked.s_per_grad", False),
    ("gated_delta T=2048 chunked Δ MiB", "gated_delta", "2048.chunked.delta_rss_run_mib", False),
    ("gated_delta T=2048 chunked_stepwise s/grad", "gated_delta", "2048.chunked_stepwise.s_per_grad", False),
    ("gated_delta T=2048 op_by_op s/grad", "gated_delta", "2048.op_by_op.s_per_grad", False),
]


def value(side, r, bench, path):
    for line in open(f"{d}/{side}-{r}/{bench}.jsonl"):
        rec = json.loads(line)
        if rec.get("label") != "cotangent":
            continue
        v = rec["record"]["results"]
        for k in path.split("."):
            v = v[k]
        return v * 1000 if path.endswith("s_per_call") else v
    return None


print("| metric | before (49d207e) rounds | median | after rounds | median | after/before | rounds overlap |")
print("|---|---|---|---|---|---|---|")
for label, bench, path, higher in METRICS:
    b = [value("before", r, bench, path) for r in (1, 2, 3)]
    a = [value("after", r, bench, path) for r in (1, 2, 3)]
    mb, ma = statistics.median(b), statistics.median(a)
    overlap = max(min(a), min(b)) <= min(max(a), max(b))
    fmt = lambda xs: ", ".join(f"{x:.3g}" for x in xs)
    print(f"| {label} | {fmt(b)} | {mb:.3g} | {fmt(a)} | {ma:.3g} | {ma / mb:.3f} | {'yes' if overlap else 'no'} |")
