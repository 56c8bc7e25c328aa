#!/usr/bin/env python3
"""Zero-shot classification with an NLI model of deberta-v3-base's network: qkv's
MaskedLanguageModel.zero_shot_classification against transformers' pipeline("zero-shot-classification")
on the same folder — texts classified a second, with each engine's peak RSS.

    pip install torch transformers sentencepiece                            # the peer (PyPI)
    PYTHONPATH=build/python/stage python3 bench/encoders_vs_peers.py --arch deberta --rounds 1   # the model, once
    PYTHONPATH=build/python/stage python3 bench/zero_shot_vs_pipeline.py [--threads 2] [--rounds 3]

The model is encoders_vs_peers.py's random DebertaV2ForSequenceClassification (12 layers, d 768, 12
heads, FFN 3072, disentangled attention over 256 log-bucketed positions, a SentencePiece Unigram
tokenizer) with its three labels renamed entailment / neutral / contradiction, as an NLI model's
are (the pipeline finds entailment by name). --texts English Tatoeba sentences (8–25 words), each
against the same 5 candidate labels and the default template "This example is {}.", so that each
text is 5 (text, hypothesis) pairs; tokenization included; each engine in a fresh process, rounds
alternating engines, medians reported. Engines:
  qkv, qkv-int8      zero_shot_classification(texts, labels, batch_size=32): the pairs of 32 / 5
                     texts a batch, longest first
  pipeline           pipeline("zero-shot-classification")(texts, candidate_labels=labels), its
                     default: one pair a forward
  pipeline-batch32   the same with batch_size=32 (the pipeline's batching, padded)
The scores are checked against the pipeline's (max abs difference; texts whose best label differs).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from encoders_vs_peers import texts  # noqa: E402 (the same Tatoeba sentences)

LABELS = ["travel", "cooking", "politics", "sports", "family"]


def build(src, out):
    """The NLI folder (the DeBERTa classifier, its labels renamed) and its qkv file, once."""
    if os.path.exists(os.path.join(out, "done")):
        return
    if not os.path.exists(os.path.join(src, "bert-cls", "config.json")):
        sys.exit(f"{src}/bert-cls is missing: run bench/encoders_vs_peers.py --arch deberta first")
    folder = os.path.join(out, "nli")
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(os.path.join(src, "bert-cls"), folder)
    path = os.path.join(folder, "config.json")
    c = json.load(open(path))
    c["id2label"] = {"0": "entailment", "1": "neutral", "2": "contradiction"}
    c["label2id"] = {"entailment": 0, "neutral": 1, "contradiction": 2}
    json.dump(c, open(path, "w"), indent=2)
    import qkv
    qkv.convert(folder, os.path.join(out, "nli.safetensors"))
    open(os.path.join(out, "done"), "w").close()


def run_one(engine, out, n, threads):
    """One engine in this process: (texts / s, [[score of each of LABELS] per text])."""
    lines = texts(n)
    if engine.startswith("pipeline"):
        import torch
        import transformers
        torch.set_num_threads(threads)
        pipe = transformers.pipeline("zero-shot-classification", model=os.path.join(out, "nli"), device="cpu")
        kwargs = {"batch_size": 32} if engine.endswith("batch32") else {}

        def work():
            with torch.inference_mode():
                return pipe(lines, candidate_labels=LABELS, **kwargs)
    else:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import qkv
        model = qkv.MaskedLanguageModel(os.path.join(out, "nli.safetensors"),
                                        weights="int8" if engine.endswith("int8") else "f32")
        qkv.set_num_threads(threads)

        def work():
            return model.zero_shot_classification(lines, LABELS, batch_size=32)
    work()  # warm-up (one pass)
    t0 = time.perf_counter()
    res = work()
    rate = len(lines) / (time.perf_counter() - t0)
    return rate, [[dict(zip(r["labels"], r["scores"]))[label] for label in LABELS] for r in res]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default="/tmp/qkv-encoder-bench-deberta", help="encoders_vs_peers.py --arch deberta's --out")
    ap.add_argument("--out", default="/tmp/qkv-zero-shot-bench")
    ap.add_argument("--texts", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # ENGINE: a child process
    args = ap.parse_args()
    if args.one:
        import resource
        rate, scores = run_one(args.one, args.out, args.texts, args.threads)
        json.dump(scores, open(os.path.join(args.out, f"out-{args.one}.json"), "w"))
        print(json.dumps({"rate": rate, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    os.makedirs(args.out, exist_ok=True)
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                    f"import zero_shot_vs_pipeline as z; z.build({args.src!r}, {args.out!r})"], check=True)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(args.threads))
    engines = ["qkv", "qkv-int8", "pipeline", "pipeline-batch32"]
    got = {e: [] for e in engines}
    print(f"{args.texts} texts × {len(LABELS)} labels, {args.threads} threads, {args.rounds} rounds (medians)")
    for _ in range(args.rounds):
        for e in engines:
            p = subprocess.run([sys.executable, __file__, "--out", args.out, "--texts", str(args.texts), "--threads",
                                str(args.threads), "--one", e], capture_output=True, text=True, env=env)
            if p.returncode != 0:
                sys.exit(f"{e} failed:\n{p.stderr[-2000:]}")
            got[e].append(json.loads(p.stdout.strip().splitlines()[-1]))
    ref = json.load(open(os.path.join(args.out, "out-pipeline.json")))
    base = statistics.median(r["rate"] for r in got["pipeline"])
    for e in engines:
        rate = statistics.median(r["rate"] for r in got[e])
        rss = statistics.median(r["rss_mib"] for r in got[e])
        o = json.load(open(os.path.join(args.out, f"out-{e}.json")))
        diff = max(abs(a - b) for x, y in zip(o, ref) for a, b in zip(x, y))
        other = sum(max(range(len(LABELS)), key=x.__getitem__) != max(range(len(LABELS)), key=y.__getitem__)
                    for x, y in zip(o, ref))
        print(f"{e:17s} {rate:7.1f} texts/s  ×{rate / base:6.2f} pipeline  peak RSS {rss:6.0f} MiB  "
              f"max |Δ score| {diff:.1e}  best label differs {other}/{len(ref)}")


if __name__ == "__main__":
    main()
