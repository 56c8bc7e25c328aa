#!/usr/bin/env python3
"""oneDNN (qkv::kernels::cpu::sgemm) vs OpenBLAS cblas_sgemm, side by side, from qkv_gemm_bench.

Runs build/bench/qkv_gemm_bench three times, each library in its own process (their thread pools
spin against each other in one process):
  1. qkv (oneDNN)                                   --benchmark_filter='^qkv/'
  2. OpenBLAS with OPENBLAS_CORETYPE=Haswell        (this environment's default: AVX2 kernels)
  3. OpenBLAS with OPENBLAS_CORETYPE=Cooperlake     (AVX-512 kernels: the fair comparison)
--runs times, alternating the three so that slow drifts of this noisy machine hit all of them, and
prints the median GFLOP/s of every shape over the runs (and repetitions) as a Markdown table.

  bench/gemm_peak.py --bench build/bench/qkv_gemm_bench --runs 3
  bench/gemm_peak.py --filter 'square|attn_qk'
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def run(bench, lib_filter, user_filter, reps, min_time, env_extra):
    env = dict(os.environ)
    env.update(env_extra)
    filt = lib_filter + (".*(" + user_filter + ")" if user_filter else "")
    cmd = [bench, f"--benchmark_filter={filt}", "--benchmark_format=json", f"--benchmark_repetitions={reps}",
           f"--benchmark_min_time={min_time}"]
    print("#", " ".join(f"{k}={v}" for k, v in env_extra.items()), " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{bench} failed ({p.returncode})")
    out = json.loads(p.stdout)
    res = {}
    for b in out["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        key = re.sub(r"^(qkv|openblas)/", "", b["run_name"]).replace("/real_time", "")
        res.setdefault(key, []).append(b["GFLOP/s"])
    return res, out.get("context", {})


def merge(acc, res):
    for k, v in res.items():
        acc.setdefault(k, []).extend(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="./build/bench/qkv_gemm_bench")
    ap.add_argument("--filter", default="", help="regex on the shape part of the names")
    ap.add_argument("--runs", type=int, default=3, help="processes per library, alternating")
    ap.add_argument("--repetitions", type=int, default=1, help="--benchmark_repetitions per process")
    ap.add_argument("--min-time", default="0.3", help="--benchmark_min_time per repetition (seconds)")
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS for all three")
    args = ap.parse_args()

    t = {"OMP_NUM_THREADS": str(args.threads)}
    qkv, hsw, cpl = {}, {}, {}
    ctx_h = ctx_c = {}
    for _ in range(args.runs):
        merge(qkv, run(args.bench, "^qkv/", args.filter, args.repetitions, args.min_time, t)[0])
        r, ctx_h = run(args.bench, "^openblas/", args.filter, args.repetitions, args.min_time,
                       {**t, "OPENBLAS_CORETYPE": "Haswell"})
        merge(hsw, r)
        r, ctx_c = run(args.bench, "^openblas/", args.filter, args.repetitions, args.min_time,
                       {**t, "OPENBLAS_CORETYPE": "Cooperlake"})
        merge(cpl, r)
    qkv, hsw, cpl = ({k: statistics.median(v) for k, v in d.items()} for d in (qkv, hsw, cpl))
    print(f"OpenBLAS cores: {ctx_h.get('openblas_core', '?')} / {ctx_c.get('openblas_core', '?')}; "
          f"{args.threads} threads; GFLOP/s, median of {args.runs} processes x {args.repetitions} repetitions")
    print()
    print("| shape (what, M,N,K, op, threads) | qkv (oneDNN) | OpenBLAS Haswell | OpenBLAS Cooperlake | oneDNN / OB-Cooperlake |")
    print("|---|---:|---:|---:|---:|")
    for k, g in qkv.items():
        h, c = hsw.get(k, float("nan")), cpl.get(k, float("nan"))
        print(f"| {k} | {g:.0f} | {h:.0f} | {c:.0f} | {g / c:.2f}× |")


if __name__ == "__main__":
    main()
