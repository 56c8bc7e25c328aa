#!/usr/bin/env python3
"""Search the Tatoeba En→Fr recipe on a GPU with a PyTorch twin of qkv's trainer, then score with qkv.

qkv trains the shipped En→Fr model on 2 CPU cores in 72 minutes (Zen 5, bf16), so trying one recipe
change costs hours on such a machine. This script trains the same model with the same data, batches
and schedule in PyTorch on a GPU in minutes, several recipes side by side, so that only the recipe
that wins is trained again with `qkv train`. It is a research tool, not part of qkv: nothing in qkv
depends on it, and its model files are scored here with `qkv eval`, the same as qkv's own.

What is the same as `qkv train configs/tatoeba-en-fr.json` (src/train/translation_task.cpp):
  - the pairs: the bundled TSV, spaces normalized (text::normalize_spaces), the training split being
    every pair whose English side is not a dev or test source (qkv's split, read from its dev/test
    files); the SentencePiece model qkv trained on that split; EOS after the source, BOS/EOS around
    the target; pairs longer than max_tokens left out
  - batches of at most batch_size padded tokens (max(source, target) length × pairs) over the pairs
    sorted by (target, source) length, their order shuffled every epoch
  - the model: nn.Transformer with batch_first, post-LN, ReLU, dropout on embeddings, residuals,
    attention weights and the FFN; sinusoidal positions; one embedding, scaled by √d_model, for
    source, target and output projection; Xavier-uniform matrices, embedding N(0, 1/d_model)
  - Adam β=(0.9, 0.98), ε=1e-9, linear warm-up then cosine to min_lr, clipping at 1.0, label
    smoothing over the target tokens, bf16 autocast (qkv: bf16 GEMMs, f32 weights)
It writes a qkv model file (the tensor names are nn.Transformer's, which qkv uses), with qkv's
metadata and tokenizer, in half precision, so `qkv eval -m FILE` scores it.

  # here: the split and the SentencePiece model, from qkv itself
  build/qkv train configs/tatoeba-en-fr.json --out out/tatoeba-en-fr --set train.max_iters=1
  # on the GPU machine (PyTorch, sentencepiece, sacrebleu): one process per recipe
  python3 scripts/tatoeba_sweep.py --qkv-out out/tatoeba-en-fr --name drop3 --set dropout=0.3 --out sweep/
"""
import argparse
import gzip
import json
import math
import os
import random
import struct
import sys
import time

DEFAULTS = dict(d_model=256, nhead=8, layers=3, dim_feedforward=1024, dropout=0.1, label_smoothing=0.1,
                lr=1.4e-3, min_lr=1.4e-5, warmup=2000, steps=14000, batch_size=2500, max_tokens=100,
                seed=1, weight_decay=0.0, clip=1.0, enc_layers=0, dec_layers=0)


def normalize_spaces(s):
    """text::normalize_spaces: runs of ASCII whitespace, U+00A0, U+202F and U+2009 become one space;
    none at the start or end."""
    out, pending = [], False
    for ch in s:
        if ch in " \t\n\v\f\r\u00a0\u202f\u2009":
            pending = bool(out)
        else:
            if pending:
                out.append(" ")
            pending = False
            out.append(ch)
    return "".join(out)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def load_data(args, sp, cfg, text):
    held = set(text["dev", "src"]) | set(text["test", "src"])
    train = []
    with gzip.open(args.tsv, "rt", encoding="utf-8") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 2:
                continue
            src, tgt = normalize_spaces(cols[0]), normalize_spaces(cols[1])
            if src not in held:
                train.append((src, tgt))
    bos, eos = sp.bos_id(), sp.eos_id()

    def encode(pairs):
        out = []
        srcs = sp.encode([p[0] for p in pairs])
        tgts = sp.encode([p[1] for p in pairs])
        for s, t in zip(srcs, tgts):
            s, t = s + [eos], [bos] + t + [eos]
            if len(s) < 2 or len(t) < 3 or len(s) > cfg["max_tokens"] or len(t) - 1 > cfg["max_tokens"]:
                continue
            out.append((s, t))
        return out

    dev = encode(list(zip(text["dev", "src"], text["dev", "ref"])))
    return encode(train), dev, len(train)


def token_batches(pairs, order, max_tokens):
    """train::token_batches: consecutive pairs of `order` while longest × count ≤ max_tokens."""
    out, cur, longest = [], [], 0
    for i in order:
        n = max(len(pairs[i][0]), len(pairs[i][1]) - 1)
        if cur and max(longest, n) * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv-out", required=True, help="qkv's training folder: dev/test files, spm.model, model.safetensors")
    ap.add_argument("--tsv", default="data/tatoeba-en-fr/fra.txt.gz")
    ap.add_argument("--name", required=True)
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE, a recipe change (keys: %s)" % ", ".join(DEFAULTS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--eval-every", type=int, default=2000)
    ap.add_argument("--final-lines", type=int, default=None, help="score only the first N dev/test lines (smoke tests)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    ap.add_argument("--save-model", action="store_true", help="write OUT/NAME.safetensors (qkv model file, f16)")
    args = ap.parse_args()

    import sacrebleu
    import sentencepiece as spm
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    cfg = dict(DEFAULTS)
    for kv in args.set:
        k, v = kv.split("=", 1)
        if k not in cfg:
            sys.exit(f"--set: unknown key {k!r}")
        cfg[k] = type(cfg[k])(float(v)) if isinstance(cfg[k], int) else float(v)
    os.makedirs(args.out, exist_ok=True)
    log = open(f"{args.out}/{args.name}.log", "w")

    def say(*a):
        s = " ".join(str(x) for x in a)
        print(f"[{args.name}] {s}", flush=True)
        log.write(s + "\n")
        log.flush()

    sp = spm.SentencePieceProcessor(model_file=f"{args.qkv_out}/spm.model")
    V, D = sp.get_piece_size(), cfg["d_model"]
    pad, bos, eos = sp.pad_id(), sp.bos_id(), sp.eos_id()
    text = {(split, side): read_lines(f"{args.qkv_out}/{split}.{side}")  # qkv's dev and test, read once
            for split in ("dev", "test") for side in ("src", "ref")}
    train, dev, n_train_pairs = load_data(args, sp, cfg, text)
    say(f"cfg {json.dumps(cfg)}; {n_train_pairs} training pairs ({len(train)} kept), {len(dev)} dev")

    torch.manual_seed(cfg["seed"])
    rng = random.Random(cfg["seed"])
    keys = [rng.random() for _ in train]
    order = sorted(range(len(train)), key=lambda i: (len(train[i][1]), len(train[i][0]), keys[i]))
    batches = token_batches(train, order, cfg["batch_size"])
    say(f"{len(batches)} batches per epoch; {cfg['steps'] / len(batches):.1f} epochs")
    dev_order = sorted(range(len(dev)), key=lambda i: (len(dev[i][1]), len(dev[i][0])))
    dev_batches = token_batches(dev, dev_order, cfg["batch_size"])
    dev_c = args.device

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(V, D)
            self.transformer = nn.Transformer(d_model=D, nhead=cfg["nhead"], num_encoder_layers=cfg["enc_layers"] or cfg["layers"],
                                              num_decoder_layers=cfg["dec_layers"] or cfg["layers"], dim_feedforward=cfg["dim_feedforward"],
                                              dropout=cfg["dropout"], batch_first=True, norm_first=False)
            nn.init.normal_(self.embedding.weight, std=D ** -0.5)
            pos = torch.arange(256).unsqueeze(1)
            div = torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
            pe = torch.zeros(256, D)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
            self.register_buffer("pe", pe, persistent=False)
            self.drop = nn.Dropout(cfg["dropout"])

        def embed(self, t):
            return self.drop(self.embedding(t) * math.sqrt(D) + self.pe[: t.size(1)])

        def forward(self, src, tgt_in):
            T = tgt_in.size(1)
            mask = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)
            kpm = src == pad
            h = self.transformer(self.embed(src), self.embed(tgt_in), tgt_mask=mask, src_key_padding_mask=kpm,
                                 memory_key_padding_mask=kpm)
            return h @ self.embedding.weight.t()

    model = Seq2Seq().to(dev_c)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-9,
                           weight_decay=cfg["weight_decay"], **({"fused": True} if dev_c == "cuda" else {}))

    def lr_at(step):  # qkv's "cosine" schedule: linear warm-up to lr, cosine to min_lr at the last step
        if step < cfg["warmup"]:
            return cfg["lr"] * (step + 1) / cfg["warmup"]
        p = min(1.0, (step - cfg["warmup"]) / max(1, cfg["steps"] - cfg["warmup"]))
        return cfg["min_lr"] + 0.5 * (1 + math.cos(math.pi * p)) * (cfg["lr"] - cfg["min_lr"])

    def make_batch(pairs, idx):
        S = max(len(pairs[i][0]) for i in idx)
        T = max(len(pairs[i][1]) for i in idx) - 1
        src = torch.tensor([pairs[i][0] + [pad] * (S - len(pairs[i][0])) for i in idx])
        tin = torch.tensor([pairs[i][1][:-1] + [pad] * (T + 1 - len(pairs[i][1])) for i in idx])
        tout = torch.tensor([pairs[i][1][1:] + [pad] * (T + 1 - len(pairs[i][1])) for i in idx])
        return src.to(dev_c, non_blocking=True), tin.to(dev_c, non_blocking=True), tout.to(dev_c, non_blocking=True)

    def loss_of(src, tin, tout, smoothing):
        with torch.autocast(dev_c, dtype=torch.bfloat16, enabled=dev_c == "cuda"):
            logits = model(src, tin)
        return F.cross_entropy(logits.float().reshape(-1, V), tout.reshape(-1), ignore_index=pad,
                               label_smoothing=smoothing)

    @torch.no_grad()
    def val_loss():
        model.eval()
        s = n = 0
        for idx in dev_batches:
            src, tin, tout = make_batch(dev, idx)
            k = int((tout != pad).sum())
            s += float(loss_of(src, tin, tout, 0.0)) * k
            n += k
        model.train()
        return s / n

    @torch.no_grad()
    def greedy(lines, batch=256):
        """Greedy decoding, max length source + 50, for a quick BLEU (the reported figures are qkv's beam 4)."""
        model.eval()
        ids = [s + [eos] for s in sp.encode(lines)]
        order_ = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = [None] * len(ids)
        for b in range(0, len(order_), batch):
            idx = order_[b: b + batch]
            S = max(len(ids[i]) for i in idx)
            src = torch.full((len(idx), S), pad, dtype=torch.long)
            for r, i in enumerate(idx):
                src[r, : len(ids[i])] = torch.tensor(ids[i])
            src = src.to(dev_c)
            kpm = src == pad
            with torch.autocast(dev_c, dtype=torch.bfloat16, enabled=dev_c == "cuda"):
                mem = model.transformer.encoder(model.embed(src), src_key_padding_mask=kpm)
            ys = torch.full((len(idx), 1), bos, dtype=torch.long, device=dev_c)
            done = torch.zeros(len(idx), dtype=torch.bool, device=dev_c)
            for _ in range(S + 50):
                T = ys.size(1)
                mask = nn.Transformer.generate_square_subsequent_mask(T, device=dev_c)
                with torch.autocast(dev_c, dtype=torch.bfloat16, enabled=dev_c == "cuda"):
                    h = model.transformer.decoder(model.embed(ys), mem, tgt_mask=mask, memory_key_padding_mask=kpm)
                nxt = (h[:, -1].float() @ model.embedding.weight.t()).argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
                ys = torch.cat([ys, nxt[:, None]], 1)
                done |= nxt == eos
                if bool(done.all()):
                    break
            for r, i in enumerate(idx):
                toks = []
                for t in ys[r, 1:].tolist():
                    if t in (eos, pad):
                        break
                    toks.append(t)
                out[i] = sp.decode(toks)
        model.train()
        return out

    def bleu(split, n=None):
        src, ref = text[split, "src"][:n], text[split, "ref"][:n]
        return sacrebleu.corpus_bleu(greedy(src), [ref]).score

    results = dict(name=args.name, cfg=cfg, curve=[])
    t0 = time.time()
    nb = len(batches)
    epoch_order, cached = None, -1
    model.train()
    for step in range(cfg["steps"]):
        epoch = step // nb
        if epoch != cached:
            epoch_order = list(range(nb))
            random.Random(cfg["seed"] * 1000003 + epoch).shuffle(epoch_order)
            cached = epoch
        src, tin, tout = make_batch(train, batches[epoch_order[step % nb]])
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = loss_of(src, tin, tout, cfg["label_smoothing"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        opt.step()
        if (step + 1) % args.eval_every == 0 or step + 1 == cfg["steps"]:
            vl = val_loss()
            vb = bleu("dev", min(500, args.final_lines or 500))
            results["curve"].append(dict(step=step + 1, val_loss=vl, val_bleu_greedy=vb, seconds=time.time() - t0))
            say(f"step {step + 1}: loss {float(loss):.4f} val_loss {vl:.4f} val_bleu(greedy, 500) {vb:.2f} "
                f"{time.time() - t0:.0f} s")
            with open(f"{args.out}/{args.name}.json", "w") as f:  # partial results, should the run be cut short
                json.dump(results, f, indent=1)
    results["train_seconds"] = time.time() - t0
    results["dev_bleu_greedy"] = bleu("dev", args.final_lines)
    results["test_bleu_greedy"] = bleu("test", args.final_lines)
    say(f"final: dev {results['dev_bleu_greedy']:.2f} test {results['test_bleu_greedy']:.2f} (greedy)")
    with open(f"{args.out}/{args.name}.json", "w") as f:
        json.dump(results, f, indent=1)

    if args.save_model:
        # a qkv model file: qkv's metadata (config, tokenizer) from its own model file, this model's tensors
        with open(f"{args.qkv_out}/model.safetensors", "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            meta = json.loads(json.loads(f.read(n))["__metadata__"]["qkv"])
        m = meta["model"]
        m.update(d_model=D, nhead=cfg["nhead"], num_encoder_layers=cfg["enc_layers"] or cfg["layers"],
                 num_decoder_layers=cfg["dec_layers"] or cfg["layers"],
                 dim_feedforward=cfg["dim_feedforward"], dropout=cfg["dropout"])
        meta["trained_steps"] = cfg["steps"]
        meta["trained_by"] = "scripts/tatoeba_sweep.py (PyTorch twin of qkv train), recipe " + json.dumps(cfg)
        header, blobs, off = {}, [], 0
        for k, v in model.state_dict().items():
            b = v.detach().to("cpu", torch.float16).contiguous().numpy().tobytes()
            header[k] = {"dtype": "F16", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
        header["__metadata__"] = {"qkv": json.dumps(meta)}
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        tmp = f"{args.out}/{args.name}.safetensors.tmp"
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
        os.replace(tmp, f"{args.out}/{args.name}.safetensors")


if __name__ == "__main__":
    main()
