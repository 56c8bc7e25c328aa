#!/usr/bin/env python3
"""qkv's captioner (src/nn/captioner.cpp, Show, Attend and Tell) side by side with a PyTorch twin, on
this machine, in one run: the training step in images/s.

The twin is the model of configs/captions.json written as a PyTorch user writes it (the shape of
sgrvinod's "a-PyTorch-Tutorial-to-Image-Captioning"): a ResNet trunk of torchvision-style basic
blocks (3×3 stem, one stride-2 stage after another) giving a grid of feature vectors; the mean
feature through a linear layer and tanh as the first state; at every word, additive attention
vᵀ tanh(W s + U a_j) over the grid, the gate β = σ(w_β · s), an nn.GRUCell on [E y; β z], and a deep
output tanh(W_r [E y; s; β z]) tied to the embedding; cross-entropy plus λ · mean (1 − Σ_t α)².
Same parameter count (checked), random 96×96 pictures and random captions of --length words,
batch 32, AdamW.

PyTorch runs at its best settings here (bench/gpt_vs_pytorch.py's torch_env: OMP_WAIT_POLICY=PASSIVE,
threads = T, torch.set_num_threads(T)). Each measurement is a fresh process, --runs times,
alternating qkv and each PyTorch; medians and ratios.

  bench/captioner_vs_pytorch.py --runs 3 --torch-python python3 --torch-python /usr/bin/python3
  bench/captioner_vs_pytorch.py --set attention=none --set gate=false   (the mean-feature baseline)
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
from convnet_vs_pytorch import basic_block  # noqa: E402
import bench_progress  # noqa: E402


def make_model(torch, m, V):
    nn, F = torch.nn, torch.nn.functional

    BasicBlock = basic_block(torch)  # the ConvNet twin's (bench/convnet_vs_pytorch.py)

    class Captioner(nn.Module):
        def __init__(self):
            super().__init__()
            ch, bl = m.get("channels", [16, 32, 64, 128]), m.get("blocks", [1, 1, 1, 1])
            self.stem = nn.Sequential(nn.Conv2d(1, ch[0], 3, 1, 1, bias=False), nn.BatchNorm2d(ch[0]), nn.ReLU())
            layers, cin = [], ch[0]
            for s, (c, b) in enumerate(zip(ch, bl)):
                for i in range(b):
                    layers.append(BasicBlock(cin, c, 2 if s > 0 and i == 0 else 1))
                    cin = c
            self.layers = nn.Sequential(*layers)
            E, H, D = m.get("embedding_dim", 128), m.get("hidden_size", 256), cin
            A = m.get("attention_dim", 0) or H
            self.attend = m.get("attention", "additive") != "none"
            self.gated = self.attend and m.get("gate", True)
            self.lam = m.get("doubly_stochastic", 1.0)
            g = m.get("image_height", 96)
            for _ in ch[1:]:
                g = (g + 1) // 2
            self.pos = nn.Parameter(torch.randn(g * g, D) * 0.02) if m.get("grid_positions", False) else None
            self.embedding = nn.Embedding(V, E)
            self.init = nn.Linear(D, H)
            if self.attend:
                self.query_proj = nn.Linear(H, A, bias=False)
                self.key_proj = nn.Linear(D, A)
                self.v = nn.Parameter(torch.randn(A) / A ** 0.5)
                if self.gated:
                    self.gate = nn.Linear(H, 1)
            self.decoder = nn.GRUCell(E + D, H)
            self.readout = nn.Linear(E + H + D, E)
            self.drop = nn.Dropout(m.get("dropout", 0.3))

        def forward(self, x, tgt_in, tgt_out):
            f = self.layers(self.stem((x - 0.07) / 0.2))       # [B, D, h, w]
            a = f.flatten(2).transpose(1, 2)                     # [B, L, D]
            if self.pos is not None:
                a = a + self.pos                                 # the cells' learned positions
            mean = a.mean(1)
            s = torch.tanh(self.init(mean))
            keys = self.key_proj(a) if self.attend else None     # U a_j, once per picture
            emb = self.drop(self.embedding(tgt_in))
            outs, alphas = [], []
            for t in range(tgt_in.shape[1]):
                if self.attend:
                    e = torch.tanh(self.query_proj(s).unsqueeze(1) + keys) @ self.v   # [B, L]
                    alpha = torch.softmax(e, -1)
                    z = torch.bmm(alpha.unsqueeze(1), a).squeeze(1)
                    if self.gated:
                        z = z * torch.sigmoid(self.gate(s))
                    alphas.append(alpha)
                else:
                    z = mean
                s = self.decoder(torch.cat([emb[:, t], z], -1), s)
                outs.append(torch.cat([emb[:, t], s, z], -1))
            o = torch.stack(outs, 1)
            logits = torch.tanh(self.readout(self.drop(o))) @ self.embedding.weight.t()
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=0)
            if self.attend and self.lam > 0:
                real = (tgt_out != 0).float()
                seen = (torch.stack(alphas, 1) * real.unsqueeze(-1)).sum(1)
                loss = loss + self.lam * ((1 - seen) ** 2).mean()
            return loss

    return Captioner()


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    m = json.load(open(args.config))["model"]
    for kv in args.set or []:
        k, v = kv.split("=", 1)
        m[k] = json.loads(v) if v not in ("none", "additive") else v
    V, B, T = args.vocab, args.batch, args.length + 1
    model = make_model(torch, m, V).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}], lr=1e-3)
    times = []
    for it in range(args.warmup + args.iters):
        x = torch.rand(B, 1, args.side, args.side)
        words = torch.randint(4, V, (B, T - 1))
        tgt_in = torch.cat([torch.full((B, 1), 2), words], 1)
        tgt_out = torch.cat([words, torch.full((B, 1), 3)], 1)
        t0 = time.perf_counter()
        loss = model(x, tgt_in, tgt_out)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if it >= args.warmup:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"torch": torch.__version__, "params": sum(p.numel() for p in model.parameters()),
                      "images_per_s": B / (sum(times) / len(times))}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(HERE, "..", "build", "qkv"))
    ap.add_argument("--torch-python", action="append", help="interpreter(s) with PyTorch (default /usr/bin/python3)")
    ap.add_argument("--config", default=os.path.join(HERE, "..", "configs", "captions.json"))
    ap.add_argument("--set", action="append", help="override a model hyper-parameter, e.g. attention=none")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=29)
    ap.add_argument("--side", type=int, default=96)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    pythons = args.torch_python or ["/usr/bin/python3"]
    env = torch_env(args.threads)
    T = str(args.threads)
    common = ["--threads", T, "--iters", str(args.iters), "--warmup", str(args.warmup), "--batch", str(args.batch),
              "--length", str(args.length), "--vocab", str(args.vocab), "--side", str(args.side)]
    sets = sum((["--set", kv] for kv in args.set or []), [])
    res, info = {"qkv": []}, {}
    bench_progress.start(args.runs * (1 + len(pythons)), "captioner")
    for _ in range(args.runs):
        with bench_progress.measuring("qkv"):
            j = run_json([args.qkv, "bench", "captioner", "--json", "--config", args.config] + common + sets)
        res["qkv"].append(j["images_per_s"])
        info["qkv"] = j
        for p in pythons:
            with bench_progress.measuring(f"torch ({p})"):
                out = run_json([p, __file__, "--worker", "--config", args.config] + common + sets, env=env)
            res.setdefault(p, []).append(out)
            info[p] = out["torch"]
    bench_progress.close()
    q = statistics.median(res["qkv"])
    print(f"Captioner training step ({info['qkv']['model']}; {info['qkv']['params'] / 1e6:.2f}M parameters), "
          f"batch {args.batch} × {args.length} words, {T} threads (median of {args.runs}):")
    print(f"  qkv                   {q:8,.1f} images/s")
    for p in pythons:
        runs = res[p]
        t = statistics.median(r["images_per_s"] for r in runs)
        same = "" if runs[0]["params"] == info["qkv"]["params"] else f"  (params {runs[0]['params']:,} != qkv's!)"
        print(f"  PyTorch {info[p]:13s} {t:8,.1f} images/s   qkv {q / t:.2f}x{same}")


if __name__ == "__main__":
    main()
