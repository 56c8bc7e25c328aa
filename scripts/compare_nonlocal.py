#!/usr/bin/env python3
"""Issue 23's comparison: the same ConvNet with 0, 1 and 2 non-local blocks, several seeds each, at
one training budget (the same number of steps of the same batch size), on Fashion-MNIST.

For every config × seed it runs `qkv train CONFIG --set train.max_iters=N --set
train.lr_decay_iters=N --set train.seed=S -o OUT/NAME-sS`, times it, then `qkv eval -m
OUT/NAME-sS/model.safetensors --json` on the 10,000 test images, and prints a Markdown table:
test accuracy (mean ± sample standard deviation, min–max), parameters, training minutes and
inference images/s. Everything measured is kept in OUT/results.json, so a cut-off run resumes
where it stopped (finished pairs are not trained again).

  scripts/compare_nonlocal.py --steps 1500 --seeds 1 2 3 -o out/nonlocal-compare
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = [("0 non-local blocks", "configs/fashion-mnist.json"),
           ("1 non-local block (stage 1, 14×14)", "configs/fashion-mnist-nonlocal.json"),
           ("2 non-local blocks (stages 1 and 2)", "configs/fashion-mnist-nonlocal2.json")]


def run_pair(qkv, config, seed, steps, out_dir, nice):
    """Trains one config with one seed and evaluates it; returns its measurements."""
    prefix = ["nice", "-n", str(nice)] if nice else []
    train = prefix + [qkv, "train", config, "-q", "-o", out_dir,
                      "--set", f"train.max_iters={steps}", "--set", f"train.lr_decay_iters={steps}",
                      "--set", f"train.seed={seed}"]
    start = time.time()
    p = subprocess.run(train, cwd=ROOT, capture_output=True, text=True)
    minutes = (time.time() - start) / 60
    if p.returncode != 0:
        sys.exit(f"compare_nonlocal: {' '.join(train)} failed:\n{p.stderr[-2000:]}")
    m = re.search(r"([0-9.]+)M parameters", p.stderr)
    ev = prefix + [qkv, "eval", "-m", os.path.join(out_dir, "model.safetensors"), "--json"]
    e = subprocess.run(ev, cwd=ROOT, capture_output=True, text=True)
    if e.returncode != 0:
        sys.exit(f"compare_nonlocal: {' '.join(ev)} failed:\n{e.stderr[-2000:]}")
    j = json.loads(e.stdout)
    return {"accuracy": j["accuracy"], "images_per_s": j["images_per_s"], "train_minutes": minutes,
            "parameters_m": float(m.group(1)) if m else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1500, help="training steps of 128 images for every run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--nice", type=int, default=0, help="run at this nice level (0: as is)")
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "out", "nonlocal-compare"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    store = os.path.join(a.out, "results.json")
    results = json.load(open(store)) if os.path.exists(store) else {}
    for seed in a.seeds:  # seeds outermost: a run cut short still compares the configs fairly
        for name, config in CONFIGS:
            key = f"{os.path.basename(config)}|{seed}|{a.steps}"
            if key in results:
                continue
            run_dir = os.path.join(a.out, f"{os.path.splitext(os.path.basename(config))[0]}-s{seed}")
            print(f"compare_nonlocal: {config}, seed {seed}, {a.steps} steps …", file=sys.stderr, flush=True)
            results[key] = run_pair(a.qkv, config, seed, a.steps, run_dir, a.nice)
            print(f"  accuracy {100 * results[key]['accuracy']:.2f}%, {results[key]['train_minutes']:.1f} min",
                  file=sys.stderr, flush=True)
            with open(store + ".tmp", "w") as f:
                json.dump(results, f, indent=1)
            os.replace(store + ".tmp", store)

    print(f"| model ({a.steps} steps × 128 images, seeds {', '.join(map(str, a.seeds))}) | test accuracy "
          "(mean ± sd) | min–max | parameters | training | inference |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, config in CONFIGS:
        rs = [results[k] for k in (f"{os.path.basename(config)}|{s}|{a.steps}" for s in a.seeds) if k in results]
        if not rs:
            continue
        acc = [100 * r["accuracy"] for r in rs]
        sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
        print(f"| {name} | {statistics.mean(acc):.2f} ± {sd:.2f}% (n={len(acc)}) | {min(acc):.2f}–{max(acc):.2f}% "
              f"| {rs[0]['parameters_m']:.2f} M | {statistics.median(r['train_minutes'] for r in rs):.1f} min "
              f"| {statistics.median(r['images_per_s'] for r in rs):,.0f} images/s |")


if __name__ == "__main__":
    main()
