#!/usr/bin/env python3
"""qkv's scaled_dot_product_attention side by side with PyTorch's, on this machine.

For each sequence length L (B=1, H=8, d=64, f32), in FRESH processes:
  * qkv:     `QKV bench attention --seq-len L --heads 8 --head-dim 64 [--causal] --repeats R --json`
  * PyTorch: this script re-run as a worker under each --torch-python, timing the "manual"
             attention of ../shared/pytorch-reference/attn_bench.py (softmax(Q Kᵀ/√d [masked]) V,
             what PyTorch 1.13 has: it has no F.scaled_dot_product_attention) with PyTorch at its
             best settings here: OPENBLAS_CORETYPE=Cooperlake OMP_WAIT_POLICY=PASSIVE
             OMP_NUM_THREADS=T OPENBLAS_NUM_THREADS=T, torch.set_num_threads(T).
Forward is timed under no-grad, forward+backward with q, k, v requiring grad; each is the median of
R timed calls after warm-up. Memory, for both: peak RSS (ru_maxrss) minus the RSS once the inputs
(q, k, v, the output gradient, and for PyTorch the causal mask) are allocated, in a fresh process.
Each (impl, L, mask) process is run --runs times, alternating qkv and PyTorch, and the median of
the runs is reported.

  bench/attention_vs_pytorch.py --qkv build/qkv --both --runs 3
  bench/attention_vs_pytorch.py --max-len 2048 --causal
  bench/attention_vs_pytorch.py --torch-python /usr/bin/python3 --torch-python ~/.pyenv/shims/python3
  bench/attention_vs_pytorch.py --torch-python ~/.pyenv/shims/python3 --torch-impl manual sdpa

--torch-impl sdpa times torch.nn.functional.scaled_dot_product_attention instead (PyTorch >= 2.0,
whose CPU backend has a fused flash-attention kernel); every (--torch-python, --torch-impl) pair
gets its own columns.
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import bench_progress

B, H, D = 1, 8, 64
DEFAULT_LENS = [128, 256, 512, 1024, 2048, 4096]


def default_repeats(L):
    # as attn_bench.py does
    return 10 if L <= 1024 else (4 if L <= 2048 else 3)


# ---------------------------------------------------------------------------------------------
# PyTorch worker (runs under the --torch-python interpreter; keep it plain Python 3.8+)


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def torch_worker(L, causal, threads, repeats, warmup, impl):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    mask = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1) if causal else None

    def manual(q, k, v):
        # q, k, v: (B, H, L, D); mask: (L, L) bool, True = masked out (future position)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        return F.softmax(s, dim=-1) @ v

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    if impl == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        print(json.dumps({"impl": "torch", "version": torch.__version__, "unsupported":
                          f"torch {torch.__version__} has no F.scaled_dot_product_attention"}), flush=True)
        return
    attention = sdpa if impl == "sdpa" else manual

    q, k, v = (torch.randn(B, H, L, D, requires_grad=True) for _ in range(3))
    grad = torch.randn(B, H, L, D)
    base = rss_mib()

    def run(backward):
        ts = []
        for i in range(repeats + warmup):
            t0 = time.perf_counter()
            if backward:
                attention(q, k, v).backward(grad)
                q.grad = k.grad = v.grad = None
            else:
                with torch.no_grad():
                    attention(q, k, v)
            if i >= warmup:
                ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)

    fwd = run(False)
    fwdbwd = run(True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    print(json.dumps({
        "impl": "torch", "torch_impl": impl, "version": torch.__version__, "seq_len": L, "causal": causal, "threads": threads,
        "forward_ms": fwd, "forward_backward_ms": fwdbwd, "peak_extra_mib": peak,
        "blas": os.environ.get("OPENBLAS_CORETYPE", ""),
    }), flush=True)


# ---------------------------------------------------------------------------------------------
# Driver


def run_json(cmd, env):
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    for line in reversed(p.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            r["wall_s"] = time.time() - t0
            return r
    raise SystemExit(f"no JSON from: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")


def qkv_run(args, L, causal, repeats):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(args.threads)
    cmd = [args.qkv, "bench", "attention", "--seq-len", str(L), "--heads", str(H), "--head-dim", str(D),
           "--repeats", str(repeats), "--threads", str(args.threads), "--json"]
    if causal:
        cmd.append("--causal")
    return run_json(cmd, env)


def torch_run(args, variant, L, causal, repeats):
    py, impl = variant
    env = dict(os.environ)
    env.update({"OPENBLAS_CORETYPE": args.openblas_coretype, "OMP_WAIT_POLICY": "PASSIVE",
                "OMP_NUM_THREADS": str(args.threads), "OPENBLAS_NUM_THREADS": str(args.threads),
                "MKL_NUM_THREADS": str(args.threads)})
    cmd = [py, os.path.abspath(__file__), "--torch-worker", "--seq-len", str(L), "--threads", str(args.threads),
           "--repeats", str(repeats), "--warmup", str(args.warmup), "--torch-impl", impl]
    if causal:
        cmd.append("--causal")
    return run_json(cmd, env)


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default="./build/qkv", help="the qkv binary (default ./build/qkv)")
    ap.add_argument("--torch-python", action="append", default=None,
                    help="a Python with torch; repeat to compare several (default /usr/bin/python3, PyTorch 1.13)")
    ap.add_argument("--torch-impl", nargs="+", choices=["manual", "sdpa"], default=["manual"],
                    help="manual: softmax(Q K^T/sqrt(d)) V as attn_bench.py (default); sdpa: F.scaled_dot_product_attention")
    ap.add_argument("--lens", type=int, nargs="+", default=DEFAULT_LENS, help="sequence lengths")
    ap.add_argument("--max-len", type=int, default=None, help="drop lengths above this")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--causal", action="store_true", help="causal only (default: full only)")
    g.add_argument("--both", action="store_true", help="full and causal")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per (impl, L, mask); the median is shown")
    ap.add_argument("--repeats", type=int, default=0, help="timed calls per process (default 10/4/3 by L)")
    ap.add_argument("--warmup", type=int, default=2, help="PyTorch warm-up calls (qkv bench does one)")
    ap.add_argument("--openblas-coretype", default="Cooperlake",
                    help="OPENBLAS_CORETYPE for PyTorch (Cooperlake = AVX-512 kernels; the env's Haswell halves it)")
    ap.add_argument("--skip-qkv", action="store_true")
    ap.add_argument("--skip-torch", action="store_true", help="qkv only (e.g. at lengths PyTorch 1.13 cannot hold)")
    ap.add_argument("--json-out", help="write every raw result here")
    # worker mode
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seq-len", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.torch_worker:
        torch_worker(args.seq_len, args.causal, args.threads, args.repeats or default_repeats(args.seq_len),
                     args.warmup, args.torch_impl[0])
        return

    pythons = [] if args.skip_torch else [(py, impl) for py in (args.torch_python or ["/usr/bin/python3"]) for impl in args.torch_impl]
    lens = [L for L in args.lens if args.max_len is None or L <= args.max_len]
    masks = [False, True] if args.both else [args.causal]
    if not args.skip_qkv and not os.access(args.qkv, os.X_OK):
        raise SystemExit(f"{args.qkv}: not an executable (build qkv, or pass --qkv PATH)")

    raw = []
    rows = []
    labels = []
    bench_progress.start(len(masks) * len(lens) * args.runs * ((not args.skip_qkv) + len(pythons)), "attention")
    for causal in masks:
        for L in lens:
            reps = args.repeats or default_repeats(L)
            qr, tr = [], {py: [] for py in pythons}
            for _ in range(args.runs):
                if not args.skip_qkv:
                    with bench_progress.measuring(f"qkv L={L}{' causal' if causal else ''}"):
                        qr.append(qkv_run(args, L, causal, reps))
                for py in list(pythons):
                    with bench_progress.measuring(f"torch {py[1]} L={L}{' causal' if causal else ''}"):
                        r = torch_run(args, py, L, causal, reps)
                    if "unsupported" in r:
                        print(f"# skipping {py[0]} {py[1]}: {r['unsupported']}", file=sys.stderr)
                        pythons.remove(py)
                        del tr[py]
                    else:
                        tr[py].append(r)
            raw += qr + [r for py in pythons for r in tr[py]]
            rows.append((L, causal, qr, tr))
            row = format_row(L, causal, qr, tr, pythons)
            if not labels:
                labels = header(pythons, tr)
                bench_progress.write(labels[0])
                bench_progress.write(labels[1])
            bench_progress.write(row)
    bench_progress.close()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(raw, f, indent=1)


def header(pythons, tr):
    # ratio = torch time / qkv time (> 1: qkv is faster); MiB = peak RSS growth beyond the inputs
    def name(variant):
        py, impl = variant
        return "torch " + (tr[variant][0]["version"] if tr[variant] else py) + ("" if impl == "manual" else " " + impl)

    cols = ["L", "causal", "qkv fwd ms"]
    for py in pythons:
        cols += [f"{name(py)} fwd ms", "ratio"]
    cols += ["qkv fwd+bwd ms"]
    for py in pythons:
        cols += [f"{name(py)} fwd+bwd ms", "ratio"]
    cols += ["qkv peak MiB"] + [f"{name(py)} peak MiB" for py in pythons]
    line = "| " + " | ".join(cols) + " |"
    return line, "|" + "|".join("---" if c == "causal" else "---:" for c in cols) + "|"


def format_row(L, causal, qr, tr, pythons):
    def ms(x):
        return f"{x:.2f}" if x < 100 else f"{x:.1f}"

    def ratio(t, q):
        return f"{t / q:.2f}×" if q > 0 else "—"

    qf = med(qr, "forward_ms") if qr else 0.0
    qb = med(qr, "forward_backward_ms") if qr else 0.0
    # The same measure for both: peak RSS growth beyond the inputs (outputs and gradients included).
    qm = med(qr, "peak_rss_growth_mib" if qr and "peak_rss_growth_mib" in qr[0] else "peak_extra_mib") if qr else 0.0
    cols = [str(L), "yes" if causal else "no", ms(qf) if qr else "—"]
    for py in pythons:
        tf = med(tr[py], "forward_ms")
        cols += [ms(tf), ratio(tf, qf)]
    cols += [ms(qb) if qr else "—"]
    for py in pythons:
        tb = med(tr[py], "forward_backward_ms")
        cols += [ms(tb), ratio(tb, qb)]
    cols += [f"{qm:.0f}" if qr else "—"] + [f"{med(tr[py], 'peak_extra_mib'):.0f}" for py in pythons]
    return "| " + " | ".join(cols) + " |"


if __name__ == "__main__":
    main()
