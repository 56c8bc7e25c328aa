#!/usr/bin/env python3
"""An FFN's first layer, Dropout(gelu(x W1^T + b1)), in qkv and in PyTorch, side by side, on this machine.

  * qkv:     build/bench/qkv_bias_activation_bench — the bias filled into the GEMM's output and
             accumulated into (linear with its bias, then gelu with its dropout: the FFN before), and
             the bias added in the activation's pass (the GEMM without it: nn::feed_forward now);
  * PyTorch: F.dropout(F.gelu(F.linear(x, W1, b1)), 0.1), eager (addmm with the bias as its beta
             term, then two kernels), at its best settings here: OMP_WAIT_POLICY=PASSIVE,
             torch.set_num_threads(T).
f32, dropout 0.1 (training). Forward is timed under no-grad, forward+backward with x, W1 and b1
requiring grad; medians of the benchmark's repetitions (qkv) and of R timed calls after warm-up
(PyTorch). The runs alternate qkv and PyTorch; the table shows the median run and the ratios
(> 1: the fused form / qkv faster).

  bench/bias_activation_vs_pytorch.py --threads 2 --runs 3
  bench/bias_activation_vs_pytorch.py --torch-python /usr/bin/python3
"""
import argparse
import json
import statistics
import time

import gbench  # qkv's side: its Google Benchmark program's medians

SHAPES = [(8192, 384, 1536), (2048, 768, 3072)]


def torch_worker(threads, repeats):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    out = {}
    for rows, d, hidden in SHAPES:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(rows, d, generator=gen)
        w = torch.randn(hidden, d, generator=gen) * 0.05
        b = torch.randn(hidden, generator=gen)
        dy = torch.randn(rows, hidden, generator=gen)
        for backward in (False, True):
            xx, ww, bb = (t.clone().requires_grad_(backward) for t in (x, w, b))

            def once():
                if backward:
                    y = F.dropout(F.gelu(F.linear(xx, ww, bb)), 0.1)
                    y.backward(dy)
                    xx.grad = ww.grad = bb.grad = None
                else:
                    with torch.no_grad():
                        F.dropout(F.gelu(F.linear(xx, ww, bb)), 0.1)

            for _ in range(3):
                once()
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                once()
                times.append(time.perf_counter() - t0)
            out[f"{rows}x{d}x{hidden}/{'fwd+bwd' if backward else 'fwd'}"] = statistics.median(times) * 1e3
    out["version"] = torch.__version__
    return out


def qkv_run(bench, threads, repeats):
    out = {}
    for name, b in gbench.medians(bench, threads, repeats, args=["--benchmark_filter=^bm/"]).items():
        # bm/bias_in_activation_forward_backward/8192/384/1536/real_time
        _, form, rows, d, hidden = name.split("/")[:5]
        fused = form.startswith("bias_in_activation")
        kind = "fwd+bwd" if "backward" in form else "fwd"
        out[f"{rows}x{d}x{hidden}/{kind}/{'fused' if fused else 'gemm'}"] = b["real_time"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gbench.add_arguments(ap, "qkv_bias_activation_bench", repeats=10)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(torch_worker(a.threads, a.repeats)))
        return
    qkv_runs, torch_runs = [], []
    for _ in range(a.runs):
        qkv_runs.append(qkv_run(a.bench, a.threads, 5))
        torch_runs.append(gbench.torch_run(__file__, a.torch_python, a.threads, a.repeats))
    med = gbench.median
    print(f"Dropout(gelu(x W1^T + b1)), f32, dropout 0.1, {a.threads} threads; PyTorch {torch_runs[0]['version']}; "
          f"medians of {a.runs} alternated runs (ms)")
    print(f"{'rows x d x hidden':>18} {'pass':>8} {'bias in GEMM':>13} {'in act.':>8} {'PyTorch':>8} "
          f"{'GEMM/act.':>10} {'PyTorch/qkv':>12}")
    for rows, d, hidden in SHAPES:
        for kind in ("fwd", "fwd+bwd"):
            key = f"{rows}x{d}x{hidden}"
            c, f = med(qkv_runs, f"{key}/{kind}/gemm"), med(qkv_runs, f"{key}/{kind}/fused")
            t = med(torch_runs, f"{key}/{kind}")
            print(f"{key:>18} {kind:>8} {c:>13.3f} {f:>8.3f} {t:>8.3f} {c / f:>9.2f}x {t / f:>11.2f}x")


if __name__ == "__main__":
    main()
