"""Golden file for masked-language-model training (tests/train/masked_lm_task_test.cpp): transformers'
run_mlm.py's blocks, and one step of …ForMaskedLM and torch.optim.AdamW on qkv's masks — from the tiny
random masked-language-model folders tests/golden/make_hf_golden.py wrote.

    PYTHONPATH=<torch + transformers> python3 tests/golden/make_mlm_golden.py

Blocks (run_mlm.py): the text a line each (blank lines kept), the first VAL_PERCENT % of the lines the
validation split (datasets' train[:5%], rounded to the nearest), the rest training. Grouped:
tokenizer(lines, return_special_tokens_mask=True), each 1,000 lines' tokens (datasets' map batch)
concatenated and cut into blocks of MAX_LENGTH, the remainder dropped (group_texts). line_by_line: the
lines that are not blank, tokenizer(line, truncation=True, max_length=MAX_LENGTH_LBL). Checked by each
split's block count, its first two blocks (ids and special_tokens_mask) and a hash of every id.

Masks: qkv's own (train/masked_lm_task.h), drawn here by the same counter hash (core/rng.h's
Generator::bits) — the collator's Bernoulli draws are torch's, so a test can only share them by
sharing the hash: token t of block stream s, h = bits(seed, s·2³² + t); chosen where h >> 40 <
⌊0.15·2²⁴⌋ and the token is not special; then the mask token where bits 16–39 < ⌊0.8·2²⁴⌋, a random
id (bits(seed ^ RANDOM_SALT, same) mod vocab) where < ⌊0.9·2²⁴⌋, else kept. The first epoch's
training block i is stream i under the run's seed; validation block i is stream i under seed ^ VAL_SALT.

Whole-word masking (the collator's whole_word_mask=True): a block's words are transformers' own
(DataCollatorForLanguageModeling._calc_word_ids_and_prob_mask over the tokenizer's offsets: a token
starting where the one before it ended continues its word); a word's first token draws as a token does
above, and a chosen word's tokens all become the mask token (transformers sets mask_replace_prob to 1).

Step: every training block of STEP_LINES in one batch (padded to the longest, line_by_line), labels
the chosen tokens' ids and −100 elsewhere: model(**batch, labels=labels).loss (the mean over the
chosen tokens); the gradients' L2 norm; one AdamW step (lr 1e-3, betas 0.9 / 0.999, eps 1e-8, weight
decay 0.01 on the matrices only, as qkv's trainer groups them); the validation blocks (the same lines,
their own masks) before and after it: val_loss (the mean over their chosen tokens) and val_accuracy
(argmax = the original id). Dropout off (eval mode). Writes tests/golden/hf_mlm.json.
"""
import json
import os

import numpy as np
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_LENGTH, MAX_LENGTH_LBL, VAL_PERCENT = 16, 12, 5
SEED = 1337
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01
MLM_P, MASK_P, RANDOM_P = 0.15, 0.8, 0.1
RANDOM_SALT, VAL_SALT = 0x6D61736B6C6D0001, 0x6D61736B6C6D0002
M64 = (1 << 64) - 1

WORDS = ["romeo", "juliet", "the", "king", "of", "verona", "night", "sweet", "love", "is", "a", "fair",
         "lord", "my", "death", "and", "café", "naïve", "été", "to-morrow", "o", "!", ",", "."]


def corpus(n):
    # n lines of 0 … 11 words (blank lines, and one of spaces, among them), one with a mask token written in
    lines = []
    for i in range(n):
        k = (i * 7 + i // 13) % 12
        lines.append(" ".join(WORDS[(i * 5 + j * 3 + j * j) % len(WORDS)] for j in range(k)))
    lines[3] = "   "
    lines[min(n - 1, 70)] = "the [MASK] of verona <mask> is here"
    return lines


LINES = corpus(1150)  # 58 validation lines (57.5 rounded to even), then 1,000 + 92: two groups
STEP_LINES = corpus(40)
CASES = [("bert", "bert-uncased"), ("roberta", "roberta-mlm"), ("xlmr", "xlmr-mlm"), ("deberta", "deberta-mlm"),
         ("electra", "electra-mlm"), ("distilbert", "distilbert-mlm"), ("albert", "albert-mlm"),
         ("mpnet", "mpnet-mlm"), ("modernbert", "modernbert-mlm")]


# ---- core/rng.h's Generator::bits -------------------------------------------------------------

def bits(seed, counter):
    z = (counter * 0x9E3779B97F4A7C15 + seed * 0xD1B54A32D192ED03 + 0x2545F4914F6CDD1D) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mask_words(ids, special, offsets, seed, stream, mask_id):
    word_ids, not_first = transformers.DataCollatorForLanguageModeling._calc_word_ids_and_prob_mask(
        np.array([offsets]), np.array([special]))
    word_ids, first = word_ids[0], ~not_first[0]
    choose = int(MLM_P * 16777216.0)
    chosen = {word_ids[t] for t in range(len(ids))
              if first[t] and (bits(seed, ((stream << 32) + t) & M64) >> 40) < choose}
    ids, labels = list(ids), [-100] * len(ids)
    for t in range(len(ids)):
        if word_ids[t] != -1 and word_ids[t] in chosen:
            labels[t], ids[t] = ids[t], mask_id
    return ids, labels


def mask_block(ids, special, seed, stream, mask_id, vocab):
    choose, as_mask, as_random = int(MLM_P * 16777216.0), int(MASK_P * 16777216.0), int(
        min(1.0, MASK_P + RANDOM_P) * 16777216.0)
    ids, labels = list(ids), [-100] * len(ids)
    for t in range(len(ids)):
        if special[t]:
            continue
        counter = ((stream << 32) + t) & M64
        h = bits(seed, counter)
        if (h >> 40) >= choose:
            continue
        labels[t] = ids[t]
        kind = (h >> 16) & 0xFFFFFF
        if kind < as_mask:
            ids[t] = mask_id
        elif kind < as_random:
            ids[t] = bits(seed ^ RANDOM_SALT, counter) % vocab
    return ids, labels


# ---- run_mlm.py's blocks -----------------------------------------------------------------------

def split(lines):
    n_val = int(round(VAL_PERCENT * len(lines) / 100.0))  # datasets' train[:5%] (rounding "closest")
    return lines[n_val:], lines[:n_val]


def grouped(tok, lines, size, offsets=False):
    blocks = []
    for g in range(0, len(lines), 1000):  # datasets' map(batched=True): 1,000 lines a batch
        enc = tok(lines[g:g + 1000], return_special_tokens_mask=True, return_offsets_mapping=offsets)
        ids = [i for x in enc["input_ids"] for i in x]
        sp = [s for x in enc["special_tokens_mask"] for s in x]
        total = len(ids) // size * size
        if offsets:
            off = [tuple(o) for x in enc["offset_mapping"] for o in x]
            blocks += [(ids[i:i + size], sp[i:i + size], off[i:i + size]) for i in range(0, total, size)]
        else:
            blocks += [(ids[i:i + size], sp[i:i + size]) for i in range(0, total, size)]
    return blocks


def line_by_line(tok, lines, size):
    lines = [l for l in lines if len(l) > 0 and not l.isspace()]
    enc = tok(lines, truncation=True, max_length=size, return_special_tokens_mask=True)
    return list(zip(enc["input_ids"], enc["special_tokens_mask"]))


def digest(blocks):
    h = 0
    for ids, _ in blocks:
        for i in ids:
            h = (h * 1000003 + i + 1) & M64
        h = (h * 1000003) & M64
    return str(h)  # (JSON's numbers stop at 2⁵³)


def summary(blocks):
    return {"count": len(blocks), "tokens": sum(len(i) for i, _ in blocks), "digest": digest(blocks),
            "first": [{"ids": i, "special": s} for i, s in blocks[:2]]}


# ---- one step ----------------------------------------------------------------------------------

def batch_of(tok, blocks, seed, mask_id, vocab):
    T = max(len(b[0]) for b in blocks)
    ids, labels, att = [], [], []
    for b, block in enumerate(blocks):
        x, y = (mask_words(*block, seed, b, mask_id) if len(block) == 3 else
                mask_block(*block, seed, b, mask_id, vocab))
        pad = T - len(x)
        ids.append(x + [tok.pad_token_id] * pad)
        labels.append(y + [-100] * pad)
        att.append([1] * len(x) + [0] * pad)
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(att)}, torch.tensor(labels)


def evaluate(m, inputs, labels):
    with torch.no_grad():
        out = m(**inputs, labels=labels)
        chosen = labels != -100
        right = (out.logits.argmax(-1) == labels) & chosen
        return out.loss.item(), right.sum().item() / chosen.sum().item(), int(chosen.sum())


def step(name, folder, mode):
    path = os.path.join(HERE, "hf", folder)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    m = transformers.AutoModelForMaskedLM.from_pretrained(path).float()
    m.eval()
    vocab = min(len(tok), m.config.vocab_size)
    blocks = (grouped(tok, STEP_LINES, MAX_LENGTH, offsets=mode == "whole_word") if mode != "line_by_line" else
              line_by_line(tok, STEP_LINES, MAX_LENGTH_LBL))
    train_in, train_labels = batch_of(tok, blocks, SEED, tok.mask_token_id, vocab)
    val_in, val_labels = batch_of(tok, blocks, SEED ^ VAL_SALT, tok.mask_token_id, vocab)
    val_loss0, val_acc0, val_chosen = evaluate(m, val_in, val_labels)
    loss = m(**train_in, labels=train_labels).loss
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters() if p.grad is not None)).item()
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                      betas=BETAS, eps=EPS).step()
    val_loss1, val_acc1, _ = evaluate(m, val_in, val_labels)
    return {"blocks": len(blocks), "chosen": int((train_labels != -100).sum()), "val_chosen": val_chosen,
            "loss": loss.item(), "grad_norm": norm, "val_loss": val_loss0, "val_accuracy": val_acc0,
            "val_loss_after_step": val_loss1, "val_accuracy_after_step": val_acc1}


def case(name, folder):
    tok = transformers.AutoTokenizer.from_pretrained(os.path.join(HERE, "hf", folder))
    train, val = split(LINES)
    return {"case": name, "folder": folder,
            "grouped": {"train": summary(grouped(tok, train, MAX_LENGTH)), "val": summary(grouped(tok, val, MAX_LENGTH))},
            "line_by_line": {"train": summary(line_by_line(tok, train, MAX_LENGTH_LBL)),
                             "val": summary(line_by_line(tok, val, MAX_LENGTH_LBL))},
            "step_grouped": step(name, folder, "grouped"), "step_line_by_line": step(name, folder, "line_by_line"),
            "step_whole_word": step(name, folder, "whole_word")}


def main():
    torch.manual_seed(0)
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "max_length": MAX_LENGTH,
           "max_length_line_by_line": MAX_LENGTH_LBL, "val_fraction": VAL_PERCENT / 100, "seed": SEED,
           "lines": LINES, "step_lines": STEP_LINES, "cases": [case(*c) for c in CASES]}
    with open(os.path.join(HERE, "hf_mlm.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
        f.write("\n")
    for c in out["cases"]:
        g, l = c["step_grouped"], c["step_line_by_line"]
        print(f"{c['case']:11s} blocks {c['grouped']['train']['count']}/{c['grouped']['val']['count']} "
              f"lbl {c['line_by_line']['train']['count']}/{c['line_by_line']['val']['count']}  step: "
              f"{g['blocks']} blocks {g['chosen']} chosen loss {g['loss']:.5f} |g| {g['grad_norm']:.4g} "
              f"val {g['val_loss']:.5f} → {g['val_loss_after_step']:.5f}; lbl loss {l['loss']:.5f} "
              f"val {l['val_loss']:.5f} → {l['val_loss_after_step']:.5f}; wwm {c['step_whole_word']['chosen']} chosen "
              f"loss {c['step_whole_word']['loss']:.5f}")


if __name__ == "__main__":
    main()
