"""The two sides of a *_vs_pytorch.py comparison over a bench/ Google Benchmark program.

qkv's side, one run of the program, its medians:

    gbench.medians(bench, threads=2, repeats=5)
      → {"bm/fused/2048/768/50257/real_time": {"real_time": …, "peak_MB": …, …}, …}

Each benchmark repeated `repeats` times in the one process, aggregates only; OMP_NUM_THREADS=threads and
OMP_WAIT_POLICY=PASSIVE, as PyTorch is run beside it; `env` adds variables, `args` flags
(--benchmark_filter=…).

PyTorch's side, the script itself run again with --worker under --torch-python (its own process, at
PyTorch's best here: OMP_WAIT_POLICY=PASSIVE, OMP_NUM_THREADS=threads), which prints its timings as JSON:

    gbench.add_arguments(ap, "qkv_silu_mul_bench", repeats=20)   # --bench, --torch-python, --threads, …
    gbench.torch_run(__file__, a.torch_python, a.threads, a.repeats)  → the worker's JSON
    gbench.median(runs, key)                                          → the median of run[key] over the runs
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def medians(bench, threads, repeats, env=None, args=()):
    environ = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE", **(env or {}))
    r = subprocess.run([bench, f"--benchmark_repetitions={repeats}", "--benchmark_report_aggregates_only=true",
                        "--benchmark_format=json", *args], env=environ, capture_output=True, text=True, check=True)
    return {b["run_name"]: b for b in json.loads(r.stdout)["benchmarks"] if b.get("aggregate_name") == "median"}


def add_arguments(ap, bench, repeats):
    """The flags every such comparison takes: --bench (build/bench/`bench`), --torch-python, --threads,
    --runs (alternated qkv / PyTorch runs), --repeats (PyTorch's timed calls a run), and the hidden --worker."""
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "bench", bench))
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)


def torch_run(script, torch_python, threads, repeats, *args):
    """One run of `script --worker` under `torch_python` (PyTorch at its best here) → the JSON it prints."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads))
    cmd = [torch_python, script, "--worker", "--threads", str(threads), "--repeats", str(repeats), *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:  # (no module named torch: pip install torch, or --torch-python /usr/bin/python3)
        sys.exit(f"PyTorch's side failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def median(runs, key):
    """The median over `runs` (one dict a run) of run[key]."""
    return statistics.median(run[key] for run in runs)
