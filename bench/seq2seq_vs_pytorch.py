#!/usr/bin/env python3
"""qkv's encoder–decoder Transformer side by side with PyTorch, on this machine, in one run.

  train      ../shared/pytorch-reference/seq2seq_train.py (nn.Transformer: d_model 256, 8 heads, 3+3
             layers, d_ff 1024, post-LN, dropout 0.1, shared 8000-token vocabulary, batch 64 x 24,
             label smoothing 0.1, Adam) against `qkv bench seq2seq train`: target tokens/s
  translate  beam search (beam 4, alpha 0.6, batch 32, max length source + 50) with the same
             weights (a qkv model file, loaded into nn.Transformer) on the same source token ids:
             qkv with its KV cache and recomputing, PyTorch recomputing the decoder over the prefix
             every step (nn.TransformerDecoder has no incremental state) with the same algorithm

PyTorch runs at its best settings here: OPENBLAS_CORETYPE=Cooperlake OMP_WAIT_POLICY=PASSIVE
OMP_NUM_THREADS=T OPENBLAS_NUM_THREADS=T, torch.set_num_threads(T). Each measurement is a fresh
process, --runs times, alternating; medians and the ratio are printed.

  bench/seq2seq_vs_pytorch.py --what train --runs 3
  bench/seq2seq_vs_pytorch.py --what train --dtype bf16    # mixed precision: qkv --dtype bf16 against
                                                           # the same script's model under torch.autocast(bf16)
  bench/seq2seq_vs_pytorch.py --what translate --model models/en-fr.safetensors --input out/tatoeba-en-fr/test.src
"""
import argparse
import json
import math
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpt_vs_pytorch import torch_env  # noqa: E402  (PyTorch at its best settings here)
import bench_progress  # noqa: E402  (a bar over the measurements, on stderr)
REF = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "pytorch-reference"))


# ---- the PyTorch bf16 training worker ------------------------------------------------------------

def train_bf16_worker(args):
    """seq2seq_train.py's model, data and step, with forward and loss under
    torch.autocast("cpu", dtype=torch.bfloat16): PyTorch's mixed precision, the peer of qkv's bf16."""
    import torch
    sys.path.insert(0, REF)
    import seq2seq_train as ref
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = ref.Seq2Seq().train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    lossf = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    times, warmup = [], 5
    for it in range(warmup + args.iters):
        src = torch.randint(4, ref.V, (ref.BATCH, ref.LEN))
        tgt = torch.randint(4, ref.V, (ref.BATCH, ref.LEN + 1))
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, tgt[:, :-1])
            loss = lossf(logits.reshape(-1, ref.V).float(), tgt[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if it >= warmup:
            times.append(time.perf_counter() - t0)
    mean = sum(times) / len(times)
    print(json.dumps({"torch": torch.__version__, "tgt_tokens_per_s": ref.BATCH * ref.LEN / mean,
                      "final_loss": loss.item()}))


# ---- the PyTorch translation worker ------------------------------------------------------------

def read_safetensors(path):
    """A qkv model file: tensors (F32/F16/BF16) and the qkv metadata, without the safetensors package."""
    import torch
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = json.loads(header.pop("__metadata__")["qkv"])
    dt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    tensors = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dt[e["dtype"]]).reshape(e["shape"]).float()
    return tensors, meta


def translate_worker(args):
    import torch
    import torch.nn as nn
    torch.set_num_threads(args.threads)
    tensors, meta = read_safetensors(args.model)
    c = meta["model"]
    D, V = c["d_model"], c["vocab_size"]
    assert c["positions"] == "sinusoidal"

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(V, D)
            self.transformer = nn.Transformer(d_model=D, nhead=c["nhead"], num_encoder_layers=c["num_encoder_layers"],
                                              num_decoder_layers=c["num_decoder_layers"],
                                              dim_feedforward=c["dim_feedforward"], dropout=0.0, batch_first=True,
                                              norm_first=c["norm_first"], activation=c["activation"])
            pos = torch.arange(c["max_len"]).unsqueeze(1)
            div = torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
            pe = torch.zeros(c["max_len"], D)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
            self.register_buffer("pe", pe)

        def embed(self, t):
            return self.embedding(t) * math.sqrt(D) + self.pe[: t.size(1)]

    m = Seq2Seq().eval()
    m.load_state_dict(tensors, strict=False)
    pad, bos, eos = c["pad_id"], c["bos_id"], c["eos_id"]
    rows = [line.rstrip("\n").split("\t") for line in open(args.ids)]
    sources = [[int(x) for x in r[0].split()] for r in rows]
    qkv_out = [[int(x) for x in r[1].split()] if len(r) > 1 and r[1] else [] for r in rows]
    K, alpha = args.beam, 0.6

    def lp(n):
        return ((5.0 + n) / 6.0) ** alpha

    @torch.no_grad()
    def beam_batch(srcs):
        """The algorithm of qkv's decode/search.cpp: 2K candidates per sentence; an EOS among the first K
        finishes a hypothesis; done at K finished or at max length; the decoder recomputed every step."""
        n = len(srcs)
        S = max(len(s) for s in srcs)
        src = torch.full((n, S), pad, dtype=torch.long)
        for i, s in enumerate(srcs):
            src[i, : len(s)] = torch.tensor(s)
        kpm = src == pad
        memory = m.transformer.encoder(m.embed(src), src_key_padding_mask=kpm)
        max_len = [len(s) + 50 for s in srcs]
        active = list(range(n))
        rows_of = torch.arange(n).repeat_interleave(K)
        mem, mkpm = memory[rows_of], kpm[rows_of]
        prefix = torch.full((n * K, 1), bos, dtype=torch.long)
        scores = torch.zeros(n, K, dtype=torch.float64)
        scores[:, 1:] = -math.inf
        finished = [[] for _ in range(n)]
        t = 0
        while active:
            T = prefix.size(1)
            mask = torch.triu(torch.full((T, T), float("-inf")), 1)
            h = m.transformer.decoder(m.embed(prefix), mem, tgt_mask=mask, memory_key_padding_mask=mkpm)
            logp = torch.log_softmax(h[:, -1] @ m.embedding.weight.t(), -1).double()
            A = len(active)
            cand = (scores.view(A, K, 1) + logp.view(A, K, V)).view(A, K * V)
            top, idx = cand.topk(2 * K, dim=1)
            beam_idx, tok = idx // V, idx % V
            keep_rows, new_tok, new_scores, still = [], [], [], []
            for a, s in enumerate(active):
                nb = []
                for i in range(2 * K):
                    sc, b, v = top[a, i].item(), beam_idx[a, i].item(), tok[a, i].item()
                    if sc == -math.inf:
                        continue
                    if v == eos:
                        if i < K and len(finished[s]) < K:
                            toks = prefix[a * K + b, 1:].tolist()
                            finished[s].append((sc / lp(len(toks) + 1), toks))
                    elif len(nb) < K:
                        nb.append((a * K + b, v, sc))
                if len(finished[s]) >= K:
                    continue
                if t + 1 >= max_len[s] or not nb:
                    for r, v, sc in nb:
                        toks = prefix[r, 1:].tolist() + [v]
                        finished[s].append((sc / lp(len(toks)), toks))
                    continue
                while len(nb) < K:
                    nb.append((nb[0][0], nb[0][1], -math.inf))
                still.append(s)
                for r, v, sc in nb:
                    keep_rows.append(r), new_tok.append(v), new_scores.append(sc)
            if not still:
                break
            sel = torch.tensor(keep_rows)
            prefix = torch.cat([prefix[sel], torch.tensor(new_tok).view(-1, 1)], 1)
            scores = torch.tensor(new_scores, dtype=torch.float64).view(len(still), K)
            if len(still) != len(active):  # otherwise every row keeps its sentence: the memory rows stay
                mem, mkpm = mem[sel], mkpm[sel]
            active = still
            t += 1
        return [max(f, key=lambda x: x[0])[1] for f in finished]

    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    out = [None] * len(sources)
    t0 = time.perf_counter()
    for b in range(0, len(order), args.batch):
        idx = order[b: b + args.batch]
        for i, hyp in zip(idx, beam_batch([sources[i] for i in idx])):
            out[i] = hyp
    dt = time.perf_counter() - t0
    tokens = sum(len(h) + 1 for h in out)
    same = sum(a == b for a, b in zip(out, qkv_out))
    print(json.dumps({"torch": torch.__version__, "seconds": dt, "tgt_tokens": tokens, "tgt_tokens_per_s": tokens / dt,
                      "same_as_qkv": same, "sentences": len(out)}))


# ---- the driver ------------------------------------------------------------------------------

def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(HERE, "..", "build", "qkv"))
    ap.add_argument("--torch-python", action="append", help="interpreter(s) with PyTorch (default /usr/bin/python3)")
    ap.add_argument("--what", nargs="+", default=["train", "translate"], choices=["train", "translate"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--dtype", nargs="+", default=["f32"], choices=["f32", "bf16"],
                    help="train: f32, and/or bf16 mixed precision (qkv --dtype bf16, PyTorch torch.autocast)")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "models", "en-fr.safetensors"))
    ap.add_argument("--input", help="translate: source sentences, one per line")
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == "translate":
        return translate_worker(args)
    if args.worker == "train-bf16":
        return train_bf16_worker(args)
    pythons = args.torch_python or ["/usr/bin/python3"]
    env = torch_env(args.threads)
    T = str(args.threads)

    if "train" in args.what:
        for dtype in args.dtype:
            qkv, torch_runs = [], {p: [] for p in pythons}
            bench_progress.start(args.runs * (1 + len(pythons)), f"seq2seq train {dtype}")
            for _ in range(args.runs):
                with bench_progress.measuring("qkv"):
                    j = json.loads(run([args.qkv, "bench", "seq2seq", "train", "--json", "--threads", T, "--iters",
                                        str(args.iters), "--dtype", dtype]))
                qkv.append(j["tgt_tokens_per_s"])
                for p in pythons:
                    with bench_progress.measuring(f"torch ({p})"):
                        if dtype == "f32":
                            out = run([p, os.path.join(REF, "seq2seq_train.py"), T, str(args.iters), "5"], env=env)
                            rate = float(re.search(r"-> ([\d,]+) target tokens/s", out).group(1).replace(",", ""))
                        else:
                            out = run([p, __file__, "--worker", "train-bf16", "--threads", T, "--iters",
                                       str(args.iters)], env=env)
                            rate = json.loads(out)["tgt_tokens_per_s"]
                    torch_runs[p].append(rate)
            bench_progress.close()
            q = statistics.median(qkv)
            print(f"seq2seq training {dtype}, d_model 256, 3+3 layers, vocab 8000, batch 64 x 24, {T} threads "
                  f"(median of {args.runs}):")
            print(f"  qkv                  {q:9,.0f} target tokens/s")
            for p, v in torch_runs.items():
                t = statistics.median(v)
                ver = run([p, "-c", "import torch; print(torch.__version__)"]).strip()
                print(f"  PyTorch {ver:12s} {t:9,.0f} target tokens/s   qkv {q / t:.2f}x"
                      + ("   (torch.autocast bf16)" if dtype == "bf16" else ""))

    if "translate" in args.what:
        if not args.input:
            sys.exit("--input is required for translate")
        with tempfile.TemporaryDirectory() as tmp:
            ids = os.path.join(tmp, "ids.tsv")
            qkv = []
            bench_progress.start(args.runs + len(pythons) * max(1, args.runs - 1), "seq2seq translate")
            for r in range(args.runs):
                cmd = [args.qkv, "bench", "seq2seq", "translate", "--json", "--threads", T, "-m", args.model, "-i",
                       args.input, "--sentences", str(args.sentences), "--beam", str(args.beam), "--batch-size",
                       str(args.batch)]
                if r == 0:
                    cmd += ["--dump-ids", ids]
                else:
                    cmd += ["--no-naive"]
                with bench_progress.measuring("qkv"):
                    qkv.append(json.loads(run(cmd)))
            q = statistics.median(j["kv_cache"]["tgt_tokens_per_s"] for j in qkv)
            naive = qkv[0]["naive"]["tgt_tokens_per_s"]
            bench_progress.write(f"translation, beam {args.beam}, batch {args.batch}, {qkv[0]['sentences']} sentences, "
                                 f"{T} threads:")
            bench_progress.write(f"  qkv, KV cache        {q:9,.0f} target tokens/s")
            bench_progress.write(f"  qkv, recomputing     {naive:9,.0f} target tokens/s   (cache {q / naive:.2f}x; "
                                 f"same output: {qkv[0]['identical']})")
            for p in pythons:
                res = []
                for _ in range(max(1, args.runs - 1)):
                    with bench_progress.measuring(f"torch ({p})"):
                        res.append(json.loads(run([p, __file__, "--worker", "translate", "--model", args.model, "--ids",
                                                   ids, "--beam", str(args.beam), "--batch", str(args.batch),
                                                   "--threads", T], env=env)))
                t = statistics.median(r["tgt_tokens_per_s"] for r in res)
                bench_progress.write(f"  PyTorch {res[0]['torch']:12s} {t:9,.0f} target tokens/s   qkv {q / t:.2f}x "
                                     f"(same translation as qkv: {res[0]['same_as_qkv']}/{res[0]['sentences']})")
            bench_progress.close()


if __name__ == "__main__":
    main()
