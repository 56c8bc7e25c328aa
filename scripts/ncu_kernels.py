#!/usr/bin/env python3
"""Every kernel's GPU time from Nsight Compute's CSV (`ncu --csv --metrics gpu__time_duration.sum …`) on
stdin: a line a kernel — calls, total and mean µs, its share — the largest first (scripts/gpu_session.sh
breakdown: where one call's time goes, pre-passes and epilogues included). Other lines (the program's own
output, ncu's ==PROF== notes) are passed over."""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    """A kernel's name without its namespaces and argument list: flash_wgmma_forward_kernel<bf16, 128, 64, false>"""
    name = re.sub(r"qkv::kernels::cuda::(\w+::)*|\(anonymous namespace\)::|_GLOBAL__N__\w+::", "", name)
    name = re.sub(r"^void\s+|\([^()]*\)\s*$", "", name)  # the return type and the argument list
    return name.replace("__nv_bfloat16", "bf16").replace("__half", "f16")[:110]


def main():
    rows = [r for r in csv.reader(line for line in sys.stdin if line.startswith('"'))]
    if not rows:
        print("ncu_kernels: no CSV rows on stdin", file=sys.stderr)
        return 1
    head, rows = rows[0], rows[1:]
    col = {k: i for i, k in enumerate(head)}
    need = ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit")
    if any(k not in col for k in need):
        print(f"ncu_kernels: the CSV has no {need} columns: {head}", file=sys.stderr)
        return 1
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}
    calls, total = defaultdict(int), defaultdict(float)
    for r in rows:
        if r[col["Metric Name"]] != "gpu__time_duration.sum":
            continue
        unit = r[col["Metric Unit"]]
        if unit not in scale:
            print(f"ncu_kernels: a duration in {unit!r}, not a unit of time this reads", file=sys.stderr)
            return 1
        us = float(r[col["Metric Value"]].replace(",", "")) * scale[unit]
        k = short(r[col["Kernel Name"]])
        calls[k] += 1
        total[k] += us
    whole = sum(total.values()) or 1.0
    print(f"{'kernel':110s} {'calls':>5s} {'total µs':>10s} {'µs/call':>9s} {'share':>6s}")
    for k in sorted(total, key=total.get, reverse=True):
        print(f"{k:110s} {calls[k]:5d} {total[k]:10.1f} {total[k] / calls[k]:9.1f} {100 * total[k] / whole:5.1f}%")
    print(f"{'all kernels':110s} {sum(calls.values()):5d} {whole:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
