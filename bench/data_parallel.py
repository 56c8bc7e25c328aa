#!/usr/bin/env python3
"""Data-parallel `qkv train` under mpirun (issue 30): agreement with one process, the share of the
all-reduce that overlap hides, and a model of the step time on 2-64 machines.

    python3 bench/data_parallel.py agree   --config configs/shakespeare-char.json --np 2 4 --steps 200
    python3 bench/data_parallel.py overlap --config configs/tatoeba-en-fr.json --steps 40 --repeats 3
    python3 bench/data_parallel.py scale   --from OUT/overlap-<config>.json

agree: one process against N on the same global batch; per-step loss (relative) and final weights
(absolute) differences. overlap: 2 processes on loopback TCP with gradient_sync none (no
communication), after_backward (all of it after backward) and overlap (buckets during backward),
alternated, medians of the per-step times; hidden share = (after - overlap) / (after - none).
scale: ring all-reduce, 2(N-1)/N of the gradient bytes per rank per step, on 10/25/100 Gb/s, with
the measured share hidden behind backward; each machine computes a full batch in the measured
one-process step time (weak scaling: the global batch grows with N).

Runs go to --out (default out/data-parallel); each result is kept as JSON there.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QKV = os.path.join(ROOT, "build", "qkv")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


def train(config, out, np_, steps, threads, sets=()):
    """qkv train on np_ processes (0: plain) with `threads` each; returns the metrics rows."""
    args = [QKV, "train", config, "-o", out, "-q", "--threads", str(threads),
            "--set", f"train.max_iters={steps}", "--set", "train.eval_interval=0",
            "--set", "train.log_interval=1", "--set", "train.checkpoint_interval=0"]
    for s in sets:
        args += ["--set", s]
    if np_:
        args = ["mpirun", "-np", str(np_), "--mca", "btl", "tcp,self", "--bind-to", "none"] + args
    t0 = time.time()
    r = subprocess.run(args, env=ENV, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(args)}\n{r.stdout}{r.stderr}")
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    return [r for r in rows if "loss" in r], time.time() - t0


def weights(path):
    """The f32 parameters of a checkpoint (its optimizer state left out)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__" or k.startswith("optimizer."):
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32)
    return out


def agree(a):
    name = os.path.splitext(os.path.basename(a.config))[0]
    res = {"config": a.config, "steps": a.steps, "sets": a.set, "runs": {}}
    one = os.path.join(a.out, f"{name}-np1")
    rows1, t1 = train(a.config, one, 0, a.steps, a.threads, a.set)
    w1 = weights(os.path.join(one, "checkpoint.safetensors"))
    print(f"{name}: 1 process, {a.steps} steps in {t1:.0f} s; final loss {rows1[-1]['loss']:.6f}")
    for n in a.np:
        d = os.path.join(a.out, f"{name}-np{n}")
        rows, t = train(a.config, d, n, a.steps, max(1, a.threads // min(n, a.threads)), a.set)
        rel = [abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(rows1, rows)]
        w = weights(os.path.join(d, "checkpoint.safetensors"))
        diffs = {k: np.abs(w1[k] - w[k]) for k in w1}
        worst_k = max(diffs, key=lambda k: float(diffs[k].max()))
        total = sum(v.size for v in diffs.values())
        over = {tol: int(sum((v > tol).sum() for v in diffs.values())) for tol in (1e-5, 1e-6)}
        r = {"np": n, "seconds": t, "max_rel_loss_diff": max(rel), "median_rel_loss_diff": statistics.median(rel),
             "max_abs_weight_diff": float(diffs[worst_k].max()), "worst_tensor": worst_k, "weights": total,
             "weights_over_1e-5": over[1e-5], "weights_over_1e-6": over[1e-6]}
        res["runs"][n] = r
        print(f"  {n} processes ({t:.0f} s): loss max rel diff {r['max_rel_loss_diff']:.2e} (median "
              f"{r['median_rel_loss_diff']:.1e}); weights max abs diff {r['max_abs_weight_diff']:.2e} in {worst_k}; "
              f"{over[1e-5]} of {total:,} over 1e-5, {over[1e-6]} over 1e-6")
    json.dump(res, open(os.path.join(a.out, f"agree-{name}{a.tag}.json"), "w"), indent=1)


def overlap(a):
    name = os.path.splitext(os.path.basename(a.config))[0]
    times = {m: [] for m in ("none", "after_backward", "overlap")}
    comm = {m: [] for m in times}
    wait = {m: [] for m in times}
    one_rows, _ = train(a.config, os.path.join(a.out, f"{name}-solo"), 0, a.steps, a.threads, a.set)
    solo = statistics.median([y["elapsed_s"] - x["elapsed_s"] for x, y in zip(one_rows[a.skip:], one_rows[a.skip + 1:])])
    for rep in range(a.repeats):
        for m in times:
            rows, _ = train(a.config, os.path.join(a.out, f"{name}-{m}"), 2, a.steps, max(1, a.threads // 2),
                            list(a.set) + [f"train.gradient_sync={m}"])
            rows = rows[a.skip:]
            times[m].append(statistics.median(r["step_s"] for r in rows))
            if m != "none":
                comm[m].append(statistics.median(r["allreduce_s"] for r in rows))
                wait[m].append(statistics.median(r["allreduce_wait_s"] for r in rows))
            print(f"  repeat {rep}: {m:15s} step {times[m][-1] * 1e3:7.1f} ms", flush=True)
    med = {m: statistics.median(v) for m, v in times.items()}
    params = weights(os.path.join(a.out, f"{name}-overlap", "checkpoint.safetensors"))
    grad_bytes = 4 * (sum(v.size for v in params.values()) + len(params))
    exposed_after, exposed_overlap = med["after_backward"] - med["none"], med["overlap"] - med["none"]
    hidden = (exposed_after - exposed_overlap) / exposed_after if exposed_after > 0 else float("nan")
    res = {"config": a.config, "sets": a.set, "steps": a.steps, "repeats": a.repeats, "step_s": med,
           "solo_step_s": solo, "gradient_bytes": grad_bytes,
           "allreduce_s": {m: statistics.median(v) for m, v in comm.items() if v},
           "allreduce_wait_s": {m: statistics.median(v) for m, v in wait.items() if v},
           "hidden_share": hidden, "cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": ")}
    json.dump(res, open(os.path.join(a.out, f"overlap-{name}{a.tag}.json"), "w"), indent=1)
    print(f"{name}: gradient {grad_bytes / 1e6:.1f} MB per step; 1 process ({a.threads} threads) {solo * 1e3:.1f} ms/step; "
          f"2 processes: none {med['none'] * 1e3:.1f}, after_backward {med['after_backward'] * 1e3:.1f}, "
          f"overlap {med['overlap'] * 1e3:.1f} ms/step")
    print(f"  all-reduce {res['allreduce_s'].get('after_backward', 0) * 1e3:.1f} ms per step after backward, "
          f"{res['allreduce_s'].get('overlap', 0) * 1e3:.1f} ms in overlap mode of which "
          f"{res['allreduce_wait_s'].get('overlap', 0) * 1e3:.1f} ms waited for; hidden share {hidden:.0%}")


def scale(a):
    """Step time on N machines, each with this machine's cores and a full per-machine batch."""
    m = json.load(open(a.source))
    compute = m["solo_step_s"]  # one machine's step on its batch, no communication
    nbytes = m["gradient_bytes"]
    buckets = max(1, round(nbytes / (a.bucket_mb * 2 ** 20)))
    print(f"{m['config']}: {nbytes / 1e6:.1f} MB of gradients in {buckets} buckets, {compute * 1e3:.0f} ms of compute "
          f"per step per machine; ring all-reduce, {a.latency_us:.0f} µs per message; {a.hidden:.0%} of the all-reduce "
          f"hidden behind backward (measured)")
    print("| machines | " + " | ".join(f"{g:g} Gb/s: all-reduce, step, efficiency" for g in a.gbps) + " |")
    print("|---|" + "---|" * len(a.gbps))
    rows = []
    for n in (2, 4, 8, 16, 32, 64):
        cells = []
        for g in a.gbps:
            bw = g * 1e9 / 8
            # ring all-reduce: each rank sends and receives 2(N-1)/N of the bytes, in 2(N-1) messages per bucket
            t_comm = 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * buckets * a.latency_us * 1e-6
            step = compute + (1 - a.hidden) * t_comm
            cells.append(f"{t_comm * 1e3:.0f} ms, {step * 1e3:.0f} ms, {compute / step:.0%}")
            rows.append({"machines": n, "gbps": g, "allreduce_s": t_comm, "step_s": step, "efficiency": compute / step})
        print(f"| {n} | " + " | ".join(cells) + " |")
    json.dump(rows, open(a.source.replace(".json", "-scale.json"), "w"), indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("agree", "overlap"):
        s = sub.add_parser(name)
        s.add_argument("--config", required=True)
        s.add_argument("--steps", type=int, default=200)
        s.add_argument("--threads", type=int, default=2, help="threads of the one process (split among N)")
        s.add_argument("--set", action="append", default=[], help="config override, e.g. train.dtype=f32")
        s.add_argument("--tag", default="", help="suffix of the result file")
        s.add_argument("--out", default=os.path.join(ROOT, "out", "data-parallel"))
    sub.choices["agree"].add_argument("--np", type=int, nargs="+", default=[2, 4])
    sub.choices["overlap"].add_argument("--repeats", type=int, default=3)
    sub.choices["overlap"].add_argument("--skip", type=int, default=3, help="first steps left out of the medians")
    s = sub.add_parser("scale")
    s.add_argument("--from", dest="source", required=True)
    s.add_argument("--gbps", type=float, nargs="+", default=[10, 25, 100])
    s.add_argument("--latency-us", type=float, default=30.0)
    s.add_argument("--hidden", type=float, default=0.0, help="share of the all-reduce hidden (from `overlap`)")
    s.add_argument("--bucket-mb", type=float, default=4.0)
    a = p.parse_args()
    if a.cmd != "scale":
        os.makedirs(a.out, exist_ok=True)
    {"agree": agree, "overlap": overlap, "scale": scale}[a.cmd](a)


if __name__ == "__main__":
    main()
