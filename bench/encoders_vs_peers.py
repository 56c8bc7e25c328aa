#!/usr/bin/env python3
"""Converted encoders (BERT-base sized, MPNet-base: --arch mpnet, DeBERTa-v3-base: --arch deberta, ModernBERT-base:
--arch modernbert, albert-base-v2: --arch albert): qkv against
transformers (PyTorch) and
CTranslate2 on the same folder — texts classified a second, and texts encoded to sentence embeddings a second, with each
engine's peak RSS.

    pip install torch transformers tokenizers ctranslate2                    # the peers (PyPI)
    PYTHONPATH=build/python/stage python3 bench/encoders_vs_peers.py [--arch bert|mpnet|deberta] [--threads 2] [--rounds 3]

The model is random (no hub here), built by transformers from a seed and saved with save_pretrained
into --out once: BertForSequenceClassification, 12 layers, d 768, 12 heads, FFN 3072, 512 positions,
vocab 30,522 (a WordPiece vocabulary of Tatoeba's English words), 3 labels (~110 M parameters).
qkv converts it with qkv.convert; CTranslate2 with ct2-transformers-converter (its Encoder: the BERT
encoder and pooler; it has no classification head, so it is timed on embeddings only). Each in f32 and
int8 (qkv: weights="int8", the layers' matrices as int8 rows; CTranslate2: compute_type="int8").
--arch mpnet: all-mpnet-base-v2's network instead (MPNetForSequenceClassification and MPNetModel, the
same sizes, 514 positions, a relative position bias of 32 buckets; MPNet's tokenizer over the same
pieces), which CTranslate2 4.8.5 does not convert: qkv and transformers only.
--arch deberta: deberta-v3-base's network (DebertaV2ForSequenceClassification and DebertaV2Model: the
same sizes, disentangled attention over 256 log-bucketed relative positions each way, no absolute
positions, no token types; a SentencePiece Unigram of the pieces those sentences yield (~7,400), as
DebertaV2Tokenizer converts it), which CTranslate2 does not convert either.
--arch albert: albert-base-v2's network (AlbertForSequenceClassification and AlbertModel: 12 layers sharing
one layer's parameters, d 768, 12 heads, FFN 3072, embeddings of 128 projected up, vocab 30,000; a
SentencePiece Unigram of the same sentences, as AlbertTokenizer converts it), which CTranslate2 does not
convert either.
--arch modernbert: ModernBERT-base's network (ModernBertForSequenceClassification and ModernBertModel: 22
layers, d 768, 12 heads, a gated MLP of 1152, rotary positions, every third layer global and the others
within 64 tokens either way, vocab 50,368; a byte-level BPE of 16,000 pieces trained on the same sentences,
in ModernBERT's tokenizer form), which CTranslate2 does not convert either.

Workloads: --texts English Tatoeba sentences (8–25 words; ~16 tokens), in batches of --batch,
tokenization included, each engine in a fresh process (its own peak RSS), rounds alternating
engines, medians reported:
  classify   scores of every label for each text (transformers: tokenizer + model + softmax;
             qkv: MaskedLanguageModel.text_classification(top_k=None))
  embed      the mean of the last hidden states over each text's tokens (transformers: BertModel
             of the same weights + masked mean; CTranslate2: Encoder.forward_batch + the same mean;
             qkv: MaskedLanguageModel.encode(pooling="mean"))
--long N: documents instead of sentences — consecutive sentences joined to about N tokens (--texts of
them, in batches of --batch), the embed task alone: long inputs, where ModernBERT's local layers see
128 of the N keys (qkv computes only the keys near each block of queries; transformers' sdpa computes every
score under the mask).
The outputs are checked against transformers' f32 (max abs difference, and for embeddings the least
cosine similarity, printed).
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data", "tatoeba-en-fr", "fra.txt.gz")


def texts(n, long=0):
    """n Tatoeba sentences, or (long > 0) n documents of about `long` tokens (~0.75 words a token)."""
    if long:
        sentences, docs, words = iter(texts(200000)), [], int(long * 0.75)
        for _ in range(n):
            doc = []
            while sum(len(x.split()) for x in doc) < words:
                doc.append(next(sentences))
            docs.append(" ".join(doc))
        return docs
    out = []
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        for line in f:
            en = line.split("\t")[0]
            if 8 <= len(en.split()) <= 25:
                out.append(en)
                if len(out) == n:
                    break
    return out


def build(out, arch):
    """The random BERT-base (or MPNet-base) folder and its converted copies (once)."""
    if os.path.exists(os.path.join(out, "done")):
        return
    import torch
    import transformers
    import tatoeba_wordpiece
    torch.manual_seed(0)
    corpus = texts(60000)
    pieces = tatoeba_wordpiece.pieces(corpus)
    fast = tatoeba_wordpiece.tokenizer(corpus)
    labels = {0: "NEGATIVE", 1: "NEUTRAL", 2: "POSITIVE"}
    if arch == "deberta":
        import tempfile
        import sentencepiece as spm
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "train.txt"), "w", encoding="utf-8") as f:
                f.write("\n".join(corpus))
            spm.SentencePieceTrainer.train(input=os.path.join(d, "train.txt"), model_prefix=os.path.join(d, "spm"),
                                           model_type="unigram", vocab_size=16000, hard_vocab_limit=False, minloglevel=2, pad_id=0, bos_id=1,
                                           eos_id=2, unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]", eos_piece="[SEP]",
                                           unk_piece="[UNK]", user_defined_symbols=["[MASK]"])
            os.remove(os.path.join(d, "train.txt"))
            fast = transformers.DebertaV2Tokenizer.from_pretrained(d)
        fast.model_max_length = 512
        model = transformers.DebertaV2ForSequenceClassification(transformers.DebertaV2Config(
            vocab_size=len(fast), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=512, relative_attention=True, position_buckets=256,
            norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"], layer_norm_eps=1e-7,
            max_relative_positions=-1, position_biased_input=False, type_vocab_size=0, id2label=labels)).eval()
    elif arch == "albert":
        # albert-base-v2's shape and tokenizer form (a SentencePiece Unigram as AlbertTokenizer converts it)
        import tempfile
        import sentencepiece as spm
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "train.txt"), "w", encoding="utf-8") as f:
                f.write("\n".join(corpus))
            spm.SentencePieceTrainer.train(input=os.path.join(d, "train.txt"), model_prefix=os.path.join(d, "spiece"),
                                           model_type="unigram", vocab_size=16000, hard_vocab_limit=False,
                                           minloglevel=2, pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="<pad>",
                                           unk_piece="<unk>", bos_piece="[CLS]", eos_piece="[SEP]",
                                           user_defined_symbols=["[MASK]"])
            os.remove(os.path.join(d, "train.txt"))
            fast = transformers.AlbertTokenizer.from_pretrained(d)
        fast.model_max_length = 512
        model = transformers.AlbertForSequenceClassification(transformers.AlbertConfig(
            vocab_size=30000, embedding_size=128, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
            id2label=labels)).eval()
    elif arch == "modernbert":
        # ModernBERT-base's tokenizer form (NFC, byte-level BPE, [CLS] $A [SEP], no token types), trained on
        # the same sentences; the model's vocabulary stays ModernBERT-base's 50,368 (ids above the BPE's unused)
        from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, \
            trainers
        tk = Tokenizer(models.BPE())
        tk.normalizer = normalizers.NFC()
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        tk.train_from_iterator(corpus, trainers.BpeTrainer(
            vocab_size=16000, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"], show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tk.add_special_tokens([AddedToken("[MASK]", lstrip=True, special=True)])
        tk.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", tk.token_to_id("[CLS]")), ("[SEP]", tk.token_to_id("[SEP]"))])
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]",
                                                    cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                                    model_input_names=["input_ids", "attention_mask"])
        fast.model_max_length = 8192
        model = transformers.ModernBertForSequenceClassification(transformers.ModernBertConfig(
            pad_token_id=fast.pad_token_id, bos_token_id=fast.cls_token_id, cls_token_id=fast.cls_token_id,
            eos_token_id=fast.sep_token_id, sep_token_id=fast.sep_token_id, id2label=labels)).eval()
    elif arch == "mpnet":
        mp = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]"] + pieces[5:30522] + ["<mask>"]
        fast = transformers.MPNetTokenizer(vocab={p: i for i, p in enumerate(mp)})
        model = transformers.MPNetForSequenceClassification(
            transformers.MPNetConfig(vocab_size=len(mp), id2label=labels)).eval()
    else:
        cfg = transformers.BertConfig(vocab_size=30522, id2label=labels, pad_token_id=0)
        model = transformers.BertForSequenceClassification(cfg).eval()
    cls_dir, enc_dir = os.path.join(out, "bert-cls"), os.path.join(out, "bert-model")
    model.save_pretrained(cls_dir, safe_serialization=True)
    fast.save_pretrained(cls_dir)
    model.base_model.save_pretrained(enc_dir, safe_serialization=True)  # the same weights as a BertModel / MPNetModel
    fast.save_pretrained(enc_dir)
    import qkv
    qkv.convert(cls_dir, os.path.join(out, "bert-cls.safetensors"))
    qkv.convert(enc_dir, os.path.join(out, "bert-model.safetensors"))
    if arch != "bert":  # (CTranslate2 converts no MPNet, no DeBERTa, no ModernBERT, no ALBERT)
        open(os.path.join(out, "done"), "w").close()
        return
    # CTranslate2 4.8's converter reads BertConfig.position_embedding_type, which transformers 5 dropped
    # (absolute positions, what the model has): written into the folder's config for it
    cfg_path = os.path.join(enc_dir, "config.json")
    c = json.load(open(cfg_path))
    c.setdefault("position_embedding_type", "absolute")
    json.dump(c, open(cfg_path, "w"), indent=2)
    subprocess.run(["ct2-transformers-converter", "--model", enc_dir, "--output_dir", os.path.join(out, "ct2"),
                    "--force"], check=True, capture_output=True)
    open(os.path.join(out, "done"), "w").close()


def run_one(engine, task, out, n, batch, threads, long=0):
    """One engine on one task in this process: (texts / s, outputs for the check)."""
    import numpy as np
    lines = texts(n, long)
    if engine == "transformers":
        import torch
        import transformers
        torch.set_num_threads(threads)
        folder = os.path.join(out, "bert-cls" if task == "classify" else "bert-model")
        tok = transformers.AutoTokenizer.from_pretrained(folder)
        model = (transformers.AutoModelForSequenceClassification if task == "classify" else
                 transformers.AutoModel).from_pretrained(folder).eval()

        def work():
            res = []
            with torch.inference_mode():
                for i in range(0, len(lines), batch):
                    enc = tok(lines[i:i + batch], padding=True, return_tensors="pt")
                    o = model(**enc)
                    if task == "classify":
                        res.append(torch.softmax(o.logits, -1).numpy())
                    else:
                        m = enc["attention_mask"].unsqueeze(-1).float()
                        res.append(((o.last_hidden_state * m).sum(1) / m.sum(1)).numpy())
            return np.concatenate(res)
    elif engine.startswith("ctranslate2"):
        import ctranslate2
        import transformers
        tok = transformers.AutoTokenizer.from_pretrained(os.path.join(out, "bert-model"))
        enc_model = ctranslate2.Encoder(os.path.join(out, "ct2"), device="cpu", intra_threads=threads,
                                        compute_type="int8" if engine.endswith("int8") else "float32")

        def work():
            res = []
            for i in range(0, len(lines), batch):
                ids = tok(lines[i:i + batch])["input_ids"]
                o = enc_model.forward_batch([tok.convert_ids_to_tokens(x) for x in ids])
                h = np.array(o.last_hidden_state)
                lengths = np.array([len(x) for x in ids])
                mask = (np.arange(h.shape[1])[None, :] < lengths[:, None])[..., None]
                res.append((h * mask).sum(1) / lengths[:, None])
            return np.concatenate(res)
    else:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import qkv
        model = qkv.MaskedLanguageModel(os.path.join(out, "bert-cls.safetensors" if task == "classify"
                                                     else "bert-model.safetensors"),
                                        weights="int8" if engine.endswith("int8") else "f32")
        qkv.set_num_threads(threads)

        def work():
            if task == "classify":
                r = model.text_classification(lines, top_k=None, batch_size=batch)
                order = model.labels
                return np.array([[next(x["score"] for x in t if x["label"] == lab) for lab in order] for t in r])
            return model.encode(lines, pooling="mean", batch_size=batch)
    work()  # warm-up (one pass)
    t0 = time.perf_counter()
    res = work()
    return len(lines) / (time.perf_counter() - t0), res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["bert", "mpnet", "deberta", "modernbert", "albert"], default="bert")
    ap.add_argument("--out", help="where the random folders go (default /tmp/qkv-encoder-bench[-ARCH])")
    ap.add_argument("--texts", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--long", type=int, default=0, metavar="N",
                    help="documents of about N tokens instead of sentences (the embed task only)")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # ENGINE TASK: a child process
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)  # the folders, in a child
    args = ap.parse_args()
    args.out = args.out or "/tmp/qkv-encoder-bench" + ("" if args.arch == "bert" else "-" + args.arch)
    if args.one:
        import resource

        import numpy as np
        rate, res = run_one(args.one[0], args.one[1], args.out, args.texts, args.batch, args.threads, args.long)
        np.save(os.path.join(args.out, f"out-{args.one[0]}-{args.one[1]}.npy"), res)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"rate": rate, "rss_mib": rss}))
        return
    os.makedirs(args.out, exist_ok=True)
    if args.build_only:
        build(args.out, args.arch)
        return
    # the folders built in a child process: a peak RSS is inherited across fork and exec, and the
    # engines' children would report the builder's
    subprocess.run([sys.executable, __file__, "--arch", args.arch, "--out", args.out, "--build-only"], check=True)
    import numpy as np
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(args.threads))
    plan = {"classify": ["qkv", "qkv-int8", "transformers"],
            "embed": ["qkv", "qkv-int8", "transformers"] + (["ctranslate2", "ctranslate2-int8"] if args.arch == "bert" else [])}
    if args.long:
        plan = {"embed": ["qkv", "qkv-int8", "transformers"]}
        import transformers
        tok = transformers.AutoTokenizer.from_pretrained(os.path.join(args.out, "bert-model"))
        lengths = [len(x) for x in tok(texts(args.texts, args.long))["input_ids"]]
        print(f"documents of {min(lengths)}–{max(lengths)} tokens (mean {statistics.mean(lengths):.0f})")
    print(f"{args.texts} texts, batches of {args.batch}, {args.threads} threads, {args.rounds} rounds (medians)")
    for task, engines in plan.items():
        got = {e: [] for e in engines}
        for _ in range(args.rounds):
            for e in engines:
                p = subprocess.run([sys.executable, __file__, "--arch", args.arch, "--out", args.out, "--texts", str(args.texts), "--batch",
                                    str(args.batch), "--threads", str(args.threads), "--long", str(args.long),
                                    "--one", e, task],
                                   capture_output=True, text=True, env=env)
                if p.returncode != 0:
                    sys.exit(f"{e} {task} failed:\n{p.stderr[-2000:]}")
                got[e].append(json.loads(p.stdout.strip().splitlines()[-1]))
        ref = np.load(os.path.join(args.out, f"out-transformers-{task}.npy"))
        base = statistics.median(r["rate"] for r in got["transformers"])
        for e in engines:
            rate = statistics.median(r["rate"] for r in got[e])
            rss = statistics.median(r["rss_mib"] for r in got[e])
            o = np.load(os.path.join(args.out, f"out-{e}-{task}.npy"))
            diff = float(np.abs(o - ref).max())
            cos = float(((o * ref).sum(1) / np.linalg.norm(o, axis=1) / np.linalg.norm(ref, axis=1)).min())
            print(f"{task:8s} {e:16s} {rate:8.{1 if rate >= 10 else 3}f} texts/s  ×{rate / base:5.2f} transformers  "
                  f"peak RSS {rss:6.0f} MiB  max |Δ| {diff:.1e}" + (f"  min cos {cos:.5f}" if task == "embed" else ""))


if __name__ == "__main__":
    main()
