#!/usr/bin/env python3
"""Fine-tuning a BERT sequence classifier (or, --task qa, extractive question answering; --task mlm,
masked-language-model pre-training continued on a text; --task swag, multiple choice) on the CPU: `qkv
train` (task text_classification; question_answering; masked_lm; multiple_choice) against transformers
(PyTorch), the same model, the same batches, the same optimizer, in one run — examples (windows; tokens)
a second and each side's peak RSS.

    pip install torch transformers tokenizers                                # the peer (PyPI)
    python3 bench/finetune_vs_transformers.py [--size base] [--batch 32] [--steps 20] [--threads 2] [--rounds 2]
    python3 bench/finetune_vs_transformers.py --task qa [--batch 12] [--max-length 384] [--doc-stride 128]
    python3 bench/finetune_vs_transformers.py --task mlm [--batch 8] [--max-length 128]
    python3 bench/finetune_vs_transformers.py --task swag [--batch 16] [--max-length 80]

The model is random (no hub here): a transformers BertForMaskedLM of --size (base: 12 layers, d 768,
12 heads, FFN 3072, 512 positions, BERT's 30,522 embeddings, ~110 M parameters; small: 4 layers, d 512,
8 heads, FFN 2048; tiny: 2 layers, d 128, 2 heads, FFN 512) with bench/tatoeba_wordpiece.py's WordPiece
tokenizer (Tatoeba's English words, ~14,000 pieces), saved with save_pretrained into --out once (rebuilt
when --size or --examples change) — a pretrained MLM checkpoint as a user downloads one.
Each side puts a new 2-label classifier on it:
  qkv           `qkv convert FOLDER --head sequence --labels statement,question`, then `qkv train` of
                {"task": "text_classification", "init_from": …} (-q, --threads N); its rate is the median
                over steps ≥ --skip of metrics.jsonl's tokens_per_s (examples a second for this task:
                the step's forward, backward, clipping and AdamW update).
  transformers  BertForSequenceClassification.from_pretrained(FOLDER, num_labels=2), model.train(),
                torch.optim.AdamW (weight decay on the matrices only, as qkv groups it and Trainer does);
                each step: the batch padded (tokenizer.pad: DataCollatorWithPadding's), model(**batch,
                labels=…).loss.backward(), clip_grad_norm_(1.0), step, zero_grad — timed whole; the
                median over steps ≥ --skip of batch / step time.
--task qa (run_qa.py's work): each side puts a new question-answering head on the checkpoint (`qkv
convert --head span`; BertForQuestionAnswering.from_pretrained(FOLDER)); the data: --examples
contexts of 16 Tatoeba sentences (~180 tokens, SQuAD's paragraphs' size), each asked a question (another sentence) whose answer is
one of its sentences (JSONL, Hugging Face datasets' squad rows); both sides cut them into windows of
--max-length tokens, --doc-stride apart, as tokenizer(question, context, truncation="only_second",
stride, return_overflowing_tokens=True) cuts them (qkv's windows are run_qa.py's: tested), with
run_qa.py's start and end positions; transformers' step is model(**batch, start_positions=…,
end_positions=…).loss.backward() and the rest as above; the rate is windows a second.
--task mlm (run_mlm.py's work): the checkpoint as it is (`qkv convert FOLDER`; BertForMaskedLM); the
data: --examples Tatoeba sentences, a line each, tokenized with their special tokens and grouped into
blocks of --max-length tokens (each 1,000 lines' remainder dropped: run_mlm.py's group_texts, qkv's
blocks: tested); the masks qkv's (15 % of the tokens that are not special: 80 % [MASK], 10 % random,
10 % kept — the collator's rates), drawn here by qkv's hash so that both sides train on the same
masked batches; transformers' step is model(input_ids, labels=…).loss.backward() (the MLM head over
every token, its [B, T, 30522] logits, as BertForMaskedLM computes it; qkv's head reads the ~15 %
chosen tokens alone) and the rest as above; the rate is tokens (B × T) a second.
--task swag (run_swag.py's work): each side puts a new multiple-choice head on the checkpoint (`qkv
convert --head choice`; BertForMultipleChoice.from_pretrained(FOLDER)); the data: --examples SWAG-shaped
rows of Tatoeba sentences (a context, four endings: sentences drawn at random, one of them labelled right),
each ending paired with its context as run_swag.py pairs them (tokenizer(context, " " + ending,
truncation=True, max_length)); a batch's 4·B pairs padded to the longest (DataCollatorForMultipleChoice);
transformers' step is model(**batch, labels=…).loss.backward() and the rest as above; the rate is
examples a second.
Both: lr 2e-5 constant (no warm-up), betas 0.9 / 0.999, eps 1e-8, weight decay 0.01, dropout 0.1 (the
config's), f32. The data: --examples English Tatoeba sentences (unique, drawn with a seed), labelled
"question" where the sentence ends with '?', else "statement" (a TSV, `sentence<TAB>label`), each
tokenized once before training and cut to --max-length tokens (qkv encodes its data before step 0;
transformers' users map the tokenizer over the dataset). The batches are the same examples in the
same order on both sides: the script draws qkv's epoch order (include/qkv/io/sample.h's EpochOrder,
the config's seed) for transformers, so each step pads to the same length T on both (checked: with lr 0
and no dropout, the two sides' losses agree at every step to 6e-8).

Each side runs in a fresh process (OMP_NUM_THREADS=N, OMP_WAIT_POLICY=PASSIVE; transformers also
torch.set_num_threads(N)); --rounds rounds alternate the sides' order; medians reported. Peak RSS:
transformers' process's own (getrusage RUSAGE_SELF); qkv's, the `qkv train` child of a small Python
process (RUSAGE_CHILDREN) — both the whole process from start to end (qkv's includes writing its final
checkpoint). qkv's thread budget (include/qkv/core/thread_budget.h) stays on, as users get it: on a
quiet machine it keeps all N threads; --fixed-threads sets QKV_THREAD_BUDGET=off. Measure on a quiet
machine.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_progress  # noqa: E402
from host import cpu_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "data", "tatoeba-en-fr", "fra.txt.gz")
SIZES = {  # hidden, layers, heads, FFN (BERT-base; google/bert_uncased_L-4_H-512_A-8 and L-2_H-128_A-2's shapes)
    "tiny": (128, 2, 2, 512),
    "small": (512, 4, 8, 2048),
    "base": (768, 12, 12, 3072),
}
LABELS = ["statement", "question"]
LR, BETAS, EPS, WD, CLIP = 2e-5, (0.9, 0.999), 1e-8, 0.01, 1.0
SEED = 1337  # qkv train's seed: its epoch order, its dropout
MASK64 = (1 << 64) - 1




def sentences():
    """Tatoeba's English sentences (the first column), each once, in file order."""
    seen, out = set(), []
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        for line in f:
            en = line.split("\t")[0].strip()
            if en and en not in seen:
                seen.add(en)
                out.append(en)
    return out


def bits(seed, counter):
    """qkv's Generator::bits (include/qkv/core/rng.h): splitmix64's finalizer over a keyed counter."""
    z = (counter * 0x9E3779B97F4A7C15 + seed * 0xD1B54A32D192ED03 + 0x2545F4914F6CDD1D) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def epoch_order(n, seed, count):
    """The first `count` example indices qkv's trainer draws (include/qkv/io/sample.h's EpochOrder: a
    Fisher–Yates shuffle an epoch, keyed by the seed and the epoch)."""
    out, epoch = [], 0
    while len(out) < count:
        order = list(range(n))
        key = seed ^ ((0x9E3779B97F4A7C15 * (epoch + 1)) & MASK64)
        for i in range(n - 1, 0, -1):
            j = bits(key, i) % (i + 1)
            order[i], order[j] = order[j], order[i]
        out += order
        epoch += 1
    return out[:count]


def mask_block(ids, special, seed, stream, mask_id, vocab):
    """qkv's masks (include/qkv/train/masked_lm_task.h's mask_tokens): the input ids and the labels."""
    choose, as_mask, as_random = int(0.15 * 16777216.0), int(0.8 * 16777216.0), int(0.9 * 16777216.0)
    ids, labels = list(ids), [-100] * len(ids)
    for t in range(len(ids)):
        if special[t]:
            continue
        counter = ((stream << 32) + t) & MASK64
        h = bits(seed, counter)
        if (h >> 40) >= choose:
            continue
        labels[t] = ids[t]
        kind = (h >> 16) & 0xFFFFFF
        if kind < as_mask:
            ids[t] = mask_id
        elif kind < as_random:
            ids[t] = bits(seed ^ 0x6D61736B6C6D0001, counter) % vocab
    return ids, labels


def mlm_blocks(tok, lines, size):
    """run_mlm.py's group_texts: each 1,000 lines' tokens end to end, cut into blocks, the remainder dropped."""
    blocks = []
    for g in range(0, len(lines), 1000):
        enc = tok(lines[g:g + 1000], return_special_tokens_mask=True)
        ids = [i for x in enc["input_ids"] for i in x]
        sp = [s for x in enc["special_tokens_mask"] for s in x]
        whole = len(ids) // size * size
        blocks += [(ids[i:i + size], sp[i:i + size]) for i in range(0, whole, size)]
    return blocks


def build(a):
    """The random MLM checkpoint, qkv's classifier file and the TSV (once per --out and its settings)."""
    stamp = {"size": a.size, "examples": a.examples, "task": a.task}
    done = os.path.join(a.out, "done.json")
    if os.path.exists(done) and json.load(open(done)) == stamp:
        return
    import torch
    import transformers
    import tatoeba_wordpiece
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    everything = sentences()
    # the tokenizer's vocabulary: Tatoeba's English words; the examples: --examples of the sentences
    tok = tatoeba_wordpiece.tokenizer(everything)
    tok.model_max_length = 512
    hidden, layers, heads, ffn = SIZES[a.size]
    # (the embeddings of BERT's 30,522 pieces, as bert-base-uncased has; the words use ~14,000 of them)
    model = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=max(30522, len(tok)), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=ffn, max_position_embeddings=512, pad_token_id=tok.pad_token_id))
    hf = os.path.join(a.out, "hf")
    shutil.rmtree(hf, ignore_errors=True)
    model.save_pretrained(hf, safe_serialization=True)
    tok.save_pretrained(hf)
    head = (["--head", "span"] if a.task == "qa" else [] if a.task == "mlm" else ["--head", "choice"]
            if a.task == "swag" else ["--head", "sequence", "--labels", ",".join(LABELS)])
    p = subprocess.run([a.qkv, "convert", hf, *head, "-o", os.path.join(a.out, "classifier.safetensors")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"qkv convert failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    if a.task == "swag":
        rng = random.Random(0)
        for name, n in (("train.jsonl", a.examples), ("val.jsonl", 16)):
            with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
                for i in range(n):
                    parts = rng.sample(everything, 5)
                    f.write(json.dumps({"sent1": parts[0], "sent2": "", "ending0": parts[1], "ending1": parts[2],
                                        "ending2": parts[3], "ending3": parts[4], "label": rng.randrange(4)}) + "\n")
        json.dump(stamp, open(done, "w"))
        return
    if a.task == "mlm":
        picked = random.Random(0).sample(everything, a.examples + 64)
        for name, rows in (("train.txt", picked[:a.examples]), ("val.txt", picked[a.examples:])):
            with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in rows)
        json.dump(stamp, open(done, "w"))
        return
    if a.task == "qa":
        # contexts of 16 sentences; the question another sentence, the answer one of the context's
        rng = random.Random(0)
        for name, n in (("train.jsonl", a.examples), ("val.jsonl", 16)):
            with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
                for i in range(n):
                    parts = rng.sample(everything, 17)
                    context = " ".join(parts[:16])
                    answer = parts[rng.randrange(16)]
                    f.write(json.dumps({"id": f"{name}-{i}", "question": parts[16], "context": context,
                                        "answers": {"text": [answer], "answer_start": [context.index(answer)]}})
                            + "\n")
        json.dump(stamp, open(done, "w"))
        return
    picked = random.Random(0).sample(everything, a.examples + 16)
    for name, rows in (("train.tsv", picked[:a.examples]), ("val.tsv", picked[a.examples:])):
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            for s in rows:
                f.write(f"{s}\t{LABELS[s.endswith('?')]}\n")
    json.dump(stamp, open(done, "w"))


def read_tsv(path):
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [r[0] for r in rows], [LABELS.index(r[1]) for r in rows]


def run_qkv(a):
    """One `qkv train` (a child of this small process): its rates and peak RSS."""
    import resource
    work = os.path.join(a.out, "run-qkv")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = ({"train": os.path.join(a.out, "train.jsonl"), "val": os.path.join(a.out, "val.jsonl"),
             "max_length": a.max_length, "doc_stride": a.doc_stride} if a.task == "qa" else
            {"train": os.path.join(a.out, "train.tsv"), "val": os.path.join(a.out, "val.tsv"),
             "max_length": a.max_length})
    if a.task == "mlm":
        data = {"train": os.path.join(a.out, "train.txt"), "val": os.path.join(a.out, "val.txt"),
                "max_length": a.max_length}
    if a.task == "swag":
        data = {"train": os.path.join(a.out, "train.jsonl"), "val": os.path.join(a.out, "val.jsonl"),
                "max_length": a.max_length}
    config = {
        "task": {"qa": "question_answering", "mlm": "masked_lm", "swag": "multiple_choice"}.get(
            a.task, "text_classification"),
        "init_from": os.path.join(a.out, "classifier.safetensors"),
        "data": data,
        "train": {"max_iters": a.steps, "batch_size": a.batch, "optimizer": "adamw", "learning_rate": LR,
                  "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS, "weight_decay": WD, "grad_clip": CLIP,
                  "schedule": "constant", "warmup_iters": 0, "eval_interval": 0, "checkpoint_interval": 0,
                  "log_interval": 1, "seed": SEED, "dtype": "f32"},
    }
    cfg = os.path.join(work, "config.json")
    json.dump(config, open(cfg, "w"), indent=1)
    out = os.path.join(work, "out")
    p = subprocess.run([a.qkv, "train", cfg, "-o", out, "-q", "--threads", str(a.threads)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"qkv train failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    rates = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] >= a.skip]
    loss = [r["loss"] for r in rows if "loss" in r]
    shutil.rmtree(work, ignore_errors=True)
    return {"rate": statistics.median(rates), "steps": len(rates), "rss_mib": rss, "loss": [loss[0], loss[-1]]}


def qa_windows(a, tok):
    """run_qa.py's prepare_train_features over train.jsonl: the windows and their start and end positions."""
    rows = [json.loads(line) for line in open(os.path.join(a.out, "train.jsonl"), encoding="utf-8")]
    enc = tok([r["question"].lstrip() for r in rows], [r["context"] for r in rows], truncation="only_second",
              max_length=a.max_length, stride=a.doc_stride, return_overflowing_tokens=True,
              return_offsets_mapping=True)
    features, targets = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        seq = enc.sequence_ids(i)
        r = rows[enc["overflow_to_sample_mapping"][i]]
        begin = r["answers"]["answer_start"][0]
        end = begin + len(r["answers"]["text"][0])
        first, last = seq.index(1), len(seq) - 1 - seq[::-1].index(1)
        start = stop = 0
        if offsets[first][0] <= begin and offsets[last][1] >= end:
            start = first
            while start <= last and offsets[start][0] <= begin:
                start += 1
            stop = last
            while offsets[stop][1] >= end:
                stop -= 1
            start, stop = start - 1, stop + 1
        features.append({k: enc[k][i] for k in enc if k not in ("offset_mapping", "overflow_to_sample_mapping")})
        targets.append({"start_positions": start, "end_positions": stop})
    return features, targets


def run_transformers(a):
    """The same steps in transformers, in this process: its rate, padded lengths and peak RSS."""
    import resource

    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    hf = os.path.join(a.out, "hf")
    tok = transformers.AutoTokenizer.from_pretrained(hf)
    if a.task == "qa":
        model = transformers.BertForQuestionAnswering.from_pretrained(hf)
    elif a.task == "mlm":
        model = transformers.BertForMaskedLM.from_pretrained(hf)
    elif a.task == "swag":
        model = transformers.BertForMultipleChoice.from_pretrained(hf)
    else:
        model = transformers.BertForSequenceClassification.from_pretrained(
            hf, num_labels=2, id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)})
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                            betas=BETAS, eps=EPS)
    if a.task == "qa":
        features, targets = qa_windows(a, tok)
    elif a.task == "swag":
        rows = [json.loads(line) for line in open(os.path.join(a.out, "train.jsonl"), encoding="utf-8")]
        endings = ["ending0", "ending1", "ending2", "ending3"]
        enc = tok([r["sent1"] for r in rows for _ in endings], [f"{r['sent2']} {r[k]}" for r in rows for k in endings],
                  truncation=True, max_length=a.max_length)  # run_swag.py's pairs, once
        features = [[{k: enc[k][i * 4 + c] for k in enc} for c in range(4)] for i in range(len(rows))]
        targets = [{"labels": r["label"]} for r in rows]
    elif a.task == "mlm":
        lines = [line.rstrip("\n") for line in open(os.path.join(a.out, "train.txt"), encoding="utf-8")]
        blocks = mlm_blocks(tok, lines, a.max_length)
        vocab = min(len(tok), model.config.vocab_size)
    else:
        texts, labels = read_tsv(os.path.join(a.out, "train.tsv"))
        encoded = tok(texts, truncation=True, max_length=a.max_length)  # once, as qkv encodes its data
        features = [{k: encoded[k][i] for k in encoded} for i in range(len(texts))]
        targets = [{"labels": y} for y in labels]
    n = len(blocks) if a.task == "mlm" else len(features)
    order = epoch_order(n, SEED, a.steps * a.batch)  # qkv's batches
    times, lengths, loss = [], [], []
    for step in range(a.steps):
        rows = order[step * a.batch:(step + 1) * a.batch]
        t0 = time.perf_counter()
        if a.task == "mlm":  # (block k of the run masks as stream epoch·n + block: qkv's draws)
            first = step * a.batch
            masked = [mask_block(*blocks[b], SEED, (first + i) // n * n + b, tok.mask_token_id, vocab)
                      for i, b in enumerate(rows)]
            batch = {"input_ids": torch.tensor([x for x, _ in masked])}
            y = {"labels": torch.tensor([y for _, y in masked])}
        elif a.task == "swag":  # the 4·B pairs padded together, [B, 4, T] (DataCollatorForMultipleChoice)
            flat = tok.pad([p for i in rows for p in features[i]], return_tensors="pt")
            batch = {k: v.view(len(rows), 4, -1) for k, v in flat.items()}
            y = {"labels": torch.tensor([targets[i]["labels"] for i in rows])}
        else:
            batch = tok.pad([features[i] for i in rows], return_tensors="pt")
            y = {k: torch.tensor([targets[i][k] for i in rows]) for k in targets[0]}
        out = model(**batch, **y)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
        lengths.append(batch["input_ids"].shape[-1])
        loss.append(out.loss.item())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    timed = range(a.skip, a.steps)
    per_step = a.batch * a.max_length if a.task == "mlm" else a.batch  # (mlm: tokens)
    return {"rate": statistics.median(per_step / times[s] for s in timed), "steps": len(timed), "rss_mib": rss,
            "T": statistics.mean(lengths[s] for s in timed), "loss": [loss[0], loss[-1]],
            "params": sum(p.numel() for p in model.parameters()),
            "versions": f"torch {torch.__version__}, transformers {transformers.__version__}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=["classify", "qa", "mlm", "swag"], default="classify",
                    help="a sequence classifier, extractive question answering (run_qa.py's), or masked-language-model "
                         "training (run_mlm.py's)")
    ap.add_argument("--size", choices=list(SIZES), default="base")
    ap.add_argument("--batch", type=int, help="examples (windows, blocks) a step (B; default 32, qa 12: run_qa.py's, "
                                              "mlm 8)")
    ap.add_argument("--steps", type=int, default=20, help="training steps a run")
    ap.add_argument("--skip", type=int, default=3, help="first steps left out of the rate (warm-up)")
    ap.add_argument("--examples", type=int, help="labelled sentences (qa: contexts; mlm: lines) to train on (4000; "
                                                 "qa 500; mlm 20000)")
    ap.add_argument("--max-length", type=int, help="tokens an example (window, block) is cut to (default 64, qa 384, "
                                                   "mlm 128)")
    ap.add_argument("--doc-stride", type=int, default=128, help="qa: tokens a window reaches into the one before")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fixed-threads", action="store_true",
                    help="QKV_THREAD_BUDGET=off: qkv keeps --threads whatever else runs")
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--out", help="where the model and data go (default /tmp/qkv-finetune-bench-SIZE)")
    ap.add_argument("--one", choices=["qkv", "transformers"], help=argparse.SUPPRESS)  # a child process
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)  # the folder, in a child
    a = ap.parse_args()
    qa, mlm, swag = a.task == "qa", a.task == "mlm", a.task == "swag"
    a.batch = a.batch or (12 if qa else 8 if mlm else 16 if swag else 32)
    a.max_length = a.max_length or (384 if qa else 128 if mlm else 80 if swag else 64)
    if not a.examples:
        a.examples = 500 if qa else 20000 if mlm else 2000 if swag else 4000
    a.out = a.out or f"/tmp/qkv-finetune-bench-{a.size}{'' if a.task == 'classify' else '-' + a.task}"
    if a.steps <= a.skip:
        ap.error(f"--steps {a.steps} leaves no step after the --skip {a.skip} warm-up steps")
    if a.one:
        print(json.dumps(run_qkv(a) if a.one == "qkv" else run_transformers(a)))
        return
    os.makedirs(a.out, exist_ok=True)
    if a.build_only:
        build(a)
        return
    print(f"{cpu_name()}, {os.cpu_count()} cores")
    # built in a child: a peak RSS is inherited across fork and exec, and this process stays small
    subprocess.run([sys.executable, __file__, "--build-only", "--task", a.task, "--size", a.size, "--examples",
                    str(a.examples), "--out", a.out, "--qkv", a.qkv], check=True)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(a.threads))
    if a.fixed_threads:
        env["QKV_THREAD_BUDGET"] = "off"
    else:
        env.pop("QKV_THREAD_BUDGET", None)
    child = [sys.executable, __file__, "--task", a.task, "--size", a.size, "--batch", str(a.batch), "--steps",
             str(a.steps), "--skip", str(a.skip), "--examples", str(a.examples), "--max-length", str(a.max_length),
             "--doc-stride", str(a.doc_stride), "--threads", str(a.threads), "--out", a.out, "--qkv", a.qkv]
    sides = ["qkv", "transformers"]
    got = {s: [] for s in sides}
    bench_progress.start(len(sides) * a.rounds, f"fine-tuning {a.size}")
    for r in range(a.rounds):
        for s in (sides if r % 2 == 0 else sides[::-1]):  # alternate which side goes first
            with bench_progress.measuring(f"{s} round {r + 1}"):
                p = subprocess.run(child + ["--one", s], capture_output=True, text=True, env=env)
            if p.returncode != 0:
                sys.exit(f"{s} failed:\n{p.stdout[-2000:]}{p.stderr[-3000:]}")
            got[s].append(json.loads(p.stdout.strip().splitlines()[-1]))
    bench_progress.close()
    med = {s: {k: statistics.median(x[k] for x in got[s]) for k in ("rate", "rss_mib")} for s in sides}
    hf = got["transformers"][0]
    hidden, layers, heads, ffn = SIZES[a.size]
    print(f"\n{hf['versions']}; {a.threads} threads; {a.steps} steps a run, the first {a.skip} left out; "
          f"medians of {a.rounds} rounds")
    what = (f"question answering; {a.examples} contexts of 16 Tatoeba sentences, windows of {a.max_length} tokens "
            f"{a.doc_stride} apart" if qa else
            f"masked LM; {a.examples} Tatoeba sentences grouped into blocks of {a.max_length} tokens" if mlm else
            f"multiple choice; {a.examples} SWAG-shaped rows of Tatoeba sentences, 4 endings, max_length "
            f"{a.max_length}" if swag else
            f"2 labels; {a.examples} Tatoeba sentences, max_length {a.max_length}")
    print(f"model: BERT {a.size} ({layers} layers, d {hidden}, {heads} heads, FFN {ffn}; "
          f"{hf['params'] / 1e6:.1f} M parameters), {what}\n")
    unit = "windows" if qa else "tokens" if mlm else "examples"
    print(f"| model | B | T | qkv {unit}/s | transformers {unit}/s | qkv / transformers | qkv peak RSS | "
          "transformers peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    q, t = med["qkv"], med["transformers"]
    print(f"| BERT-{a.size} | {a.batch} | {hf['T']:.1f} | {q['rate']:,.{1 if q['rate'] >= 10 else 2}f} | "
          f"{t['rate']:,.{1 if t['rate'] >= 10 else 2}f} | {q['rate'] / t['rate']:.2f}× | {q['rss_mib']:,.0f} MiB | "
          f"{t['rss_mib']:,.0f} MiB |")
    print("\nT: the mean padded length of the timed batches (the same batches on both sides). "
          "Loss, first → last step: " + "; ".join(
              f"{s} " + ", ".join(f"{x['loss'][0]:.3f} → {x['loss'][1]:.3f}" for x in got[s]) for s in sides))
    print("raw:", json.dumps({s: [{k: x[k] for k in ("rate", "rss_mib", "steps")} for x in got[s]] for s in sides}))


if __name__ == "__main__":
    main()
