"""qkv's side of a *_vs_pytorch.py comparison: one run of a bench/ Google Benchmark program, its medians.

    gbench.medians(bench, threads=2, repeats=5)
      → {"bm/fused/2048/768/50257/real_time": {"real_time": …, "peak_MB": …, …}, …}

Each benchmark repeated `repeats` times in the one process, aggregates only; OMP_NUM_THREADS=threads and
OMP_WAIT_POLICY=PASSIVE, as PyTorch is run beside it; `env` adds variables, `args` flags
(--benchmark_filter=…)."""
import json
import os
import subprocess


def medians(bench, threads, repeats, env=None, args=()):
    environ = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE", **(env or {}))
    r = subprocess.run([bench, f"--benchmark_repetitions={repeats}", "--benchmark_report_aggregates_only=true",
                        "--benchmark_format=json", *args], env=environ, capture_output=True, text=True, check=True)
    return {b["run_name"]: b for b in json.loads(r.stdout)["benchmarks"] if b.get("aggregate_name") == "median"}
