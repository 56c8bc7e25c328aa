#!/usr/bin/env python3
"""GPT training on a GPU: qkv against PyTorch (eager and torch.compile) on nanoGPT's shakespeare_char
GPU recipe (configs/shakespeare-char-gpu.json: 6 layers, 6 heads, 384 dims, block 256, batch 64,
dropout 0.2, AdamW, lr 1e-3 cosine to 1e-4, grad clip 1.0) — issue 29's training benchmark.

Run on a lent GPU machine (docs/CUDA.md), after `bash scripts/gpu_pack.sh` here:

    python3 bench/gpt_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" [--iters 300] [--loss-iters 2000]

Throughput: tokens/s over --iters training steps after warm-up (qkv: `qkv train … --device cuda`'s
own tokens/s with evaluation pushed past the end; PyTorch: this script's nanoGPT twin — the same
model as qkv's GPT: pre-LayerNorm blocks without biases, exact GELU, tied embeddings — timed with
CUDA synchronisation), for PyTorch eager and torch.compile, in f32 (TF32 matmuls, as qkv's) and
under bf16 autocast (nanoGPT's own GPU default; qkv's config "dtype": "bf16" — bf16 GEMMs on
cuBLAS and attention on its tensor-core flash pair), qkv's f32 twice: its attention on the
tensor cores at f32's accuracy (three TF32 products a term, as PyTorch's f32 memory-efficient SDPA:
the default) and on the CUDA cores (QKV_CUDA_ATTENTION_F32=simt). --loss-iters N also trains both for N steps and
prints their validation losses (nanoGPT reaches 1.47 after 5000); with --plot PREFIX it also draws their
training losses over the steps, qkv's and PyTorch's overlaid, in PREFIX-f32.svg and PREFIX-bf16.svg
(`qkv plot` over each run's metrics.csv: qkv's own, and the one this script writes for PyTorch's
runs, a loss every 10 steps). qkv's steps are timed as they run and,
in f32 (tf32x3) and bf16, recorded once and replayed as a CUDA graph (QKV_CUDA_GRAPHS=1; torch.compile's
mode="reduce-overhead" is PyTorch's counterpart).
"""
import argparse
import math
import os
import re
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "tinyshakespeare", "input.txt")
CFG = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch=64, dropout=0.2, lr=1e-3, min_lr=1e-4,
           warmup=100, decay=5000, wd=0.1, beta2=0.99, clip=1.0)


def torch_gpt(vocab, torch):
    nn, F = torch.nn, torch.nn.functional
    c = CFG

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(c["n_embd"], bias=False), nn.LayerNorm(c["n_embd"], bias=False)
            self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=False)
            self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=False)
            self.fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=False)
            self.proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=False)
            self.drop = nn.Dropout(c["dropout"])

        def forward(self, x):
            B, T, E = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(E, dim=2)
            q, k, v = (t.view(B, T, c["n_head"], E // c["n_head"]).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=c["dropout"] if self.training else 0.0,
                                               is_causal=True)
            x = x + self.drop(self.c_proj(y.transpose(1, 2).reshape(B, T, E)))
            return x + self.drop(self.proj(F.gelu(self.fc(self.ln_2(x)))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, c["n_embd"]), nn.Embedding(c["block_size"], c["n_embd"])
            self.drop = nn.Dropout(c["dropout"])
            self.h = nn.ModuleList(Block() for _ in range(c["n_layer"]))
            self.ln_f = nn.LayerNorm(c["n_embd"], bias=False)

        def forward(self, idx, targets):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.drop(self.wte(idx) + self.wpe(pos))
            for b in self.h:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def lr_at(it):
    c = CFG
    if it < c["warmup"]:
        return c["lr"] * (it + 1) / (c["warmup"] + 1)
    r = min(1.0, (it - c["warmup"]) / (c["decay"] - c["warmup"]))
    return c["min_lr"] + 0.5 * (1 + math.cos(math.pi * r)) * (c["lr"] - c["min_lr"])


def write_metrics_csv(folder, losses):
    """PyTorch's run as `qkv train` writes one: folder/metrics.csv with a step and a loss a row"""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.csv"), "w") as f:
        f.write("step,loss\n")
        for it, loss in losses:
            f.write(f"{it},{loss:.6f}\n")


def plot_losses(qkv, runs, names, out):
    """`qkv plot` of the runs' training losses (their metrics.csv) in one picture; the error's last line, or ''"""
    cmd = shlex.split(qkv) + ["plot", *runs, "-y", "loss", "-o", out, "--title",
                              "nanoGPT shakespeare_char on a GPU: training loss"]
    for n in names:
        cmd += ["-n", n]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return "" if r.returncode == 0 else (r.stderr.strip().splitlines() or ["failed"])[-1]


def run_torch(compile_, bf16, iters, warmup, loss_iters=0, curve=None):
    """tokens/s and the validation loss; `curve` (a folder), where given, gets every 10th step's loss"""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    text = open(DATA).read()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(ch) for ch in text], dtype=torch.long)
    n = int(0.9 * len(data))
    train, val = data[:n].cuda(), data[n:].cuda()
    torch.manual_seed(1337)
    model = torch_gpt(len(chars), torch).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": CFG["wd"]}, {"params": other, "weight_decay": 0.0}],
                            lr=CFG["lr"], betas=(0.9, CFG["beta2"]), fused=True)
    step_model = torch.compile(model) if compile_ else model
    T, B = CFG["block_size"], CFG["batch"]

    def batch(d):
        ix = torch.randint(len(d) - T - 1, (B,), device="cuda")
        return torch.stack([d[i:i + T] for i in ix]), torch.stack([d[i + 1:i + 1 + T] for i in ix])

    def step(it):
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        x, y = batch(train)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CFG["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    losses = []  # (step, loss on the device): read once at the end, so the timed steps never wait for one

    def logged(it):
        loss = step(it)
        if it % 10 == 0:
            losses.append((it, loss.detach()))

    model.train()
    for it in range(warmup):
        logged(it)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for it in range(warmup, warmup + iters):
        logged(it)
    torch.cuda.synchronize()
    tok_s = iters * B * T / (time.perf_counter() - t0)
    val_loss = float("nan")
    if loss_iters:
        for it in range(warmup + iters, loss_iters):
            logged(it)
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            val_loss = sum(step_model(*batch(val)).item() for _ in range(200)) / 200
    if curve:
        write_metrics_csv(curve, [(it, float(loss)) for it, loss in losses])
    return tok_s, val_loss


def run_qkv(qkv, iters, loss_iters, out, bf16, f32_attention="tf32x3", graphs=False):
    n = loss_iters or iters
    cmd = shlex.split(qkv) + ["train", os.path.join(HERE, "..", "configs", "shakespeare-char-gpu.json"), "--device",
                              "cuda", "-q", "-o", out, "--set", f"train.max_iters={n}",
                              "--set", f"train.eval_interval={n}", "--set",
                              f"train.eval_iters={200 if loss_iters else 1}", "--set", f"train.checkpoint_interval={n}",
                              "--set", f"train.dtype={'bf16' if bf16 else 'f32'}"]
    env = dict(os.environ, QKV_CUDA_ATTENTION_F32=f32_attention, QKV_CUDA_GRAPHS="1" if graphs else "0")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
    if r.returncode != 0:
        return float("nan"), float("nan"), tail
    tok = re.search(r"([0-9.]+) tok(?:ens)?/s", tail)
    val = re.search(r"val_loss ([0-9.]+)", tail)
    return float(tok.group(1)) if tok else float("nan"), float(val.group(1)) if val else float("nan"), tail


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(HERE, "..", "build-cuda", "qkv"))
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--loss-iters", type=int, default=0)
    ap.add_argument("--out", default="/tmp/qkv-gpt-cuda")
    ap.add_argument("--defaults-only", action="store_true",
                    help="qkv's default runs alone (f32 with 3xTF32 attention, bf16; no CUDA graphs, no CUDA-core attention)")
    ap.add_argument("--plot", metavar="PREFIX",
                    help="with --loss-iters: the training losses overlaid in PREFIX-f32.svg and PREFIX-bf16.svg")
    a = ap.parse_args()
    import torch
    print(f"# {torch.cuda.get_device_name()}, PyTorch {torch.__version__}; nanoGPT shakespeare_char GPU recipe", flush=True)
    qkv_tok = {}
    # bf16: autocast — bf16 GEMMs and the tensor-core attention pair; f32 with attention on the CUDA
    # cores (simt) and on the tensor cores (tf32x3); each precision also with its steps recorded as
    # one CUDA graph (QKV_CUDA_GRAPHS=1: train/step_graph.h); the fastest of a precision is the one
    # compared below
    variants = ((False, "tf32x3", False), (False, "simt", False), (False, "tf32x3", True),
                (True, "tf32x3", False), (True, "tf32x3", True))
    for bf16, f32_attention, graphs in variants:
        if a.defaults_only and (graphs or f32_attention != "tf32x3"):
            continue
        tok, val, tail = run_qkv(a.qkv, a.iters, a.loss_iters,
                                 a.out + ("-bf16" if bf16 else "-f32-" + f32_attention) + ("-graphs" if graphs else ""),
                                 bf16, f32_attention, graphs)
        if tok == tok and not tok < qkv_tok.get(bf16, 0.0):  # (a failed run is NaN)
            qkv_tok[bf16] = tok
        name = ("qkv bf16 (autocast)" if bf16 else f"qkv f32 (TF32 GEMMs, {f32_attention})") + \
            ((" graphs" if "replayed from one CUDA graph" in tail else " graphs REFUSED") if graphs else "")
        print(f"  {name:32s} {tok:10.0f} tok/s   val loss {val:.4f}   [{tail[:90]}]", flush=True)
    for compile_ in (False, True):
        for bf16 in (False, True):
            name = f"torch {'compile' if compile_ else 'eager'} {'bf16' if bf16 else 'f32 (TF32)'}"
            try:
                t, v = run_torch(compile_, bf16, a.iters, a.warmup, a.loss_iters, curve=torch_out(a.out, compile_, bf16))
                print(f"  {name:32s} {t:10.0f} tok/s   val loss {v:.4f}   qkv/torch (same precision) "
                      f"{qkv_tok.get(bf16, float('nan')) / t:.3f}", flush=True)
            except Exception as e:  # torch.compile may be unavailable (no compiler in the image)
                print(f"  {name:32s} failed: {str(e).splitlines()[0][:90]}", flush=True)
    if a.plot and a.loss_iters:
        for bf16 in (False, True):
            dt = "bf16" if bf16 else "f32"
            runs = [(a.out + ("-bf16" if bf16 else "-f32-tf32x3"), f"qkv {dt}")]
            runs += [(torch_out(a.out, c, bf16), f"torch {'compile' if c else 'eager'} {dt}") for c in (False, True)]
            runs = [(d, n) for d, n in runs if os.path.exists(os.path.join(d, "metrics.csv"))]
            why = plot_losses(a.qkv, [d for d, _ in runs], [n for _, n in runs], f"{a.plot}-{dt}.svg")
            print(f"  the training losses, {dt}: " + (why or f"{a.plot}-{dt}.svg"), flush=True)


def torch_out(out, compile_, bf16):
    return f"{out}-torch-{'compile' if compile_ else 'eager'}-{'bf16' if bf16 else 'f32'}"


if __name__ == "__main__":
    sys.exit(main())
