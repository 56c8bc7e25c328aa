#!/usr/bin/env python3
"""Translation throughput on a GPU against the CPU — issue 29's third figure: the shipped en→fr
Transformer (models/en-fr.safetensors), beam 4, batches of 32, on Tatoeba sentences of every length,
with `qkv translate --stats` on the CPU (f32 and int8, every core of the machine) and on the GPU
(f32: the linears on TF32 tensor cores; bf16: bf16 weights, the linears on cuBLAS's bf16 GEMM), each on the GPU also
with CUDA graphs (QKV_CUDA_GRAPHS=1: static decoding, nn/static_decoding.h, each step one graph launch). Prints
sentences/s and target tokens/s of each, the GPU's ratios to the CPU's, and how many translations agree with the CPU's f32.

Run on a lent GPU machine (docs/CUDA.md), after `bash scripts/gpu_pack.sh` here:

    python3 bench/translate_cuda_vs_cpu.py --qkv "bash .gpu/run.sh qkv" [--sentences 2000]

Here (no GPU) `--devices cpu` runs the CPU half alone.
"""
import argparse
import gzip
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
DATA = os.path.join(ROOT, "data", "tatoeba-en-fr", "fra.txt.gz")
MODEL = os.path.join(ROOT, "models", "en-fr.safetensors")
STATS = re.compile(r"translated (\d+) sentences \((\d+) target tokens\) in ([\d.]+) s: ([\d.]+) sentences/s, (\d+) tokens/s")


def sentences(n):
    """n English sentences spread evenly over the file (it is sorted by length: short to long)."""
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        src = [line.split("\t")[0] for line in f if line.strip()]
    step = max(len(src) // n, 1)
    return src[::step][:n]


def run(qkv, path, device, dtype, beam, batch, threads, graphs=False):
    out = path + f".{device}.{dtype}.{int(graphs)}.out"
    cmd = shlex.split(qkv) + ["translate", "-m", MODEL, "-i", path, "-o", out, "--beam", str(beam), "--batch-size",
                              str(batch), "--dtype", dtype, "--device", device, "--stats"]
    if threads:
        cmd += ["--threads", str(threads)]
    env = dict(os.environ, QKV_CUDA_GRAPHS="1" if graphs else "0")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if graphs and "without CUDA graphs" in p.stderr:
        sys.exit(f"{' '.join(cmd)}: a capture failed:\n{p.stderr[-2000:]}")
    m = STATS.search(p.stderr)
    if p.returncode != 0 or not m:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    with open(out, encoding="utf-8") as f:
        lines = f.read().splitlines()
    return dict(seconds=float(m.group(3)), sentences_s=float(m.group(4)), tokens_s=float(m.group(5)), lines=lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"), help="the qkv command (a shell word list)")
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (default: every core)")
    ap.add_argument("--devices", default="cpu,cuda", help="cpu, cuda or both")
    ap.add_argument("--no-graphs", action="store_true", help="the GPU without CUDA graphs alone")
    a = ap.parse_args()
    runs = []  # (device, weights, graphs)
    for device in a.devices.split(","):
        if device == "cpu":
            runs += [(device, "f32", False), (device, "int8", False)]
        else:
            for dtype in ("f32", "bf16"):
                runs += [(device, dtype, False)] + ([] if a.no_graphs else [(device, dtype, True)])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "src.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(sentences(a.sentences)) + "\n")
        results = {}
        for device, dtype, graphs in runs:
            results[(device, dtype, graphs)] = run(a.qkv, path, device, dtype, a.beam, a.batch_size, a.threads, graphs)
    base = results[runs[0]]
    print(f"{a.sentences} Tatoeba sentences, beam {a.beam}, batches of {a.batch_size}, models/en-fr.safetensors")
    int8 = results.get(("cpu", "int8", False))
    print(f"{'device':12} {'weights':8} {'sentences/s':>12} {'tokens/s':>10} {'× CPU f32':>10} {'× CPU int8':>11} "
          f"{'same as CPU f32':>16}")
    for key in runs:
        r = results[key]
        same = sum(x == y for x, y in zip(r["lines"], base["lines"]))
        vs_int8 = f"{r['tokens_s'] / int8['tokens_s']:10.2f}×" if int8 else f"{'':11}"
        print(f"{key[0] + ('+graphs' if key[2] else ''):12} {key[1]:8} {r['sentences_s']:12.1f} {r['tokens_s']:10.0f} "
              f"{r['tokens_s'] / base['tokens_s']:9.2f}× {vs_int8} {same:9d}/{len(base['lines'])}")


if __name__ == "__main__":
    main()
