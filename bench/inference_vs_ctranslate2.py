#!/usr/bin/env python3
"""qkv against CTranslate2 on identical weights (issue 27): translation throughput and latency,
f32 / bf16 / int8 against CT2's float32 / int8, on a quiet machine and with a CPU hog, peak RSS.
Engine qkv-int8file: the model file `qkv quantize` writes (int8 rows without their f32 values, as
CT2's int8 folder), decoded with --dtype int8.

    pip install ctranslate2 sentencepiece      # the peer (PyPI)
    python3 bench/inference_vs_ctranslate2.py [--sentences 2000] [--threads 1 2] [--rounds 3] [--hog]

The model: the shipped models/en-fr.safetensors, exported once with `qkv export --to ctranslate2`
(float32 and int8 folders under --out). The sentences: --sentences English lines of
data/tatoeba-en-fr drawn with a fixed seed.

Two workloads, each engine in a fresh process (so peak RSS is its own):
  throughput  beam 4, batches of 32 sentences (qkv: --batch-size 32, which sorts by length as CT2's
              max_batch_size does): sentences/s over all of them
  latency     greedy, one sentence at a time: mean milliseconds per sentence (first 300 sentences)
Both engines decode with the same length normalisation switched off (qkv --alpha 0, CT2
length_penalty=1e-9 and min_decoding_length=0), so on float32 they should give the same
translations (the agreement is printed). Each engine runs at its best CPU backend: CT2's float32
with CT2_USE_MKL=1 (faster on AMD), its int8 on the default (oneDNN); OMP_WAIT_POLICY unset (each
engine's default), as a user would run them. Rounds alternate engines; medians are reported, and
the median of each round's own ratio (the engines run back to back: steadier on a drifting host).

--hog: the same again while another process keeps one of the two cores busy (a spinning Python
process), the "busy host" case.
"""
import argparse
import gzip
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QKV = os.path.join(ROOT, "build", "qkv")
MODEL = os.path.join(ROOT, "models", "en-fr.safetensors")

CT2_RUNNER = r'''
import json, os, resource, sys, time
import ctranslate2, sentencepiece as spm
model, compute_type, threads, beam, batch, inp, out = sys.argv[1:8]
sp = spm.SentencePieceProcessor(model_file=os.path.join(model, "spm.model"))
lines = open(inp, encoding="utf-8").read().splitlines()
tr = ctranslate2.Translator(model, device="cpu", compute_type=compute_type, intra_threads=int(threads), inter_threads=1)
toks = [sp.encode(l, out_type=str) for l in lines]
t0 = time.perf_counter()
if int(batch) == 1:
    res = [tr.translate_batch([t], beam_size=int(beam), length_penalty=1e-9, min_decoding_length=0,
                              max_decoding_length=len(t) + 50)[0] for t in toks]
else:
    res = tr.translate_batch(toks, max_batch_size=int(batch), batch_type="examples", beam_size=int(beam),
                             length_penalty=1e-9, min_decoding_length=0, max_decoding_length=256)
dt = time.perf_counter() - t0
with open(out, "w", encoding="utf-8") as f:
    for r in res:
        f.write(sp.decode(r.hypotheses[0]) + "\n")
print(json.dumps({"seconds": dt}))
'''


def sentences(n, seed=2027):
    with gzip.open(os.path.join(ROOT, "data", "tatoeba-en-fr", "fra.txt.gz"), "rt", encoding="utf-8") as f:
        english = sorted({line.split("\t")[0].strip() for line in f if "\t" in line})
    return random.Random(seed).sample(english, n)


def run(cmd, env):
    """Runs cmd; returns (stdout, stderr)."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return p.stdout, p.stderr


def timed(cmd, env):
    """Runs cmd under /usr/bin/time -f %M (peak RSS, KB); returns (stdout, stderr, rss_mb)."""
    with tempfile.NamedTemporaryFile(suffix=".rss", delete=False) as f:
        rss_file = f.name
    out, err = run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd, env)
    with open(rss_file) as f:
        rss = int(f.read().strip().splitlines()[-1]) / 1024
    os.unlink(rss_file)
    return out, err, rss


def qkv_run(dtype, threads, beam, batch, inp, outp, int8_file=None):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("GOMP_SPINCOUNT", None)
    model = MODEL
    if dtype == "int8file":  # the model file `qkv quantize` wrote: int8 rows, no f32 copies of them
        model, dtype = int8_file, "int8"
    cmd = [QKV, "translate", "-m", model, "-i", inp, "-o", outp, "--dtype", dtype, "--threads", str(threads),
           "--beam", str(beam), "--batch-size", str(batch), "--alpha", "0", "--stats"]
    _, err, rss = timed(cmd, env)
    seconds = float(re.search(r"in ([\d.]+) s:", err).group(1))
    return seconds, rss


def ct2_run(model_dir, compute_type, threads, beam, batch, inp, outp):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if compute_type == "float32":
        env["CT2_USE_MKL"] = "1"
    out, _, rss = timed([sys.executable, "-c", CT2_RUNNER, model_dir, compute_type, str(threads), str(beam),
                         str(batch), inp, outp], env)
    return json.loads(out.strip().splitlines()[-1])["seconds"], rss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--latency-sentences", type=int, default=300)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hog", action="store_true", help="also measure with a process spinning on one core")
    ap.add_argument("--engines", nargs="+", default=["qkv-f32", "qkv-bf16", "qkv-int8", "qkv-int8file", "ct2-float32", "ct2-int8"])
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "vs-ctranslate2"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dirs = {}
    for q in ("float32", "int8"):
        d = os.path.join(a.out, "ct2-" + q)
        if not os.path.exists(os.path.join(d, "model.bin")):
            subprocess.run([QKV, "export", "--to", "ctranslate2", MODEL, d, "--quantization", q, "--force"], check=True,
                           cwd=ROOT)
        dirs[q] = d
    int8_file = os.path.join(a.out, "en-fr.int8.safetensors")  # qkv's counterpart of CT2's int8 folder
    subprocess.run([QKV, "quantize", MODEL, "-o", int8_file, "--dtype", "f16"], check=True, cwd=ROOT)
    lines = sentences(a.sentences)
    inp = os.path.join(a.out, "src.en")
    with open(inp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    inp_lat = os.path.join(a.out, "src-latency.en")
    with open(inp_lat, "w", encoding="utf-8") as f:
        f.write("\n".join(lines[: a.latency_sentences]) + "\n")

    def one(engine, threads, workload):
        beam, batch, src, n = (4, 32, inp, len(lines)) if workload == "throughput" else (1, 1, inp_lat, a.latency_sentences)
        outp = os.path.join(a.out, f"{engine}-{workload}-t{threads}.fr")
        kind, dtype = engine.split("-", 1)
        if kind == "qkv":
            seconds, rss = qkv_run(dtype, threads, beam, batch, src, outp, int8_file)
        else:
            seconds, rss = ct2_run(dirs[dtype], dtype, threads, beam, batch, src, outp)
        value = n / seconds if workload == "throughput" else 1000 * seconds / n
        return value, rss, outp

    conditions = [False, True] if a.hog else [False]
    results = {}
    for hog in conditions:
        hog_proc = None
        if hog:
            hog_proc = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
            time.sleep(0.5)
        try:
            for threads in a.threads:
                for workload in ("throughput", "latency"):
                    vals = {e: [] for e in a.engines}
                    rss = {e: 0.0 for e in a.engines}
                    outs = {}
                    for r in range(a.rounds):
                        for e in (a.engines if r % 2 == 0 else list(reversed(a.engines))):
                            v, m, o = one(e, threads, workload)
                            vals[e].append(v)
                            rss[e] = max(rss[e], m)
                            outs[e] = o
                            print(f"  {'hog ' if hog else ''}{workload} t{threads} round {r + 1} {e}: {v:.1f}",
                                  file=sys.stderr, flush=True)
                    ref = open(outs[a.engines[0]], encoding="utf-8").read().splitlines()
                    for e in a.engines:
                        got = open(outs[e], encoding="utf-8").read().splitlines()
                        same = sum(x == y for x, y in zip(ref, got))
                        results[(hog, threads, workload, e)] = {
                            "median": statistics.median(vals[e]), "runs": vals[e], "rss_mb": rss[e],
                            "same_as_" + a.engines[0]: same, "lines": len(ref)}
        finally:
            if hog_proc:
                hog_proc.kill()
    # the table
    for hog in conditions:
        print(f"\n{'with a CPU hog on core 0' if hog else 'quiet machine'}:")
        print(f"{'engine':<12} {'threads':>7} {'beam4 b32 sent/s':>17} {'greedy b1 ms':>13} {'peak RSS MB':>12} "
              f"{'= ' + a.engines[0]:>14}")
        for threads in a.threads:
            for e in a.engines:
                t = results[(hog, threads, "throughput", e)]
                l = results[(hog, threads, "latency", e)]
                print(f"{e:<12} {threads:>7} {t['median']:>17.1f} {l['median']:>13.2f} "
                      f"{max(t['rss_mb'], l['rss_mb']):>12.0f} {t['same_as_' + a.engines[0]]:>7}/{t['lines']}")
        # On a host whose speed drifts, the ratio within each round (engines run back to back) is
        # steadier than the ratio of medians: the median of those paired ratios, against the first
        # engine (> 1: faster than it / lower latency than it).
        base = a.engines[0]
        for threads in a.threads:
            for e in a.engines[1:]:
                pairs = []
                for w in ("throughput", "latency"):
                    q, o = results[(hog, threads, w, base)]["runs"], results[(hog, threads, w, e)]["runs"]
                    ratios = [x / y if w == "throughput" else y / x for x, y in zip(q, o)]
                    pairs.append(f"{w} {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
                print(f"  {base} vs {e}, {threads} thread(s), paired by round: " + ", ".join(pairs))
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({" ".join(map(str, k)): v for k, v in results.items()}, f, indent=2)


if __name__ == "__main__":
    main()
