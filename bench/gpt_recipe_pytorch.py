#!/usr/bin/env python3
"""nanoGPT's shakespeare_char CPU recipe trained by PyTorch with the reference model
(../shared/pytorch-reference/gpt_model.py) on the bundled Tiny Shakespeare, with the same data
split, schedule and evaluation as `qkv train configs/shakespeare-char.json`, so the two validation
losses compare like for like (the recipe's figure is nanoGPT's 1.88).

  OPENBLAS_CORETYPE=Cooperlake OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 \\
    /usr/bin/python3 bench/gpt_recipe_pytorch.py [--seed 1337] [--iters 2000]

Recipe: 4 layers, 4 heads, 128 dims, block 64, batch 12, AdamW lr 1e-3 (β2 0.99, weight decay 0.1
on matrices), 100 warm-up steps then cosine to 1e-4 at 2000, clipping 1.0, dropout 0. Evaluation:
the mean loss over 200 random batches of each split at the end.
"""
import argparse
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "shared", "pytorch-reference")))
from gpt_model import GPT, GPTConfig  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    text = open(os.path.join(HERE, "..", "data", "tinyshakespeare", "input.txt")).read()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    n = int(0.9 * len(ids))
    train, val = ids[:n], ids[n:]
    B, T = 12, 64
    model = GPT(GPTConfig(vocab_size=len(chars), block_size=T, n_layer=4, n_head=4, n_embd=128, dropout=0.0,
                          bias=False))
    opt = model.configure_optimizer(lr=1e-3)

    def batch(data):
        ix = torch.randint(len(data) - T, (B,))
        return torch.stack([data[i:i + T] for i in ix]), torch.stack([data[i + 1:i + 1 + T] for i in ix])

    def lr_at(it, warmup=100, decay=2000, lr=1e-3, min_lr=1e-4):  # nanoGPT's get_lr
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        if it > decay:
            return min_lr
        r = (it - warmup) / (decay - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (lr - min_lr)

    t0 = time.time()
    for it in range(a.iters):
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        x, y = batch(train)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    train_time = time.time() - t0
    model.eval()
    with torch.no_grad():
        out = {}
        for name, data in (("train", train), ("val", val)):
            out[name] = sum(model(*batch(data))[1].item() for _ in range(200)) / 200
    print(f"pytorch {torch.__version__} seed {a.seed}: {a.iters} iters in {train_time:.1f} s "
          f"({a.iters * B * T / train_time:,.0f} tokens/s); train loss {out['train']:.4f}, val loss {out['val']:.4f}")


if __name__ == "__main__":
    main()
