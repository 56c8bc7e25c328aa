#!/usr/bin/env python3
"""qkv.torch.scaled_dot_product_attention as a drop-in inside a real PyTorch training loop: a
nanoGPT-style character model on Tiny Shakespeare, trained twice from the same seed and batches —
once with PyTorch's own attention (F.scaled_dot_product_attention(is_causal=True); PyTorch 1.13,
which has none, the softmax(QKᵀ/√d + mask) V formula nanoGPT falls back to), once with qkv's flash
forward and backward through the torch.autograd.Function of python/qkv/torch.py. Everything else
(embeddings, LayerNorm, MLP, AdamW) is PyTorch's in both.

It prints the training step's speed for both (medians of --runs fresh processes, alternating) with
the ratio, and how far apart the two loss curves are; --plot draws both curves.

  python3 bench/torch_sdpa_dropin.py --runs 3                  # speed: 6 layers, 384 dims, block 256
  python3 bench/torch_sdpa_dropin.py --block 1024 --batch 4    # a longer context
  python3 bench/torch_sdpa_dropin.py --curve-steps 300 --plot docs/img/torch-dropin-loss.png
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpt_vs_pytorch import torch_env  # noqa: E402  (PyTorch at its best settings here)

DATA = os.path.join(HERE, "..", "data", "tinyshakespeare", "input.txt")


def build(torch, a, attend):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(a.n_embd, bias=False), nn.LayerNorm(a.n_embd, bias=False)
            self.c_attn = nn.Linear(a.n_embd, 3 * a.n_embd, bias=False)
            self.c_proj = nn.Linear(a.n_embd, a.n_embd, bias=False)
            self.c_fc = nn.Linear(a.n_embd, 4 * a.n_embd, bias=False)
            self.mlp_proj = nn.Linear(4 * a.n_embd, a.n_embd, bias=False)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, a.n_head, C // a.n_head).transpose(1, 2) for t in (q, k, v))
            y = attend(q, k, v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self, vocab):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, a.n_embd), nn.Embedding(a.block, a.n_embd)
            self.h = nn.ModuleList(Block() for _ in range(a.n_layer))
            self.ln_f = nn.LayerNorm(a.n_embd, bias=False)
            self.apply(self._init)

        @staticmethod
        def _init(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
            for b in self.h:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT


def layer_norm_without_bias_ok(torch):
    try:
        torch.nn.LayerNorm(4, bias=False)
        return True
    except TypeError:
        return False


def worker(a):
    import torch
    torch.set_num_threads(a.threads)
    F = torch.nn.functional
    if a.impl == "qkv":
        import qkv
        import qkv.torch
        qkv.set_num_threads(a.threads)

        def attend(q, k, v):
            return qkv.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    elif hasattr(F, "scaled_dot_product_attention"):
        def attend(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:  # PyTorch 1.13: nanoGPT's formula
        def attend(q, k, v):
            T = q.size(-2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            return F.softmax(att, dim=-1) @ v
    if not layer_norm_without_bias_ok(torch):  # PyTorch 1.13: LayerNorm has no bias argument
        base = torch.nn.LayerNorm
        torch.nn.LayerNorm = lambda n, bias=True: base(n, elementwise_affine=True)
    text = open(DATA, encoding="utf-8").read()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text[:200_000]], dtype=torch.long)
    torch.manual_seed(1337)
    model = build(torch, a, attend)(len(chars))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.99), weight_decay=0.1)
    g = torch.Generator().manual_seed(7)
    losses, times = [], []
    for step in range(a.steps):
        ix = torch.randint(len(data) - a.block - 1, (a.batch,), generator=g)
        x = torch.stack([data[i:i + a.block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + a.block] for i in ix])
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    timed = times[a.warmup:] if len(times) > a.warmup else times
    print(json.dumps({"torch": torch.__version__, "losses": losses, "step_ms": 1e3 * statistics.median(timed),
                      "tokens_per_s": a.batch * a.block / statistics.median(timed)}), flush=True)


def run(py, a, impl, steps, warmup):
    cmd = [py, os.path.abspath(__file__), "--worker", "--impl", impl, "--steps", str(steps), "--warmup", str(warmup)]
    for k in ("n_layer", "n_head", "n_embd", "block", "batch", "threads", "lr"):
        cmd += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
    p = subprocess.run(cmd, capture_output=True, text=True, env=torch_env(a.threads))
    if p.returncode != 0:
        sys.exit(f"torch_sdpa_dropin: {impl} under {py} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch-python", default=sys.executable, help="the interpreter with torch and qkv installed")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12, help="steps per speed run (the first --warmup untimed)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--curve-steps", type=int, default=0, help="also train this many steps with each and compare")
    ap.add_argument("--plot", help="PNG of the two loss curves (with --curve-steps)")
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", choices=["torch", "qkv"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)

    print(f"nanoGPT-style model, {a.n_layer} layers, {a.n_head} heads, {a.n_embd} dims, block {a.block}, batch "
          f"{a.batch}, {a.threads} threads; Tiny Shakespeare characters; AdamW", flush=True)
    speed = {"torch": [], "qkv": []}
    version = ""
    for _ in range(a.runs):
        for impl in ("torch", "qkv"):
            r = run(a.torch_python, a, impl, a.steps, a.warmup)
            speed[impl].append(r["tokens_per_s"])
            version = r["torch"]
    if a.runs:
        t, q = statistics.median(speed["torch"]), statistics.median(speed["qkv"])
        own = "F.scaled_dot_product_attention" if not version.startswith("1.") else "the softmax formula"
        print(f"  PyTorch {version}, {own:32s} {t:9,.0f} tokens/s per training step")
        print(f"  PyTorch {version}, qkv.torch.scaled_dot_product_attention {q:9,.0f} tokens/s   ×{q / t:.2f}")
    if a.curve_steps:
        rt = run(a.torch_python, a, "torch", a.curve_steps, 0)
        ct, cq, version = rt["losses"], run(a.torch_python, a, "qkv", a.curve_steps, 0)["losses"], rt["torch"]
        own = "F.scaled_dot_product_attention" if not version.startswith("1.") else "the softmax formula"
        diff = max(abs(x - y) for x, y in zip(ct, cq))
        print(f"  loss curves over {a.curve_steps} steps: first {ct[0]:.4f} / {cq[0]:.4f}, last {ct[-1]:.4f} / "
              f"{cq[-1]:.4f}, largest difference {diff:.2e}")
        if a.plot:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(7, 4))
            ax.plot(ct, label=f"PyTorch {version}: {own}", lw=2.5, alpha=0.6)
            ax.plot(cq, label="the same with qkv.torch.scaled_dot_product_attention", lw=1, ls="--")
            ax.set_xlabel("step")
            ax.set_ylabel("training loss")
            ax.set_title("nanoGPT-style model on Tiny Shakespeare: one loss curve")
            ax.legend()
            fig.tight_layout()
            fig.savefig(a.plot, dpi=110)
            print(f"  wrote {a.plot}")


if __name__ == "__main__":
    main()
