#!/usr/bin/env python3
"""The next token of R rows of GPT-2-sized logits (50,257) in qkv and in PyTorch, side by side, here.

  * qkv:     build/bench/qkv_sampling_bench — ops/sample.h's sample_rows (all rows in one call), and
             the plain filters a row at a time (decode/sampling.h: what Sampler ran before);
  * PyTorch: Hugging Face's warpers as transformers writes them — TopKLogitsWarper (torch.topk, then
             masked_fill), TopPLogitsWarper (sort, softmax, cumsum, scatter) —, then softmax and
             torch.multinomial, batched over the rows, at PyTorch's best settings here
             (OMP_WAIT_POLICY=PASSIVE, torch.set_num_threads(T)).
Cases: temperature 1 alone, top-k 50, top-p 0.9, top-k 50 with top-p 0.95, and that after the
history's penalties (repetition 1.2, frequency 0.5, presence 0.5 over 256 seen tokens, 64 of them the
prompt's; PyTorch: vLLM's apply_penalties — bincounts, masks, where — in torch ops); rows 1 and 32. Medians
of the benchmark's repetitions (qkv) and of R timed calls after warm-up (PyTorch); the runs
alternate; the table shows the median run and PyTorch / qkv (> 1: qkv faster).

  bench/sampling_vs_pytorch.py --threads 2 --runs 3
"""
import argparse
import json
import statistics
import time

import gbench  # qkv's side: its Google Benchmark program's medians

VOCAB = 50257
CASES = [(0, 1.0, False), (50, 1.0, False), (0, 0.9, False), (50, 0.95, False), (50, 0.95, True)]  # (top_k, top_p, penalties)
ROWS = [1, 32]


def torch_worker(threads, repeats):
    import torch
    torch.set_num_threads(threads)
    out = {}

    def penalize(scores, output_counts, seen_mask):  # vLLM's apply_penalties, as torch ops
        rep = torch.full((scores.shape[0], 1), 1.2)
        scores = torch.where(seen_mask & (scores > 0), scores / rep, scores)
        scores = torch.where(seen_mask & (scores <= 0), scores * rep, scores)
        scores = scores - 0.5 * output_counts
        return scores - 0.5 * (output_counts > 0).float()

    def warp(scores, k, p):  # transformers' TopKLogitsWarper, then TopPLogitsWarper
        if k > 0:
            kth = torch.topk(scores, k)[0][..., -1, None]
            scores = scores.masked_fill(scores < kth, -float("inf"))
        if p < 1:
            sorted_logits, sorted_indices = torch.sort(scores, descending=False)
            cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
            remove = cumulative <= (1 - p)
            remove[..., -1:] = 0
            scores = scores.masked_fill(remove.scatter(1, sorted_indices, remove), -float("inf"))
        return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1)

    for rows in ROWS:
        gen = torch.Generator().manual_seed(0)
        logits = torch.randn(rows, VOCAB, generator=gen) * 2
        # the history: 256 tokens a row (the C++ bench's), counts 0, 1, 2 in the output, the first 64 the prompt's
        tokens = torch.tensor([[(t * 193 + r) % VOCAB for t in range(256)] for r in range(rows)])
        counts = torch.tensor([[t % 3 for t in range(256)]] * rows, dtype=torch.float32)
        for i, (k, p, pen) in enumerate(CASES):

            def once():
                scores = logits
                if pen:  # (the bincount and mask a step builds from the history, then the penalties)
                    output_counts = torch.zeros(rows, VOCAB).scatter_add_(1, tokens, counts)
                    seen_mask = (output_counts > 0) | torch.zeros(rows, VOCAB, dtype=torch.bool).scatter_(
                        1, tokens[:, :64], True)
                    scores = penalize(scores, output_counts, seen_mask)
                return warp(scores / 1.0, k, p)

            with torch.no_grad():
                for _ in range(3):
                    once()
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    once()
                    times.append(time.perf_counter() - t0)
            out[f"{rows}/{i}"] = statistics.median(times) * 1e3
    out["version"] = torch.__version__
    return out


def qkv_run(bench, threads, repeats):
    out = {}
    for name, b in gbench.medians(bench, threads, repeats).items():
        _, form, rows, case = name.split("/")[:4]  # bm/sample_rows/32/2/real_time
        out[f"{rows}/{case}/{form}"] = b["real_time"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gbench.add_arguments(ap, "qkv_sampling_bench", repeats=20)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(torch_worker(a.threads, a.repeats)))
        return
    qkv_runs, torch_runs = [], []
    for _ in range(a.runs):
        qkv_runs.append(qkv_run(a.bench, a.threads, 5))
        torch_runs.append(gbench.torch_run(__file__, a.torch_python, a.threads, a.repeats))
    med = gbench.median
    print(f"next token of rows x {VOCAB} logits, temperature 1, {a.threads} threads; PyTorch {torch_runs[0]['version']}; "
          f"medians of {a.runs} alternated runs (ms)")
    print(f"{'rows':>5} {'filters':>29} {'sample_rows':>12} {'plain filters':>14} {'PyTorch (HF)':>13} {'PyTorch/qkv':>12}")
    for rows in ROWS:
        for i, (k, p, pen) in enumerate(CASES):
            q, ref = med(qkv_runs, f"{rows}/{i}/sample_rows"), med(qkv_runs, f"{rows}/{i}/reference")
            t = med(torch_runs, f"{rows}/{i}")
            name = ", ".join(x for x in (f"top-k {k}" if k else "", f"top-p {p}" if p < 1 else "",
                                         "penalties" if pen else "") if x) or "temperature"
            print(f"{rows:>5} {name:>29} {q:>12.3f} {ref:>14.3f} {t:>13.3f} {t / q:>11.2f}x")


if __name__ == "__main__":
    main()
