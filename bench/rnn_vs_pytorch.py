#!/usr/bin/env python3
"""qkv's recurrent translator (rnn-attention: Bahdanau's RNNsearch) side by side with a PyTorch twin,
on this machine, in one run: training target tokens/s.

The twin is the model of src/nn/rnn_seq2seq.cpp written as a PyTorch user writes it (bentrevett's
pytorch-seq2seq notebook 3, with qkv's sizes and output layer): nn.Embedding (tied to the output
projection), a bidirectional nn.GRU encoder over the whole source, s_0 = tanh(W [h_fwd; h_bwd]),
and a Python loop over the target where each step scores every encoder state additively
(e_j = vᵀ tanh(W_q s + W_k h_j), W_k h_j computed once per batch), masks padding, reads the context
c = Σ a_j h_j and runs one GRU step on [e; c]; logits = tanh(W_r dropout([e; s; c])) Eᵀ. Same
parameter count, same initialisation scales, dropout 0.3, label smoothing 0.1, Adam; random
tokens, batch 64 × 24 (source and target) as bench/seq2seq_vs_pytorch.py. The decoder's GRU step
is nn.GRU on a length-1 sequence (as the notebook) or nn.GRUCell (--cell grucell); --luong runs
Luong's general score with input feeding instead (configs/multi30k-de-en-gru-luong.json).

PyTorch runs at its best settings here (bench/gpt_vs_pytorch.py's torch_env: OMP_WAIT_POLICY=PASSIVE,
OMP/OpenBLAS/MKL threads = T, torch.set_num_threads(T)). Each measurement is a fresh process,
--runs times, alternating qkv and each PyTorch; medians and the ratios are printed.

  bench/rnn_vs_pytorch.py --runs 5 --torch-python /usr/bin/python3 --torch-python python3
  bench/rnn_vs_pytorch.py --hidden 256 --embedding 128      # a smaller model
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpt_vs_pytorch import run_json, torch_env  # noqa: E402  (PyTorch at its best settings here)
import bench_progress  # noqa: E402  (a bar over the measurements, on stderr)


# ---- the PyTorch twin ------------------------------------------------------------------------

def make_model(torch, V, E, H, dropout, cell, luong):
    nn, F = torch.nn, torch.nn.functional

    class RNNSearch(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(V, E)
            nn.init.normal_(self.embedding.weight, 0.0, E ** -0.5)  # tied output projection: unit-scale logits
            self.encoder = nn.GRU(E, H, batch_first=True, bidirectional=True)
            self.bridge = nn.Linear(2 * H, H)
            if luong:  # s_i = GRU([e; h̃_{i−1}]); e_j = s_iᵀ W_a h_j; h̃_i = tanh(W_c [c_i; s_i])
                self.weight = nn.Parameter(torch.empty(H, 2 * H))
                nn.init.xavier_uniform_(self.weight)
                self.combine = nn.Linear(3 * H, H, bias=False)
                dec_in, read_in = E + H, H
            else:      # c_i from s_{i−1}: e_j = vᵀ tanh(W_q s + W_k h_j); s_i = GRU([e; c_i]); o = [e; s_i; c_i]
                self.query_proj = nn.Linear(H, H, bias=False)
                self.key_proj = nn.Linear(2 * H, H)
                self.v = nn.Parameter(torch.empty(H).uniform_(-H ** -0.5, H ** -0.5))
                dec_in, read_in = E + 2 * H, E + 3 * H
            self.decoder = nn.GRUCell(dec_in, H) if cell == "grucell" else nn.GRU(dec_in, H, batch_first=True)
            self.readout = nn.Linear(read_in, E)
            self.drop = nn.Dropout(dropout)

        def step(self, x, s):  # one decoder GRU step: x [B, in], s [B, H] → [B, H]
            if cell == "grucell":
                return self.decoder(x, s)
            return self.decoder(x.unsqueeze(1), s.unsqueeze(0))[1].squeeze(0)

        def forward(self, src, tgt_in, pad=0):
            mask = (src != pad)                                       # [B, S]
            mem, h_n = self.encoder(self.drop(self.embedding(src)))   # [B, S, 2H], [2, B, H]
            s = torch.tanh(self.bridge(torch.cat([h_n[0], h_n[1]], -1)))
            emb = self.drop(self.embedding(tgt_in))                   # [B, T, E]
            outs = []
            if luong:
                keys = mem @ self.weight.t()                          # W_a h_j, once: [B, S, H]
                feed = torch.zeros_like(s)
                for t in range(tgt_in.size(1)):
                    s = self.step(torch.cat([emb[:, t], feed], -1), s)
                    e = torch.bmm(keys, s.unsqueeze(2)).squeeze(2).masked_fill(~mask, float("-inf"))
                    c = torch.bmm(F.softmax(e, -1).unsqueeze(1), mem).squeeze(1)
                    feed = torch.tanh(self.combine(torch.cat([c, s], -1)))
                    outs.append(feed)
            else:
                keys = self.key_proj(mem)                             # W_k h_j, once: [B, S, H]
                for t in range(tgt_in.size(1)):
                    e = (torch.tanh(self.query_proj(s).unsqueeze(1) + keys) @ self.v).masked_fill(~mask, float("-inf"))
                    c = torch.bmm(F.softmax(e, -1).unsqueeze(1), mem).squeeze(1)
                    s = self.step(torch.cat([emb[:, t], c], -1), s)
                    outs.append(torch.cat([emb[:, t], s, c], -1))
            o = torch.stack(outs, 1)
            return torch.tanh(self.readout(self.drop(o))) @ self.embedding.weight.t()

    return RNNSearch()


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V = 8000
    model = make_model(torch, V, args.embedding, args.hidden, 0.3, args.cell, args.luong).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    lossf = torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
    B, L = args.batch, args.len
    times = []
    for it in range(args.warmup + args.iters):
        src = torch.randint(4, V, (B, L))
        tgt = torch.randint(4, V, (B, L + 1))
        t0 = time.perf_counter()
        logits = model(src, tgt[:, :-1])
        loss = lossf(logits.reshape(-1, V), tgt[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if it >= args.warmup:
            times.append(time.perf_counter() - t0)
    mean = sum(times) / len(times)
    print(json.dumps({"torch": torch.__version__, "params": sum(p.numel() for p in model.parameters()),
                      "tgt_tokens_per_s": B * L / mean, "final_loss": loss.item()}))


# ---- the driver ------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(HERE, "..", "build", "qkv"))
    ap.add_argument("--torch-python", action="append", help="interpreter(s) with PyTorch (default /usr/bin/python3)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--embedding", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--len", type=int, default=24)
    ap.add_argument("--cell", nargs="+", default=["gru", "grucell"], choices=["gru", "grucell"],
                    help="the twin's decoder step: nn.GRU on one step, and/or nn.GRUCell")
    ap.add_argument("--luong", action="store_true", help="Luong's general score with input feeding")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.cell, = args.cell
        return worker(args)
    pythons = args.torch_python or ["/usr/bin/python3"]
    env = torch_env(args.threads)
    T = str(args.threads)
    shape = ["--batch", str(args.batch), "--len", str(args.len)]
    qkv_cmd = [args.qkv, "bench", "seq2seq", "train", "--json", "--threads", T, "--iters", str(args.iters),
               "--warmup", str(args.warmup), "--type", "rnn-attention", "--set", f"hidden_size={args.hidden}",
               "--set", f"embedding_dim={args.embedding}", "--set", "dropout=0.3"] + shape
    if args.luong:
        qkv_cmd += ["--set", "attention=general", "--set", "input_feeding=true"]
    qkv, torch_runs, info = [], {(p, c): [] for p in pythons for c in args.cell}, {}
    bench_progress.start(args.runs * (1 + len(torch_runs)), "rnn")
    for _ in range(args.runs):
        with bench_progress.measuring("qkv"):
            j = run_json(qkv_cmd)
        qkv.append(j["tgt_tokens_per_s"])
        info["qkv"] = j
        for (p, c) in torch_runs:
            with bench_progress.measuring(f"torch {c} ({p})"):
                out = run_json([p, __file__, "--worker", "--threads", T, "--iters", str(args.iters), "--warmup",
                                str(args.warmup), "--hidden", str(args.hidden), "--embedding", str(args.embedding),
                                "--cell", c] + shape + (["--luong"] if args.luong else []), env=env)
            torch_runs[(p, c)].append(out["tgt_tokens_per_s"])
            info[(p, c)] = out
    bench_progress.close()
    q = statistics.median(qkv)
    print(f"rnn-attention training ({info['qkv']['model']}; {info['qkv']['params'] / 1e6:.2f}M parameters), "
          f"batch {args.batch} x {args.len}, {T} threads (median of {args.runs}):")
    print(f"  qkv                            {q:9,.0f} target tokens/s")
    for (p, c), v in torch_runs.items():
        t = statistics.median(v)
        i = info[(p, c)]
        same = "" if i["params"] == info["qkv"]["params"] else f"  (params {i['params']:,} != qkv's!)"
        print(f"  PyTorch {i['torch']:12s} {'nn.GRUCell' if c == 'grucell' else 'nn.GRU':10s} {t:9,.0f} target "
              f"tokens/s   qkv {q / t:.2f}x{same}")


if __name__ == "__main__":
    main()
