#!/usr/bin/env python3
"""`qkv serve` generating for many clients at once (issue 51, item 3: continuous batching over a
paged KV cache), against the same server one generation at a time and against CTranslate2's
batched generation, on the same random Llama-style model, in one run.

    pip install torch transformers tokenizers sentencepiece ctranslate2     # the peers (PyPI)
    python3 bench/serve_generate.py [--clients 16] [--new-tokens 64] [--rounds 3] [--threads 2]
        [--dtypes f32 int8] [--system-sentences K --engines qkv-batched qkv-noprefix ct2]
        [--clients 1 --choices 16 --engines qkv-batched qkv-serial ct2]
        [--kv-cache-mb M --engines qkv-batched qkv-bf16kv qkv-fp8kv]
        [--system-sentences K --engines qkv-batched qkv-nocascade]

The model: bench/pretrained_vs_peers.py's (12 layers, d 768, 12 query / 4 key-value heads, MLP 2048,
vocab 32,000, ~110 M parameters, a byte-level BPE tokenizer trained on Tatoeba), built once into
out/pretrained-bench/, converted by `qkv convert` and `ct2-transformers-converter`.

Each round, for each engine (alternating):
  qkv-batched   `qkv serve` (default --max-batch 64): C client threads each POST one
                /v1/completions (a different Tatoeba sentence as prompt, greedy, max_tokens N) at once
  qkv-serial    the same server with --max-batch 1: the generations one after another
  qkv-noprefix  `qkv serve --no-prefix-caching`: every prompt computed whole
  qkv-nocascade `qkv serve` with QKV_PAGED_CASCADE=0: each token reads the shared prompt's pages on
                its own (the CPU's cascade attention off)
  qkv-bf16kv    `qkv serve --kv-cache-dtype bf16`: the KV cache in bf16 (twice the tokens in
                --kv-cache-mb M, which every qkv engine is given)
  qkv-fp8kv     `qkv serve --kv-cache-dtype fp8`: the KV cache in e4m3 (four times the tokens)
  ct2           ctranslate2.Generator.generate_batch on the C prompts at once (greedy, max_length
                N, min_length N): a batched offline call, no HTTP — the peer's best throughput
With --choices M each client asks for M choices of its prompt in one request (OpenAI's "n"; the
peer's batch holds each prompt M times).
With --system-sentences K every prompt begins with the same K other Tatoeba sentences (a shared
system prompt: what prefix caching computes once; each round is a fresh server, the cache cold).
Reported: generated tokens / s over the round's wall time (median of the rounds), and for the
servers the requests' latency p50 / p90. Random models may end a text early at their end-of-text
token: tokens counted are the tokens made (the servers' "usage").
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pretrained_vs_peers as pv  # noqa: E402  (the model, its tokenizer and conversions)

ROOT = pv.ROOT
QKV = pv.QKV


def prepare(out):
    folder = os.path.join(out, "llama")
    if not os.path.exists(os.path.join(folder, "config.json")):
        pv.build_llama(folder)
    if not os.path.exists(folder + ".safetensors"):
        subprocess.run([QKV, "convert", "--from", "hf", folder, "-o", folder + ".safetensors"], check=True)
    for q in ("float32", "int8"):
        d = f"{folder}-ct2-{q}"
        if not os.path.exists(os.path.join(d, "model.bin")):
            subprocess.run(["ct2-transformers-converter", "--model", folder, "--output_dir", d, "--quantization", q,
                            "--force"], check=True, capture_output=True)
    return folder


class Server:
    def __init__(self, model, dtype, threads, max_batch, extra=(), env_extra=None):
        env = dict(os.environ)
        env.pop("OMP_WAIT_POLICY", None)
        env.update(env_extra or {})
        self.p = subprocess.Popen([QKV, "serve", "-m", model, "--port", "0", "--threads", str(threads), "--dtype", dtype,
                                   "--max-batch", str(max_batch), "--timeout", "600", "--max-sentence-bytes", "65536",
                                   *extra],
                                  stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        for line in self.p.stderr:
            m = re.search(r"listening on http://[\d.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        else:
            raise RuntimeError("qkv serve did not start")
        threading.Thread(target=lambda: [None for _ in self.p.stderr], daemon=True).start()

    def complete(self, prompt, n, choices=1):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "n": choices}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        body = json.loads(r.read())
        if r.status != 200:
            raise RuntimeError(f"{r.status}: {body}")
        return time.perf_counter() - t0, body["usage"]["completion_tokens"]

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=60)


def serve_round(server, prompts, n, choices):
    results = [None] * len(prompts)

    def client(i):
        results[i] = server.complete(prompts[i], n, choices)

    server.complete("Hello.", 4)  # warm: the first step's allocations (a prompt no client's begins with)
    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return sum(r[1] for r in results) / wall, [r[0] for r in results]


CT2 = r'''
import json, sys, time
import ctranslate2, transformers
folder, ct2_dir, compute, threads, n, inp = sys.argv[1:7]
prompts = json.load(open(inp))
tok = transformers.AutoTokenizer.from_pretrained(folder)
g = ctranslate2.Generator(ct2_dir, device="cpu", compute_type=compute, intra_threads=int(threads))
starts = [tok.convert_ids_to_tokens(tok(p)["input_ids"]) for p in prompts]
g.generate_batch(starts[:1], max_length=4, sampling_topk=1, include_prompt_in_result=False)
t0 = time.perf_counter()
r = g.generate_batch(starts, max_length=int(n), min_length=int(n), sampling_topk=1, include_prompt_in_result=False,
                     max_batch_size=len(starts))
dt = time.perf_counter() - t0
print(json.dumps({"tokens_per_s": sum(len(x.sequences_ids[0]) for x in r) / dt}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", nargs="+", default=["f32", "int8"])
    ap.add_argument("--choices", type=int, default=1, help="choices per request (OpenAI's n)")
    ap.add_argument("--system-sentences", type=int, default=0,
                    help="sentences of a system prompt every client's prompt begins with")
    ap.add_argument("--engines", nargs="+", default=["qkv-batched", "qkv-serial", "ct2"],
                    choices=["qkv-batched", "qkv-serial", "qkv-noprefix", "qkv-bf16kv", "qkv-fp8kv", "qkv-nocascade", "ct2"])
    ap.add_argument("--kv-cache-mb", type=float, default=0, help="qkv serve --kv-cache-mb (0: its default)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "pretrained-bench"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    folder = prepare(a.out)
    english = sorted({p[0] for p in pv.pairs()})
    picked = random.Random(2028).sample(english, a.clients + a.system_sentences)
    system = " ".join(picked[a.clients:])
    prompts = [(system + " " + p if system else p) for p in picked[:a.clients]]
    inp = os.path.join(a.out, "serve-prompts.json")
    with open(inp, "w", encoding="utf-8") as f:
        json.dump([p for p in prompts for _ in range(a.choices)], f)
    rates, latencies = {}, {}
    for dtype in a.dtypes:
        for r in range(a.rounds):
            for engine in a.engines:
                key = (dtype, engine)
                if engine == "ct2":
                    env = dict(os.environ)
                    compute = {"f32": "float32", "int8": "int8"}[dtype]
                    out = subprocess.run([sys.executable, "-c", CT2, folder, f"{folder}-ct2-{compute}", compute,
                                          str(a.threads), str(a.new_tokens), inp], capture_output=True, text=True,
                                         env=env, check=True).stdout
                    rate = json.loads(out.strip().splitlines()[-1])["tokens_per_s"]
                else:
                    extra = {"qkv-noprefix": ["--no-prefix-caching"], "qkv-bf16kv": ["--kv-cache-dtype", "bf16"],
                             "qkv-fp8kv": ["--kv-cache-dtype", "fp8"]}
                    # qkv-nocascade: each token reads the shared system prompt's pages on its own
                    env_extra = {"QKV_PAGED_CASCADE": "0"} if engine == "qkv-nocascade" else {}
                    s = Server(folder + ".safetensors", dtype, a.threads, 1 if engine == "qkv-serial" else 64,
                               extra.get(engine, []) + (["--kv-cache-mb", str(a.kv_cache_mb)] if a.kv_cache_mb else []),
                               env_extra)
                    try:
                        rate, lat = serve_round(s, prompts, a.new_tokens, a.choices)
                    finally:
                        s.stop()
                    latencies.setdefault(key, []).extend(lat)
                rates.setdefault(key, []).append(rate)
                print(f"{dtype} round {r} {engine}: {rate:.1f} tokens/s", file=sys.stderr)
    print(f"\n{a.clients} clients × {a.choices} choices × {a.new_tokens} new tokens, {a.threads} threads"
          + (f", a system prompt of {a.system_sentences} sentences" if system else "")
          + (f", --kv-cache-mb {a.kv_cache_mb:g}" if a.kv_cache_mb else "") + "\n")
    print("| dtype | engine | tokens/s (median) | latency p50 / p90 s | vs qkv-serial | vs qkv-noprefix | vs qkv-batched | vs ct2 |")
    print("|---|---|---|---|---|---|---|---|")
    for (dtype, engine), vals in sorted(rates.items()):
        med = statistics.median(vals)
        lat = ""
        if (dtype, engine) in latencies:
            ls = sorted(latencies[(dtype, engine)])
            lat = f"{ls[len(ls) // 2]:.2f} / {ls[int(len(ls) * 0.9)]:.2f}"
        ratio = lambda other: (f"{med / statistics.median(rates[(dtype, other)]):.2f}×"
                               if (dtype, other) in rates and other != engine else "")
        print(f"| {dtype} | {engine} | {med:.1f} | {lat} | {ratio('qkv-serial')} | {ratio('qkv-noprefix')} "
              f"| {ratio('qkv-batched')} | {ratio('ct2')} |")


if __name__ == "__main__":
    main()
