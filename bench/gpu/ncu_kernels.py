#!/usr/bin/env python3
"""Summarise an Nsight Compute CSV (`ncu --metrics gpu__time_duration.sum --csv --page raw ...`):
kernel launches grouped by name, their count and total GPU time, largest first.

    python3 bench/gpu/ncu_kernels.py ncu_mlp_4096.csv
"""
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = None
for i, r in enumerate(rows):
    if "Kernel Name" in r:
        hdr = r; start = i + 1; break
if hdr is None:
    print("no header"); sys.exit()
ki = hdr.index("Kernel Name"); ti = hdr.index("gpu__time_duration.sum")
data = []
for r in rows[start:]:
    if len(r) <= ti: continue
    try: t = float(r[ti].replace(",", ""))
    except ValueError: continue   # units row
    data.append((r[ki][:70], t))
print(len(data), "kernels; total", round(sum(t for _, t in data) / 1e3, 1), "us of GPU time (gpu__time_duration.sum, ns)")
agg = collections.OrderedDict()
for k, t in data:
    a = agg.setdefault(k, [0, 0.0]); a[0] += 1; a[1] += t
for k, (n, t) in sorted(agg.items(), key=lambda x: -x[1][1])[:30]:
    print(f"{n:4d} {t/1e3:9.1f} us  {k}")
