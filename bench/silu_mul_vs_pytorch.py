#!/usr/bin/env python3
"""SwiGLU's product silu(gate) * up (Llama's MLP) in qkv and in PyTorch, side by side, on this machine.

  * qkv:     build/bench/qkv_silu_mul_bench — the three-op composition (silu = x·σ(x), then the
             product) and ops/activation.h's silu_mul (one op, forward and backward);
  * PyTorch: F.silu(gate) * up, eager (two kernels forward, PyTorch's own silu), with PyTorch at its
             best settings here: OMP_WAIT_POLICY=PASSIVE, torch.set_num_threads(T).
Forward is timed under no-grad, forward+backward with gate and up requiring grad; medians of the
benchmark's repetitions (qkv) and of R timed calls after warm-up (PyTorch). The runs alternate
qkv and PyTorch; the table shows the median run and the ratios PyTorch / qkv (> 1: qkv faster).

  bench/silu_mul_vs_pytorch.py --threads 2 --runs 3
  bench/silu_mul_vs_pytorch.py --torch-python /usr/bin/python3
  bench/silu_mul_vs_pytorch.py --threads 2 --busy [--no-budget]

--busy keeps one core busy (a Python `while True: pass`) through every run: ops called one by one,
as a model written in Python calls them, beside another process (qkv's thread budget between ops,
core/thread_budget.h; --no-budget sets QKV_THREAD_BUDGET=off, the fixed count of before).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import gbench  # qkv's side: its Google Benchmark program's medians

SHAPES = [(512, 4864), (64, 11008)]


def torch_worker(threads, repeats):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    out = {}
    for rows, n in SHAPES:
        gen = torch.Generator().manual_seed(0)
        g = torch.randn(rows, n, generator=gen) * 2
        u = torch.randn(rows, n, generator=gen)
        dy = torch.randn(rows, n, generator=gen)
        for backward in (False, True):
            gg, uu = g.clone().requires_grad_(backward), u.clone().requires_grad_(backward)

            def once():
                if backward:
                    y = F.silu(gg) * uu
                    y.backward(dy)
                    gg.grad = None
                    uu.grad = None
                else:
                    with torch.no_grad():
                        F.silu(gg) * uu

            for _ in range(3):
                once()
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                once()
                times.append(time.perf_counter() - t0)
            out[f"{rows}x{n}/{'fwd+bwd' if backward else 'fwd'}"] = statistics.median(times) * 1e3
    out["version"] = torch.__version__
    return out


def qkv_run(bench, threads, repeats, budget=True):
    out, env = {}, None if budget else {"QKV_THREAD_BUDGET": "off"}
    for name, b in gbench.medians(bench, threads, repeats, env=env).items():
        # bm/silu_mul_forward_backward/512/4864/real_time
        _, form, rows, n = name.split("/")[:4]
        fused = form.startswith("silu_mul")
        kind = "fwd+bwd" if "backward" in form else "fwd"
        out[f"{rows}x{n}/{kind}/{'silu_mul' if fused else 'composed'}"] = b["real_time"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gbench.add_arguments(ap, "qkv_silu_mul_bench", repeats=20)
    ap.add_argument("--busy", action="store_true", help="one core kept busy by another process throughout")
    ap.add_argument("--no-budget", action="store_true", help="qkv with QKV_THREAD_BUDGET=off (fixed threads)")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(torch_worker(a.threads, a.repeats)))
        return
    qkv_runs, torch_runs = [], []
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if a.busy else None
    try:
        for _ in range(a.runs):
            qkv_runs.append(qkv_run(a.bench, a.threads, 5, budget=not a.no_budget))
            torch_runs.append(gbench.torch_run(__file__, a.torch_python, a.threads, a.repeats))
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
    med = gbench.median
    print(f"silu(gate) * up, f32, {a.threads} threads; PyTorch {torch_runs[0]['version']}; "
          f"medians of {a.runs} alternated runs (ms)" + ("; one core busy" if a.busy else "") +
          ("; qkv's thread budget off" if a.no_budget else ""))
    print(f"{'shape':>12} {'pass':>8} {'qkv 3 ops':>10} {'silu_mul':>9} {'PyTorch':>8} {'3 ops/1':>8} {'PyTorch/qkv':>12}")
    for rows, n in SHAPES:
        for kind in ("fwd", "fwd+bwd"):
            c, f = med(qkv_runs, f"{rows}x{n}/{kind}/composed"), med(qkv_runs, f"{rows}x{n}/{kind}/silu_mul")
            t = med(torch_runs, f"{rows}x{n}/{kind}")
            shape = f"{rows}x{n}"
            print(f"{shape:>12} {kind:>8} {c:>10.3f} {f:>9.3f} {t:>8.3f} {c / f:>7.2f}x {t / f:>11.2f}x")


if __name__ == "__main__":
    main()
