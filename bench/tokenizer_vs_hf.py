#!/usr/bin/env python3
"""qkv's Hugging Face tokenizers (text::HfTokenizer) beside Hugging Face's own `tokenizers`, here.

Each side loads the same tokenizer.json and encodes the same lines, with the special tokens:
  * qkv:        `qkv bench tokenizer DIR -i LINES --json` — one thread, a line at a time (how a
                translator, a server or a data loader calls it), the median of --repeats passes;
  * tokenizers: Tokenizer.from_file(DIR/tokenizer.json) in this process, a line at a time
                (`encode`) and the whole file in one call (`encode_batch`, its Rust threads:
                RAYON_NUM_THREADS = --threads), the median of --repeats passes.
The ids must be the same (token counts and the sums of the ids are compared). The tokenizers: the
golden ones of tests/golden/tokenizers (GPT-2's byte-level BPE, Llama 3's regex, Llama 2's byte
fallback, BERT's WordPiece uncased and cased, XLM-RoBERTa's Unigram with SentencePiece's nmt_nfkc
charsmap, a T5-like Unigram with byte fallback, trained by tests/golden/make_tokenizer_golden.py) and
the golden Qwen2 folder's (--only NAME …: those alone; --only DIR: a folder of your own). --big adds
XLM-RoBERTa-sized Unigram vocabularies, built in a temporary folder: SentencePiece trained to 32,000
pieces on Tatoeba and Shakespeare (converted by transformers' XLMRobertaTokenizer), and the same
padded with random low-scored pieces to XLM-R's 250,002 (its trie's size; the segmentation hardly
changes) — they need sentencepiece, protobuf and transformers. The lines: the golden corpus (10,000 lines of several scripts, emoji,
combining marks, whitespace runs — its invalid UTF-8 lines left out, so both sides read the same
text), and English sentences of the bundled Tatoeba pairs.

  pip install tokenizers
  python3 bench/tokenizer_vs_hf.py [--qkv build/qkv] [--lines 10000] [--repeats 5] [--threads 2] [--rounds 3]
                                   [--only xlmr unigram] [--big]
"""
import argparse
import base64
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = [os.path.join(REPO, "tests/golden/tokenizers", n) for n in
           ("gpt2", "llama3", "byte_fallback", "bert_uncased", "bert_cased", "xlmr", "unigram")] + [os.path.join(REPO, "tests/golden/hf/qwen2")]


def corpora(n, tmp):
    """{name: path} of two line files, valid UTF-8, no CR or LF inside a line."""
    out = {}
    lines = []
    with gzip.open(os.path.join(REPO, "tests/golden/tokenizers/corpus.jsonl.gz"), "rt") as f:
        for rec in f:
            try:
                text = base64.b64decode(json.loads(rec)["b"]).decode("utf-8")
            except UnicodeDecodeError:
                continue
            lines.append(text.replace("\r", " ").replace("\n", " "))
    out["golden corpus"] = lines[:n]
    with gzip.open(os.path.join(REPO, "data/tatoeba-en-fr/fra.txt.gz"), "rt", encoding="utf-8") as f:
        out["tatoeba english"] = [line.split("\t")[0] for _, line in zip(range(n), f)]
    paths = {}
    for name, ls in out.items():
        p = os.path.join(tmp, name.replace(" ", "-") + ".txt")
        with open(p, "w", encoding="utf-8") as f:
            f.write("\n".join(ls) + "\n")
        paths[name] = (p, ls)
    return paths


def big_unigrams(tmp):
    """Two large XLM-RoBERTa-form tokenizers (the docstring's --big): their folders."""
    import random
    import sentencepiece as spm
    from transformers import XLMRobertaTokenizer
    text = []
    with gzip.open(os.path.join(REPO, "data/tatoeba-en-fr/fra.txt.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            text += line.rstrip("\n").split("\t")[:2]
    with open(os.path.join(REPO, "data/tinyshakespeare/input.txt"), encoding="utf-8") as f:
        text += f.read().splitlines()
    raw = os.path.join(tmp, "spm")
    os.makedirs(raw)
    with open(os.path.join(raw, "train.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(text))
    spm.SentencePieceTrainer.train(input=os.path.join(raw, "train.txt"), model_prefix=os.path.join(raw, "sentencepiece.bpe"),
                                   vocab_size=32000, model_type="unigram", minloglevel=2, hard_vocab_limit=False)
    small = os.path.join(tmp, "xlmr-32k")
    XLMRobertaTokenizer.from_pretrained(raw).save_pretrained(small)
    j = json.load(open(os.path.join(small, "tokenizer.json"), encoding="utf-8"))
    vocab = j["model"]["vocab"]
    have = {p for p, _ in vocab}
    rng = random.Random(1)
    alphabet = "abcdefghijklmnopqrstuvwxyzéèàçœабвгдежзийклмнопрстуфхцчшщ你好世界日本語のテスト"
    while len(vocab) < 250002:
        p = ("▁" if rng.random() < 0.6 else "") + "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 9)))
        if p not in have:
            have.add(p)
            vocab.append([p, -20.0 - rng.random()])
    large = os.path.join(tmp, "xlmr-250k")
    os.makedirs(large)
    with open(os.path.join(large, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return [small, large]


def hf_side(folder, lines, repeats):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    ids = [tok.encode(line).ids for line in lines]
    tokens, id_sum = sum(len(i) for i in ids), sum(sum(i) for i in ids)

    def median_seconds(f):
        f()
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    one = median_seconds(lambda: [tok.encode(line) for line in lines])
    batch = median_seconds(lambda: tok.encode_batch(lines))
    return tokens, id_sum, len(lines) / one, len(lines) / batch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(REPO, "build/qkv"))
    ap.add_argument("--lines", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="encode_batch's threads (RAYON_NUM_THREADS)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, qkv and tokenizers alternating; medians shown")
    ap.add_argument("--big", action="store_true", help="add 32k- and 250k-piece Unigram tokenizers (XLM-R's size)")
    ap.add_argument("--only", nargs="+", default=[],
                    help="the golden tokenizers' names to run, or folders of tokenizer.json of your own (default: all)")
    a = ap.parse_args()
    folders = [f for f in FOLDERS if not a.only or os.path.basename(f) in a.only]
    folders += [os.path.abspath(p) for p in a.only if os.path.isdir(p)]
    # Read once, when the Rust thread pool starts (the first encode_batch): set before anything runs.
    os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    import tokenizers
    print(f"tokenizers {tokenizers.__version__}; qkv {a.qkv}; {a.lines} lines a corpus, medians of {a.rounds} rounds "
          f"of {a.repeats} passes")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if a.big:
            folders += big_unigrams(tmp)
        for cname, (path, lines) in corpora(a.lines, tmp).items():
            for folder in folders:
                q, h1, hb = [], [], []
                for _ in range(a.rounds):
                    r = subprocess.run([a.qkv, "bench", "tokenizer", folder, "-i", path, "--json",
                                        "--repeats", str(a.repeats)], capture_output=True, text=True, check=True)
                    qj = json.loads(r.stdout)
                    tokens, id_sum, one, batch = hf_side(folder, lines, a.repeats)
                    if (qj["tokens"], qj["id_sum"]) != (tokens, id_sum):
                        sys.exit(f"{folder} on {cname}: qkv {qj['tokens']} tokens (id sum {qj['id_sum']}), "
                                 f"tokenizers {tokens} ({id_sum}): not the same ids")
                    q.append(qj["lines_per_s"]), h1.append(one), hb.append(batch)
                rows.append((cname, os.path.relpath(folder, REPO) if folder.startswith(REPO) else os.path.basename(folder), statistics.median(q), statistics.median(h1),
                             statistics.median(hb)))
    print(f"\n| lines | tokenizer | qkv, 1 thread, lines/s | tokenizers encode, lines/s | qkv ÷ | "
          f"tokenizers encode_batch ({a.threads} threads), lines/s | qkv ÷ |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for c, f, q, h1, hb in rows:
        print(f"| {c} | {f} | {q:,.0f} | {h1:,.0f} | {q / h1:.2f}× | {hb:,.0f} | {q / hb:.2f}× |")
    print("\n(the same ids on both sides: token counts and id sums compared for every tokenizer and corpus)")


if __name__ == "__main__":
    main()
