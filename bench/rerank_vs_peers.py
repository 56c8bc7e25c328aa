#!/usr/bin/env python3
"""A reranker (cross-encoder) of ms-marco-MiniLM-L6-v2's size: qkv against sentence-transformers'
CrossEncoder (PyTorch) on the same folder — (query, passage) pairs scored a second, with each
engine's peak RSS and the scores checked against CrossEncoder's.

    pip install torch transformers sentence-transformers                      # the peer (PyPI)
    PYTHONPATH=build/python/stage python3 bench/rerank_vs_peers.py [--threads 2] [--rounds 3]

The model is random (no hub here), built by transformers from a seed: BertForSequenceClassification
of one label, 6 layers, d 384, 12 heads, FFN 1536, 512 positions, vocab 30,522 (a WordPiece
vocabulary of Tatoeba's English words) — ms-marco-MiniLM-L6-v2's shape — saved with
CrossEncoder.save_pretrained (max_length 512) into --out once, and converted by qkv.convert.
CTranslate2 4.8.5 converts no classification head, so it has no part here.

Workload: --queries queries, each with --docs passages (4–8 Tatoeba sentences joined: ~60–120
tokens a pair), ranked in batches of --batch (CrossEncoder.rank / qkv's MaskedLanguageModel.rank),
tokenization included; each engine in a fresh process, rounds alternating engines, medians reported.
"""
import argparse
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data", "tatoeba-en-fr", "fra.txt.gz")


def sentences():
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        return [line.split("\t")[0] for line in f]


def workload(n_queries, n_docs):
    s = sentences()
    rng = random.Random(0)
    out = []
    for _ in range(n_queries):
        query = rng.choice(s).rstrip(".?!").lower()
        docs = [" ".join(rng.choice(s) for _ in range(rng.randint(4, 8))) for _ in range(n_docs)]
        out.append((query, docs))
    return out


def build(out):
    """The random MiniLM-sized cross-encoder folder and its converted file (once)."""
    if os.path.exists(os.path.join(out, "done")):
        return
    import torch
    import transformers
    from sentence_transformers import CrossEncoder
    import tatoeba_wordpiece
    torch.manual_seed(0)
    fast = tatoeba_wordpiece.tokenizer(sentences()[:60000])
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                  intermediate_size=1536, num_labels=1, pad_token_id=0)
    raw = os.path.join(out, "raw")
    transformers.BertForSequenceClassification(cfg).eval().save_pretrained(raw, safe_serialization=True)
    fast.save_pretrained(raw)
    CrossEncoder(raw, max_length=512, device="cpu").save_pretrained(os.path.join(out, "ce"))
    import qkv
    qkv.convert(os.path.join(out, "ce"), os.path.join(out, "ce.safetensors"))
    open(os.path.join(out, "done"), "w").close()


def run_one(engine, out, n_queries, n_docs, batch, threads):
    """One engine in this process: (pairs / s, every query's ranking [[corpus_id, score], …])."""
    work_items = workload(n_queries, n_docs)
    if engine == "sentence-transformers":
        import torch
        from sentence_transformers import CrossEncoder
        torch.set_num_threads(threads)
        model = CrossEncoder(os.path.join(out, "ce"), device="cpu")

        def work():
            return [[[r["corpus_id"], float(r["score"])] for r in model.rank(q, d, batch_size=batch)]
                    for q, d in work_items]
    else:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import qkv
        model = qkv.MaskedLanguageModel(os.path.join(out, "ce.safetensors"),
                                        weights="int8" if engine.endswith("int8") else "f32")
        qkv.set_num_threads(threads)

        def work():
            return [[[r["corpus_id"], r["score"]] for r in model.rank(q, d, batch_size=batch)] for q, d in work_items]
    work()  # warm-up (one pass)
    t0 = time.perf_counter()
    res = work()
    return n_queries * n_docs / (time.perf_counter() - t0), res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/qkv-rerank-bench")
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # ENGINE: a child process
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        import resource
        rate, res = run_one(args.one, args.out, args.queries, args.docs, args.batch, args.threads)
        with open(os.path.join(args.out, f"out-{args.one}.json"), "w") as f:
            json.dump(res, f)
        print(json.dumps({"rate": rate, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    os.makedirs(args.out, exist_ok=True)
    if args.build_only:
        build(args.out)
        return
    # built in a child: a peak RSS is inherited across fork and exec
    subprocess.run([sys.executable, __file__, "--out", args.out, "--build-only"], check=True)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(args.threads))
    engines = ["qkv", "qkv-int8", "sentence-transformers"]
    print(f"{args.queries} queries × {args.docs} passages, batches of {args.batch}, {args.threads} threads, "
          f"{args.rounds} rounds (medians)")
    got = {e: [] for e in engines}
    for _ in range(args.rounds):
        for e in engines:
            p = subprocess.run([sys.executable, __file__, "--out", args.out, "--queries", str(args.queries), "--docs",
                                str(args.docs), "--batch", str(args.batch), "--threads", str(args.threads), "--one", e],
                               capture_output=True, text=True, env=env)
            if p.returncode != 0:
                sys.exit(f"{e} failed:\n{p.stderr[-2000:]}")
            got[e].append(json.loads(p.stdout.strip().splitlines()[-1]))
    ref = json.load(open(os.path.join(args.out, "out-sentence-transformers.json")))
    base = statistics.median(r["rate"] for r in got["sentence-transformers"])
    for e in engines:
        res = json.load(open(os.path.join(args.out, f"out-{e}.json")))
        diff = max(abs(a[1] - b[1]) for q, r in zip(res, ref) for a, b in zip(sorted(q), sorted(r)))
        same_top = sum(q[0][0] == r[0][0] for q, r in zip(res, ref))
        rate = statistics.median(r["rate"] for r in got[e])
        rss = statistics.median(r["rss_mib"] for r in got[e])
        print(f"{e:22s} {rate:8.1f} pairs/s  ×{rate / base:5.2f} CrossEncoder  peak RSS {rss:6.0f} MiB  "
              f"max |Δscore| {diff:.1e}  same best passage {same_top}/{len(ref)}")


if __name__ == "__main__":
    main()
