#!/usr/bin/env python3
"""A language model's output layer and its loss, forward and backward, in qkv and in PyTorch, side by
side on this machine: time and memory.

  * qkv:     build/bench/qkv_linear_cross_entropy_bench — cross_entropy(linear(x, W), y) (the [N, V]
             logits and their gradient written whole) and linear_cross_entropy(x, W, y) (ops/loss.h:
             a chunk of rows at a time, the gradients made as each chunk's logits are);
  * PyTorch: F.cross_entropy(F.linear(x, W), y), eager, at its best settings here:
             OMP_WAIT_POLICY=PASSIVE, torch.set_num_threads(T). (PyTorch has no fused form of its own;
             Liger-Kernel's and Apple's cut cross-entropy are Triton kernels for GPUs.)
f32, mean over the targets, x and W requiring grad. Shapes (N tokens, d, V): GPT-2 small's head on
2,048 tokens and the translation Transformer's on 4,096 (d 512, V 8,000).

Time: medians of the benchmark's repetitions (qkv) and of R timed steps after a warm-up (PyTorch); the
runs alternate qkv and PyTorch, the table shows the median run. Memory: each form's peak resident set
in a process of its own (os.wait4's ru_maxrss: the inputs, their gradients, the library and whatever
the step holds at its peak), one step after a warm-up one.

  bench/linear_cross_entropy_vs_pytorch.py --threads 2 --runs 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import bench_progress  # a bar over the measurements, on stderr
import gbench  # qkv's side: its Google Benchmark program's medians

SHAPES = [(2048, 768, 50257), (4096, 512, 8000)]


def torch_inputs(N, d, V):
    import torch
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, d, generator=gen).requires_grad_()
    w = (torch.randn(V, d, generator=gen) * 0.02).requires_grad_()
    y = (torch.arange(N) * 7919) % V
    return x, w, y


def torch_step(x, w, y):
    import torch.nn.functional as F
    F.cross_entropy(F.linear(x, w), y).backward()
    x.grad = w.grad = None


def torch_worker(threads, repeats, shape):
    import torch
    torch.set_num_threads(threads)
    out = {"version": torch.__version__}
    for N, d, V in [shape] if shape else SHAPES:
        x, w, y = torch_inputs(N, d, V)
        torch_step(x, w, y)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch_step(x, w, y)
            times.append(time.perf_counter() - t0)
        out[f"{N}x{d}x{V}"] = statistics.median(times) * 1e3
    return out


def qkv_run(bench, threads, repeats):
    out = {}
    for name, b in gbench.medians(bench, threads, repeats).items():
        _, form, N, d, V = name.split("/")[:5]  # bm/fused/2048/768/50257/real_time
        out[f"{N}x{d}x{V}/{form}"] = b["real_time"]
        out[f"{N}x{d}x{V}/{form}/peak_MB"] = b["peak_MB"]
    return out


def peak_rss_mb(cmd, env):
    """The child's peak resident set, MB."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gbench.add_arguments(ap, "qkv_linear_cross_entropy_bench", repeats=3)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        shape = tuple(int(v) for v in a.shape.split("x")) if a.shape else None
        print(json.dumps(torch_worker(a.threads, a.repeats, shape)))
        return
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(a.threads))
    qkv_runs, torch_runs = [], []
    bench_progress.start(2 * a.runs + 3 * len(SHAPES), "linear_cross_entropy")
    for run in range(a.runs):
        with bench_progress.measuring(f"qkv, run {run + 1}"):
            qkv_runs.append(qkv_run(a.bench, a.threads, 3))
        with bench_progress.measuring(f"PyTorch, run {run + 1}"):
            torch_runs.append(gbench.torch_run(__file__, a.torch_python, a.threads, a.repeats))
    med = gbench.median
    bench_progress.write(f"cross_entropy(x Wᵀ, y) forward + backward, f32, {a.threads} threads; PyTorch "
                         f"{torch_runs[0]['version']}; medians of {a.runs} alternated runs (ms; peak RSS in MB, a "
                         "process a form)")
    bench_progress.write(f"{'N x d x V':>18} {'unfused':>9} {'fused':>9} {'PyTorch':>9} {'unf./fused':>11} "
                         f"{'PyTorch/fused':>14} {'tensors MB unf./fused':>22} {'RSS MB unf./fused/PyTorch':>26}")
    for N, d, V in SHAPES:
        key = f"{N}x{d}x{V}"
        u, f, t = med(qkv_runs, f"{key}/unfused"), med(qkv_runs, f"{key}/fused"), med(torch_runs, key)
        pu, pf = qkv_runs[0][f"{key}/unfused/peak_MB"], qkv_runs[0][f"{key}/fused/peak_MB"]
        rss = []
        for form in ("unfused", "fused"):
            with bench_progress.measuring(f"qkv {form} {key}, its resident set"):
                rss.append(peak_rss_mb([a.bench, f"--benchmark_filter=^bm/{form}/{N}/{d}/{V}/",
                                        "--benchmark_min_time=0"], env))
        with bench_progress.measuring(f"PyTorch {key}, its resident set"):
            rss.append(peak_rss_mb([a.torch_python, __file__, "--worker", "--threads", str(a.threads), "--repeats", "1",
                                    "--shape", key], env))
        bench_progress.write(f"{key:>18} {u:>9.1f} {f:>9.1f} {t:>9.1f} {u / f:>10.2f}x {t / f:>13.2f}x "
                             f"{pu:>10.0f} / {pf:>8.0f} {rss[0]:>9.0f} / {rss[1]:>6.0f} / {rss[2]:>6.0f}")
    bench_progress.close()


if __name__ == "__main__":
    main()
