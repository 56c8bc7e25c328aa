#!/usr/bin/env python3
"""Training on a busy machine (issue 47): `qkv train`'s speed with 1 and 2 threads, on a quiet
machine and beside one process that keeps a core busy, with the thread budget on (the default) and
off (QKV_THREAD_BUDGET=off: the even OpenMP split of before), alternating, in one run.

    python3 bench/busy_training.py --qkv build/qkv --rounds 3 [--tasks gpt transformer convnet]

Each measurement is a fresh `qkv train` of a bundled config for --steps steps (no evaluation, no
checkpoints); its rate is the median of the metrics' tokens_per_s (images/s for the ConvNet) after
the first --skip steps. The busy core is a Python loop (`while True: pass`), started before the
run and stopped after. Prints a Markdown table of the medians over the rounds and, per task, the
figure the issue asks for: 2 threads beside a busy core as a share of 1 thread beside it."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_progress  # noqa: E402
from host import cpu_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = {  # config, overrides (small enough for a few seconds a run, large enough to be the real loop)
    "gpt": ("configs/shakespeare-char.json", ["train.batch_size=16"]),
    "transformer": ("configs/tatoeba-en-fr.json", ["train.batch_size=1500", "data.max_tokens=60"]),
    "convnet": ("configs/fashion-mnist.json", ["train.batch_size=64", "data.val_size=0"]),
}




def run(qkv, task, threads, budget, busy, steps, skip, out):
    config, sets = TASKS[task]
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)  # --threads says it
    if not budget:
        env["QKV_THREAD_BUDGET"] = "off"
    else:
        env.pop("QKV_THREAD_BUDGET", None)
    args = [qkv, "train", os.path.join(ROOT, config), "-o", out, "-q", "--threads", str(threads),
            "--set", f"train.max_iters={steps}", "--set", "train.eval_interval=0", "--set", "train.log_interval=1",
            "--set", "train.checkpoint_interval=0", "--set", f"train.warmup_iters={steps}",
            "--set", f"train.lr_decay_iters={steps}"]
    for s in sets:
        args += ["--set", s]
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    rates = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] >= skip]
    shutil.rmtree(out, ignore_errors=True)
    return statistics.median(rates)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--skip", type=int, default=5, help="steps left out of the rate (warm-up)")
    a = p.parse_args()
    cells = [(task, busy, threads, budget) for task in a.tasks for busy in (False, True) for threads in (1, 2)
             for budget in ((True,) if threads == 1 else (False, True))]
    rates = {c: [] for c in cells}
    bench_progress.start(len(cells) * a.rounds, "busy training")
    tmp = tempfile.mkdtemp(prefix="qkv-busy-training-")
    for r in range(a.rounds):
        order = cells if r % 2 == 0 else list(reversed(cells))  # alternate the order between rounds
        for c in order:
            task, busy, threads, budget = c
            name = f"{task} {threads}t {'busy' if busy else 'quiet'} budget {'on' if budget else 'off'}"
            with bench_progress.measuring(name):
                rates[c].append(run(a.qkv, task, threads, budget, busy, a.steps, a.skip, os.path.join(tmp, "out")))
    bench_progress.close()
    print(f"\n{cpu_name()}, {os.cpu_count()} cores; medians of {a.rounds} rounds, {a.steps} steps each\n")
    print("| task | machine | 1 thread | 2 threads, budget off | 2 threads, budget on | off / 1 thread | on / 1 thread |")
    print("|---|---|---|---|---|---|---|")
    for task in a.tasks:
        for busy in (False, True):
            one = statistics.median(rates[(task, busy, 1, True)])
            off = statistics.median(rates[(task, busy, 2, False)])
            on = statistics.median(rates[(task, busy, 2, True)])
            print(f"| {task} | {'one core busy' if busy else 'quiet'} | {one:,.0f} | {off:,.0f} | {on:,.0f} | "
                  f"{off / one:.2f}× | {on / one:.2f}× |")
    print("\nraw:", json.dumps({" ".join(map(str, c)): v for c, v in rates.items()}))


if __name__ == "__main__":
    main()
