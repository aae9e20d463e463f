#!/usr/bin/env python3
"""Run cotangent's benchmarks and the peer scripts side by side; print Markdown tables.

    bench/run.sh [bench ...]            # same as: python3 bench/compare.py [bench ...]

Benchmarks: overhead matmul mlp custom_vjp checkpoint_memory gated_delta (default: all).
For each chosen benchmark this

  1. builds cotangent's programs once (`cargo build --release -p cotangent-bench`),
  2. runs target/release/<bench> with the parameters of the peer commands in
     bench/peers/README.md,
  3. runs bench/peers/<bench>.py --framework all with the peer Python (every installed
     framework of mlx, jax, torch; numpy too for matmul), and MLX once more with Debian's
     OpenBLAS preloaded (LD_PRELOAD) when the library is found,
  4. writes every JSON line to <out>/<bench>.jsonl and prints
     - bench/peers/summarize.py's tables of all records,
     - a ratio table: cotangent against the best peer for each headline number,
     - the targets of the CPU performance issue, measured value and pass / miss.

Only the standard library is used. Options:
  --python PATH     interpreter with the peer frameworks (default: $PEERS_PYTHON, else
                    python3)
  --out DIR         where the JSON lines go (default: target/bench-results)
  --no-peers        only run cotangent's programs
  --no-build        do not run cargo build
  --quick           fewer repetitions / smaller calibration (a smoke run, not a measurement)
  --openblas PATH   libopenblas.so.0 to preload for the MLX+OpenBLAS run (default: searched)
  --rounds N        run the whole sequence (every chosen benchmark, cotangent then peers) N
                    times; the detailed tables show round 1, the targets table shows each
                    round's ratio and the median over rounds, and the status is that of the
                    median (default 1). On a noisy machine the speed of all frameworks drifts
                    by tens of per cent within minutes; ratios are taken within one round,
                    where cotangent and its peers ran back to back.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = os.path.join(HERE, "peers")
sys.path.insert(0, PEERS)
import summarize  # noqa: E402  (bench/peers/summarize.py, unmodified copy)

# The parameters of the peer commands in bench/peers/README.md; both sides get the same.
ARGS = {
    "overhead": ["--n", "100", "1000"],
    "matmul": ["--sizes", "256", "1024", "2048"],
    "mlp": ["--batch", "128"],
    "custom_vjp": ["--batch", "32", "--width", "256", "--steps", "200"],
    "checkpoint_memory": ["--layers", "64", "--width", "256", "--batch", "4096", "--segment", "8"],
    "gated_delta": ["--t", "256", "1024", "2048"],
}
QUICK = {
    "overhead": ["--reps", "3", "--min-time", "0.02"],
    "matmul": ["--reps", "3", "--min-time", "0.05"],
    "mlp": ["--reps", "3", "--min-time", "0.1"],
    "custom_vjp": ["--reps", "2"],
    "checkpoint_memory": [],
    "gated_delta": ["--reps", "1"],
}
BENCHES = list(ARGS)
# MLX with OpenBLAS preloaded matters where MLX calls BLAS.
OPENBLAS_BENCHES = {"matmul", "mlp", "custom_vjp", "checkpoint_memory"}


def find_openblas():
    cands = ["/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
             "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
             "/usr/lib/aarch64-linux-gnu/libopenblas.so.0"]
    cands += glob.glob("/usr/lib/*/openblas*/libopenblas*.so*")
    return next((c for c in cands if os.path.exists(c)), None)


def default_python():
    if os.environ.get("PEERS_PYTHON"):
        return os.environ["PEERS_PYTHON"]
    return shutil.which("python3") or sys.executable


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def run(cmd, env=None, label=""):
    t0 = time.time()
    print(f"$ {' '.join(cmd)}" + (f"   [{label}]" if label else ""), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                       cwd=ROOT)
    if r.returncode != 0:
        print(f"  exit {r.returncode}: {r.stderr[-1500:]}", file=sys.stderr)
    print(f"  ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    return json_lines(r.stdout)


def run_bench(bench, a, openblas):
    """Return a list of wrapped records {"label", "record"}."""
    recs = []
    extra = ARGS[bench] + (QUICK[bench] if a.quick else [])
    exe = os.path.join(ROOT, "target", "release", bench)
    for rec in run([exe] + extra, label="cotangent"):
        recs.append({"label": "cotangent", "record": rec})
    script = os.path.join(PEERS, bench + ".py")
    if a.no_peers or not os.path.exists(script):
        return recs
    env = dict(os.environ)
    for rec in run([a.python, script, "--framework", "all"] + extra, env=env, label="peers"):
        recs.append({"label": rec.get("framework", ""), "record": rec})
    if openblas and bench in OPENBLAS_BENCHES:
        env2 = dict(env, LD_PRELOAD=openblas)
        for rec in run([a.python, script, "--framework", "mlx"] + extra, env=env2,
                       label="mlx +openblas"):
            recs.append({"label": "mlx+openblas", "record": rec})
    return recs


# ---------------------------------------------------------------- headline numbers
def variant(rec, label):
    name = rec.get("framework", "?")
    if "+openblas" in label:
        name += "+OpenBLAS"
    return name


def headlines(bench, rec):
    """{metric: (value, higher_is_better)} for one record."""
    res, out = rec.get("results", {}), {}
    if not isinstance(res, dict):
        return out
    if bench == "overhead":
        for n, d in res.items():
            for mode, v in d.items():
                if isinstance(v, dict) and "per_op_us" in v:
                    kind = "grad" if mode.startswith("grad") else "fwd"
                    style = "eager" if "eager" in mode and "recording" not in mode else mode
                    if style != "eager":
                        continue
                    out[f"{kind} eager µs/op N={n}"] = (v["per_op_us"], False)
    elif bench == "matmul":
        for n, d in res.items():
            if isinstance(d, dict) and "gflops" in d:
                out[f"GFLOP/s n={n}"] = (d["gflops"], True)
    elif bench == "mlp":
        best = max((d["steps_per_s"] for d in res.values() if isinstance(d, dict)
                    and "steps_per_s" in d), default=None)
        if best is not None:
            out["steps/s (best mode)"] = (best, True)
    elif bench == "custom_vjp":
        vals = [d["s_per_call"] * 1e3 for m, d in res.items() if isinstance(d, dict)
                and "s_per_call" in d and not m.endswith("_plain")]
        if vals:
            out["ms / value_and_grad (best custom mode)"] = (min(vals), False)
    elif bench == "checkpoint_memory":
        for mode, cfgs in res.items():
            for cfg, d in cfgs.items():
                if isinstance(d, dict) and d.get("delta_rss_run_mib") is not None:
                    key = f"Δ MiB of grad, checkpoint={cfg}"
                    prev = out.get(key)
                    v = d["delta_rss_run_mib"]
                    # the un-jitted JAX run is the like-for-like peer; keep each framework's
                    # best mode
                    if prev is None or v < prev[0]:
                        out[key] = (v, False)
    elif bench == "gated_delta":
        for t, d in res.items():
            for mode in ("op_by_op", "chunked", "chunked_stepwise"):
                if mode in d:
                    out[f"T={t} {mode} ms"] = (d[mode]["s_per_grad"] * 1e3, False)
                    out[f"T={t} {mode} Δ MiB"] = (d[mode]["delta_rss_run_mib"], False)
    return out


def ratio_table(bench, recs):
    ours = [headlines(bench, w["record"]) for w in recs if w["label"] == "cotangent"]
    if not ours:
        return ""
    ours = ours[0]
    peers = [(variant(w["record"], w["label"]), headlines(bench, w["record"]))
             for w in recs if w["label"] != "cotangent"]
    rows = []
    for metric, (v, higher) in ours.items():
        cands = [(name, h[metric][0]) for name, h in peers if metric in h and h[metric][0]]
        if not cands:
            rows.append([metric, summarize.fmt(v), "-", "-", "-"])
            continue
        name, best = (max if higher else min)(cands, key=lambda c: c[1])
        # ratio > 1 means cotangent is better
        ratio = (v / best) if higher else (best / v if v else float("inf"))
        rows.append([metric, summarize.fmt(v), name, summarize.fmt(best), f"{ratio:.2f}×"])
    return summarize.table(["metric", "cotangent", "best peer", "peer value",
                            "cotangent vs best (>1 = better)"], rows)


def gated_table(recs):
    rows = []
    for w in recs:
        r = w["record"]
        res = r.get("results", {})
        for t in sorted(res, key=lambda k: int(k) if k.isdigit() else 0):
            d = res[t]
            order = {"op_by_op": 0, "chunked": 1, "chunked_stepwise": 2}
            for mode, v in sorted(d.items(), key=lambda kv: (order.get(kv[0], 3), kv[0])):
                if isinstance(v, dict) and "s_per_grad" in v:
                    rel = v.get("grad_rel_diff_vs_op_by_op")
                    rows.append([variant(r, w["label"]), t, mode, v["s_per_grad"] * 1e3,
                                 v["rss_before_mib"], v["peak_rss_run_mib"],
                                 v["delta_rss_run_mib"], v.get("grad_norm"),
                                 "-" if rel is None else f"{rel:.1e}"])
    return summarize.table(["framework", "T", "mode", "ms / grad", "RSS before MiB",
                            "peak RSS run MiB", "Δ MiB", "‖grad‖", "grad rel diff vs op by op"],
                           rows)


# ---------------------------------------------------------------- targets
def get(recs, framework, *path):
    """A value from the record of `framework` (without OpenBLAS preloaded)."""
    for w in recs:
        if w["record"].get("framework") != framework or "+openblas" in w["label"]:
            continue
        d = w["record"]
        try:
            for p in path:
                d = d[p]
            return d
        except (KeyError, TypeError):
            continue
    return None


def target_checks(allrecs):
    """The targets of the CPU performance issue, measured in one round's records: a list of
    (name, measured text, goal text, score, limit, higher_is_better); `score` is the number
    compared with `limit` (a ratio, or the value itself), None when not measured."""
    rows = []

    def add(name, measured, goal, score, limit, higher):
        rows.append((name, measured, goal, score, limit, higher))

    o = allrecs.get("overhead", [])
    for n in ("100", "1000"):
        v = get(o, "cotangent", "results", n, "fwd_eager", "per_op_us")
        add(f"overhead eager forward µs/op N={n}", summarize.fmt(v), "≤ 1.0", v, 1.0, False)
        v = get(o, "cotangent", "results", n, "grad_eager", "per_op_us")
        add(f"overhead eager grad µs/op N={n}", summarize.fmt(v), "≤ 2.0", v, 2.0, False)
    for n in ("100", "1000"):
        v = get(o, "cotangent", "results", n, "fwd_compiled", "per_op_us")
        add(f"overhead compiled forward µs/op N={n}", summarize.fmt(v), "≤ 0.1", v, 0.1, False)
        v = get(o, "cotangent", "results", n, "grad_compiled", "per_op_us")
        add(f"overhead compiled grad µs/op N={n}", summarize.fmt(v), "≤ 0.1", v, 0.1, False)
    m = allrecs.get("matmul", [])
    for n in ("1024", "2048"):
        v = get(m, "cotangent", "results", n, "gflops")
        j = get(m, "jax", "results", n, "gflops")
        r = v / j if v and j else None
        add(f"matmul f32 n={n} GFLOP/s (× JAX)", f"{summarize.fmt(v)} ({summarize.fmt(r)}×)",
            "≥ 0.95× JAX", r, 0.95, True)
    p = allrecs.get("mlp", [])
    v = get(p, "cotangent", "results", "eager", "steps_per_s")
    j = get(p, "jax", "results", "jit", "steps_per_s")
    r = v / j if v and j else None
    add("mlp steps/s (× JAX jit)", f"{summarize.fmt(v)} ({summarize.fmt(r)}×)",
        "≥ 1.0× JAX jit", r, 1.0, True)
    v = get(p, "cotangent", "results", "compiled", "steps_per_s")
    r = v / j if v and j else None
    add("mlp compiled steps/s (× JAX jit)", f"{summarize.fmt(v)} ({summarize.fmt(r)}×)",
        "≥ 1.3× JAX jit", r, 1.3, True)
    c = allrecs.get("custom_vjp", [])
    v = get(c, "cotangent", "results", "eager", "s_per_call")
    j = get(c, "jax", "results", "scan_jit", "s_per_call")
    r = v / j if v and j else None
    add("custom_vjp ms (× JAX scan+jit)", f"{summarize.fmt(v and v * 1e3)} ({summarize.fmt(r)}×)",
        "≤ 1.0× JAX scan+jit", r, 1.0, False)
    v = get(c, "cotangent", "results", "compiled", "s_per_call")
    r = v / j if v and j else None
    add("custom_vjp compiled ms (× JAX scan+jit)", f"{summarize.fmt(v and v * 1e3)} ({summarize.fmt(r)}×)",
        "≤ 0.5× JAX scan+jit", r, 0.5, False)
    k = allrecs.get("checkpoint_memory", [])
    seg = get(k, "cotangent", "results", "eager", "segment", "delta_rss_run_mib")
    none = get(k, "cotangent", "results", "eager", "none", "delta_rss_run_mib")
    j = get(k, "jax", "results", "eager", "segment", "delta_rss_run_mib")
    # one score for both conditions: seg over the smaller of its two bounds, ≤ 1 passes
    bound = min(b for b in (none and none / 2, j) if b) if (none or j) else None
    add("checkpoint_memory Δ MiB, every 8 (vs JAX un-jitted, vs own none)",
        f"{summarize.fmt(seg)} (JAX {summarize.fmt(j)}, own none {summarize.fmt(none)})",
        "≤ JAX eager and ≤ ½ none", seg / bound if seg is not None and bound else None, 1.0,
        False)
    g = allrecs.get("gated_delta", [])
    ct = get(g, "cotangent", "results", "2048", "chunked", "s_per_grad")
    ot = get(g, "cotangent", "results", "2048", "op_by_op", "s_per_grad")
    cm = get(g, "cotangent", "results", "2048", "chunked", "delta_rss_run_mib")
    om = get(g, "cotangent", "results", "2048", "op_by_op", "delta_rss_run_mib")
    if ct and ot:
        add("gated_delta T=2048 time chunked / op-by-op",
            f"{ct * 1e3:.0f} / {ot * 1e3:.0f} ms = {ct / ot:.3f}", "≤ 1.0", ct / ot, 1.0, False)
    if cm is not None and om:
        add("gated_delta T=2048 Δ MiB chunked / op-by-op",
            f"{summarize.fmt(cm)} / {summarize.fmt(om)} = {summarize.fmt(cm / om)}", "≤ 1/8",
            cm / om, 1 / 8, False)
    rel = get(g, "cotangent", "results", "2048", "chunked", "grad_rel_diff_vs_op_by_op")
    if rel is not None:
        add("gated_delta T=2048 chunked grad rel diff vs op-by-op", f"{rel:.1e}", "≤ 1e-4",
            rel, 1e-4, False)
    return rows


def passes(score, limit, higher):
    if score is None:
        return None
    return score >= limit if higher else score <= limit


def status(ok):
    return "-" if ok is None else ("pass" if ok else "MISS")


def targets(rounds):
    """The targets table: one round's measurements, or with several rounds each round's score
    and the median over rounds, whose status counts."""
    per_round = [target_checks(r) for r in rounds]
    if not per_round or not per_round[0]:
        return ""
    if len(per_round) == 1:
        rows = [[name, measured, goal, status(passes(score, limit, higher))]
                for name, measured, goal, score, limit, higher in per_round[0]]
        return summarize.table(["target", "measured", "goal", "status"], rows)
    rows = []
    for i, (name, _, goal, _, limit, higher) in enumerate(per_round[0]):
        scores = [rs[i][3] if i < len(rs) and rs[i][0] == name else None for rs in per_round]
        got = sorted(x for x in scores if x is not None)
        med = (got[(len(got) - 1) // 2] + got[len(got) // 2]) / 2 if got else None
        rows.append([name, goal] + [summarize.fmt(x) for x in scores] +
                    [summarize.fmt(med), status(passes(med, limit, higher))])
    heads = ["target (score: the ratio, or the value)", "goal"]
    heads += [f"round {i + 1}" for i in range(len(per_round))] + ["median", "status"]
    return summarize.table(heads, rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("benches", nargs="*", metavar="bench",
                   help="any of: " + " ".join(BENCHES) + " (default: all)")
    p.add_argument("--python", default=default_python())
    p.add_argument("--out", default=os.path.join(ROOT, "target", "bench-results"))
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--no-build", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--openblas", default=None)
    p.add_argument("--rounds", type=int, default=1)
    a = p.parse_args()
    benches = a.benches or BENCHES
    bad = [b for b in benches if b not in BENCHES]
    if bad:
        p.error(f"unknown benchmark(s) {bad}; choose from {BENCHES}")
    os.makedirs(a.out, exist_ok=True)
    if not a.no_build:
        r = subprocess.run(["cargo", "build", "--release", "-p", "cotangent-bench"], cwd=ROOT)
        if r.returncode != 0:
            sys.exit("cargo build failed")
    openblas = a.openblas or find_openblas()
    if not a.no_peers and not openblas:
        print("note: libopenblas.so.0 not found (apt-get install libopenblas0-pthread); "
              "skipping the MLX+OpenBLAS runs", file=sys.stderr)
    rounds = []
    for i in range(max(1, a.rounds)):
        if a.rounds > 1:
            print(f"# round {i + 1} of {a.rounds}", file=sys.stderr, flush=True)
        rounds.append({bench: run_bench(bench, a, openblas) for bench in benches})
    allrecs = rounds[0]
    for bench in benches:
        with open(os.path.join(a.out, bench + ".jsonl"), "w") as f:
            for i, r in enumerate(rounds):
                for w in r[bench]:
                    f.write(json.dumps(dict(w, round=i + 1)) + "\n")
    up = subprocess.run(["uptime"], stdout=subprocess.PIPE, text=True).stdout.strip()
    print(f"# cotangent vs peers — {time.strftime('%Y-%m-%d %H:%M %Z')}\n")
    print(f"CPU: {summarize_cpu()}; nproc {os.cpu_count()}; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; load after the run: {up}\n")
    # round 1's records, labelled as summarize.load labels the JSON-line files
    recs = [dict(w["record"], _label=w["label"]) for b in benches for w in allrecs[b]]
    recs = [r for r in recs if "skipped" not in r and "results" in r]
    for key, title, fn in summarize.SECTIONS:
        sel = [r for r in recs if r.get("bench") == key]
        if sel:
            print(f"### {title}\n")
            print(fn(sel))
            print()
            rt = ratio_table(key, allrecs[key])
            if rt:
                print(rt + "\n")
    if "gated_delta" in allrecs and allrecs["gated_delta"]:
        print("### Gated delta recurrence: op by op, chunked (WY form, checkpoint per chunk), "
              "chunked_stepwise (step-wise checkpointed chunks)\n")
        print(gated_table(allrecs["gated_delta"]) + "\n")
    t = targets(rounds)
    if t:
        title = f", {len(rounds)} rounds" if len(rounds) > 1 else ""
        print(f"### Targets (CPU performance issue{title})\n")
        print(t + "\n")


def summarize_cpu():
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


if __name__ == "__main__":
    main()
