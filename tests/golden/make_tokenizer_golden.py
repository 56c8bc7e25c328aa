#!/usr/bin/env python3
"""Golden files for qkv's Hugging Face tokenizers (tests/text/hf_tokenizer_test.cpp).

Trains eight small tokenizers on Tatoeba text and synthetic lines (six with the `tokenizers` package; two
Unigram ones from SentencePiece's trainer, as XLM-RoBERTa's and T5's were made), saves
each one's tokenizer.json (and BERT's vocab.txt) under tests/golden/tokenizers/<name>/, and writes
tests/golden/tokenizers/corpus.jsonl.gz: 10,000 test lines (seeded: several scripts, emoji with ZWJ
sequences, combining marks, control characters, whitespace runs, digits, added tokens, and invalid
UTF-8) and, per line and tokenizer, what `tokenizers` answers:

  {"b": base64 of the line's bytes, "r": (invalid UTF-8 only) the text after the replacement,
   "<name>": [ids without special tokens,
              ids with them: [prefix, suffix] around the former, or {"ids": [...]} where not that,
              decode(with, skip_special_tokens=True), null where it is the line's text,
              (every tenth line) decode(with, skip_special_tokens=False)],
   "<bert name>_pair", "xlmr_pair" (every 20th line): the pair (line, next line) as [ids, type_ids],
   "…_pair16": the same cut to 16 tokens as truncation=True ("longest_first") cuts it}

Invalid UTF-8 reaches `tokenizers` as Python's bytes.decode("utf-8", errors="replace") makes it (a
U+FFFD per maximal invalid subpart); qkv's tokenizer replaces it the same way.

And tests/golden/tokenizers/offsets.jsonl.gz: per corpus line (same order), where each token of
encode(text, add_special_tokens=True) comes from, as `tokenizers` answers. Its offsets are Python str
(character) indices into the text; here they are UTF-8 byte offsets into that text (the line's bytes,
or for invalid UTF-8 the encoding of "r"), a character index c being the UTF-8 length of text[:c]:

  {"<name>": [[begin, end], ...] one per token, in token order (a template's special tokens: [0, 0]),
   "<name>_w": [word id, ...] encoding.word_ids, -1 for None,
   "<name>_pair" (where the corpus has it: the BERTs and xlmr, every 20th line): the pair (line, next
                 line) as [[begin, end, sequence id], ...], the offsets in bytes of the text of the
                 sequence the token belongs to, sequence id -1 for None (the template's tokens)}

  python3 tests/golden/make_tokenizer_golden.py
      (tokenizers 0.23; for the Unigram ones sentencepiece 0.2, protobuf and transformers 5, whose
      XLMRobertaTokenizer converts SentencePiece's model as a hub checkpoint's tokenizer.json has it)
      writes everything, offsets.jsonl.gz last;
  python3 tests/golden/make_tokenizer_golden.py offsets
      (tokenizers only) writes only offsets.jsonl.gz, from the saved tokenizer.json files and corpus.jsonl.gz.
"""
import base64
import gzip
import json
import os
import random
import sys
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tokenizers")
TATOEBA = os.path.join(HERE, "..", "..", "..", "shared", "data", "tatoeba-en-fr", "fra.txt.gz")

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Snippets of other scripts, emoji and marks, mixed into the synthetic lines.
WORDS = {
    "latin": ["café", "naïve", "résumé", "Ångström", "façade", "Straße", "ÉCOLE", "über", "İstanbul", "coöperate",
              "jalapeño", "Œuvre", "ǅemal", "ﬁne", "Ｆｕｌｌ"],
    "cyrillic": ["Привет", "мир", "ЁЖИК", "съешь", "ещё", "этих", "мягких", "булок"],
    "greek": ["Καλημέρα", "κόσμε", "ΣΟΦΙΑ", "ψυχή", "ἀρχή", "Ὀδυσσεύς"],
    "cjk": ["你好", "世界", "東京都", "日本語の文章", "한국어", "ひらがな", "カタカナ", "漢字テスト", "𠀀𠀁"],
    "arabic": ["مرحبا", "بالعالم", "العربية", "٣٤٥"],
    "devanagari": ["नमस्ते", "दुनिया", "हिन्दी", "१२३"],
    "emoji": ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🤖", "✨", "👩🏻‍💻"],
    "marks": ["e\u0301", "a\u0308\u0304", "n\u0303", "\u0301x", "Z\u0335\u0321", "o\u0328\u0304"],
    "control": ["\x00", "\x01", "\x07", "\x1b[0m", "\x7f", "\x85", "\u200b", "\u200d", "\u00ad", "\ufeff", "\u2028",
                "\ue000", "\ufffd"],
    "space": ["\t", "\n", "  ", "   ", "\r\n", "\u00a0", "\u3000", " \t ", "\n\n"],
    "digits": ["0", "42", "2024", "3.14159", "1,000,000", "007", "12345678901234567890", "½", "²"],
    "punct": ["!", "?", "...", "—", "«", "»", "“", "”", "'s", "'LL", "(", ")", "[", "]", "#", "@", "$", "%", "&",
              "*", "<", ">", "/", "\\", "_", "~"],
}
INVALID = [b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\x80\x80", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf5\x80"]

# Added tokens per tokenizer: the strings that appear in the synthetic lines.
SPECIAL_STRINGS = ["<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<s>", "</s>", "<unk>", "[CLS]", "[SEP]",
                   "[MASK]", "[PAD]", "[UNK]", "<mask>", "qkv-added", " padded "]


def tatoeba_lines(n, rng):
    with gzip.open(TATOEBA, "rt", encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t") for line in f]
    rng.shuffle(pairs)
    out = []
    for p in pairs[:n]:
        out.append(p[0] if rng.random() < 0.5 else p[1])
    return out


def synthetic_line(rng, base):
    """A line of bytes: words of a sentence with snippets of other kinds put between them."""
    parts = base.split(" ")[:5] if base else []
    kinds = list(WORDS)
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.08:
            piece = rng.choice(SPECIAL_STRINGS)
        else:
            piece = rng.choice(WORDS[rng.choice(kinds)])
        parts.insert(rng.randint(0, len(parts)), piece)
    seps = [" "] * 8 + ["", "  ", "\t", "\n"]
    text = parts[0] if parts else ""
    for p in parts[1:]:
        text += rng.choice(seps) + p
    data = text.encode("utf-8")
    if rng.random() < 0.12:  # invalid UTF-8 somewhere (on a character boundary or not)
        at = rng.randint(0, len(data))
        data = data[:at] + rng.choice(INVALID) + data[at:]
    return data


def make_corpus():
    rng = random.Random(46)
    sentences = tatoeba_lines(12000, rng)
    lines = []
    for i in range(10000):
        r = rng.random()
        if r < 0.4:
            lines.append(sentences[i].encode("utf-8"))
        elif r < 0.95:
            lines.append(synthetic_line(rng, sentences[i]))
        else:
            lines.append(synthetic_line(rng, ""))
    lines[0] = b""  # the empty line
    lines[1] = b" "
    return lines, sentences[10000:]


def training_text(sentences, rng):
    text = list(sentences)
    for _ in range(1500):
        kind = rng.choice(list(WORDS))
        text.append(" ".join(rng.choice(WORDS[kind]) for _ in range(3)))
    return text


def gpt2(text):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    # added tokens with each flag: lstrip+rstrip special, a normalized non-special word, single_word
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
    tok.add_tokens([AddedToken("qkv-added", normalized=True), AddedToken(" padded ", normalized=False),
                    AddedToken("café", single_word=True, normalized=False)])
    return tok


def llama3(text):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    tok.add_special_tokens([AddedToken("<|eot_id|>", rstrip=True)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def with_byte_pieces(tok, specials):
    """The trained BPE with byte_fallback and the 256 <0xXX> pieces right after its first `specials`
    tokens, as SentencePiece's vocabularies (Llama 2's, Gemma's) have them."""
    j = json.loads(tok.to_str())
    ordered = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    new = {}
    for piece, _ in ordered[:specials]:
        new[piece] = len(new)
    for b in range(256):
        new[f"<0x{b:02X}>"] = len(new)
    for piece, _ in ordered[specials:]:
        if piece not in new:
            new[piece] = len(new)
    j["model"]["vocab"] = new
    j["model"]["byte_fallback"] = True
    for t in j["added_tokens"]:
        t["id"] = new[t["content"]]
    return Tokenizer.from_str(json.dumps(j))


def byte_fallback(text):
    """Llama 2's form: Prepend + Replace normalizer, no pre-tokenizer, byte_fallback with <0xXX> pieces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=120)
    tok.train_from_iterator(text, trainer)
    tok = with_byte_pieces(tok, 3)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def gemma(text):
    """Gemma's form (transformers' GemmaConverter: Gemma 1–3): a Replace(" ", "▁") normalizer without a
    prefix, a Split(" ", merged_with_previous) pre-tokenizer, byte_fallback, <pad> <eos> <bos> <unk> first,
    its turn markers as special tokens, <bos> prepended, and a Replace / ByteFallback / Fuse decoder."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"], limit_alphabet=120)
    tok.train_from_iterator(text, trainer)
    tok = with_byte_pieces(tok, 4)
    tok.add_special_tokens([AddedToken("<start_of_turn>", special=True), AddedToken("<end_of_turn>", special=True)])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", tok.token_to_id("<bos>"))])
    return tok


def bert(text, lowercase):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None if lowercase else False, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=1500, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        limit_alphabet=300)
    tok.train_from_iterator(text, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    if lowercase:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    else:
        tok.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
    return tok


def spm_train(text, folder, **options):
    """SentencePiece's Unigram trainer on the lines of `text`: the path of the .model it writes."""
    import sentencepiece as spm
    path = os.path.join(folder, "train.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(t.replace("\n", " ") for t in text))
    spm.SentencePieceTrainer.train(input=path, model_prefix=os.path.join(folder, "sp"), model_type="unigram",
                                   character_coverage=0.9995, minloglevel=2, **options)
    return os.path.join(folder, "sp.model")


def xlmr(text):
    """XLM-RoBERTa's form: SentencePiece's Unigram with its nmt_nfkc rules, as transformers 5 converts the
    checkpoint's sentencepiece.bpe.model (Precompiled normalizer, WhitespaceSplit + Metaspace, <s> … </s>)."""
    from transformers import XLMRobertaTokenizer
    with tempfile.TemporaryDirectory() as d:
        model = spm_train(text, d, vocab_size=1000)
        os.rename(model, os.path.join(d, "sentencepiece.bpe.model"))
        tok = XLMRobertaTokenizer.from_pretrained(d)
        tok.add_tokens(["qkv-added"])
        return Tokenizer.from_str(tok.backend_tokenizer.to_str())


# SentencePiece normalization rules (source code points, target code points) for the "unigram"
# tokenizer: small enough to keep its charsmap a kilobyte, and with the cases Precompiled treats
# apart — a key of two characters, a cluster of which only a prefix is a key ("A\u0301" → "a"), a
# rule that makes one character three, a cluster of two (\r\n).
UNIGRAM_RULES = """41\t61\n42\t62\n43\t63\nC9\t65 301\nFB01\t66 69\nFB02\t66 6C\nFF21\t61\nFF26\t66\n65 301\tE9\nD A\t20
9\t20\nA0\t20\n3000\t20\n2026\t2E 2E 2E\n2460\t31\n"""


def unigram(text):
    """T5's form, with byte fallback: `tokenizers`' Unigram trainer after a Precompiled normalizer (a
    SentencePiece charsmap from the rules above) and Replace(" {2,}", " "), a Metaspace pre-tokenizer
    ("first"), the 256 <0xXX> pieces, "$A </s>"."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    with tempfile.TemporaryDirectory() as d:
        rules = os.path.join(d, "rules.tsv")
        with open(rules, "w") as f:
            f.write(UNIGRAM_RULES)
        m = pb.ModelProto()
        with open(spm_train(text, d, vocab_size=300, normalization_rule_tsv=rules), "rb") as f:
            m.ParseFromString(f.read())
        charsmap = m.normalizer_spec.precompiled_charsmap
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.UnigramTrainer(vocab_size=700, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tok.train_from_iterator(text, trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    low = min(score for _, score in vocab)
    have = {piece for piece, _ in vocab}
    vocab[3:3] = [[f"<0x{b:02X}>", low - 1.0] for b in range(256) if f"<0x{b:02X}>" not in have]
    j["model"]["unk_id"] = 2
    j["model"]["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(j))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return tok


def main():
    lines, rest = make_corpus()
    text = training_text(rest, random.Random(7))
    makers = {
        "gpt2": lambda: gpt2(text),
        "llama3": lambda: llama3(text),
        "byte_fallback": lambda: byte_fallback(text),
        "gemma": lambda: gemma(text),
        "bert_uncased": lambda: bert(text, True),
        "bert_cased": lambda: bert(text, False),
        "xlmr": lambda: xlmr(text),
        "unigram": lambda: unigram(text),
    }
    # A tokenizer already written is kept (the trainer's ties are not broken the same way on every run,
    # and tests pin some ids): delete its folder to train it again. The corpus is always rewritten.
    toks = {}
    for name, make in makers.items():
        path = os.path.join(OUT, name, "tokenizer.json")
        if os.path.exists(path):
            toks[name] = Tokenizer.from_file(path)
            continue
        toks[name] = tok = make()
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        tok.save(path, pretty=False)
        if name.startswith("bert"):
            vocab = json.loads(tok.to_str())["model"]["vocab"]
            with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
                for piece, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
                    f.write(piece + "\n")
    texts = [b.decode("utf-8", errors="replace") for b in lines]
    records = []
    for i, b in enumerate(lines):
        records.append({"b": base64.b64encode(b).decode("ascii")})
        if texts[i].encode("utf-8") != b:  # invalid UTF-8: the text `tokenizers` was given
            records[-1]["r"] = texts[i]
    for name, tok in toks.items():
        plain = tok.encode_batch(texts, add_special_tokens=False)
        special = tok.encode_batch(texts, add_special_tokens=True)
        for i, rec in enumerate(records):
            ids, ids_sp = plain[i].ids, special[i].ids
            # the ids with special tokens as [prefix, suffix] around the plain ids where they are that
            k = len(ids_sp) - len(ids)
            wrapped = next(([ids_sp[:a], ids_sp[a + len(ids):]] for a in range(k + 1)
                            if k >= 0 and ids_sp[a:a + len(ids)] == ids), None)
            skip = tok.decode(ids_sp, skip_special_tokens=True)
            entry = [ids, wrapped if wrapped is not None else {"ids": ids_sp}, None if skip == texts[i] else skip]
            if i % 10 == 0:  # decode keeping the special tokens, on every tenth line
                entry.append(tok.decode(ids_sp, skip_special_tokens=False))
            rec[name] = entry
            if has_pair(name, i):
                e = tok.encode(texts[i], texts[(i + 1) % len(texts)])
                rec[name + "_pair"] = [e.ids, e.type_ids]
                # and cut to 16 tokens as transformers' truncation=True cuts a pair ("longest_first")
                tok.enable_truncation(16, strategy="longest_first")
                e = tok.encode(texts[i], texts[(i + 1) % len(texts)])
                tok.no_truncation()
                rec[name + "_pair16"] = [e.ids, e.type_ids]
    with gzip.GzipFile(os.path.join(OUT, "corpus.jsonl.gz"), "wb", mtime=0, compresslevel=9) as f:
        for rec in records:
            f.write((json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
    for root, _, files in os.walk(OUT):
        for fn in files:
            print(os.path.relpath(os.path.join(root, fn), OUT), os.path.getsize(os.path.join(root, fn)))
    write_offsets()


def utf8_positions(text):
    """[UTF-8 length of text[:c] for c in 0 … len(text)]: a character offset's byte offset."""
    out = [0]
    for ch in text:
        o = ord(ch)
        out.append(out[-1] + (1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4))
    return out


def write_offsets():
    """tests/golden/tokenizers/offsets.jsonl.gz (see above) from the saved tokenizers and corpus lines; checks
    that each encoding's ids are the corpus's ids with special tokens (and a pair's, the corpus's pair)."""
    with gzip.open(os.path.join(OUT, "corpus.jsonl.gz"), "rt", encoding="utf-8") as f:
        corpus = [json.loads(line) for line in f]
    texts = [base64.b64decode(rec["b"]).decode("utf-8", errors="replace") for rec in corpus]
    for rec, t in zip(corpus, texts):
        assert rec.get("r", t) == t
    pos = [utf8_positions(t) for t in texts]
    out = [{} for _ in corpus]
    for name in [k for k in corpus[0] if k not in ("b", "r") and not k.endswith(("_pair", "_pair16"))]:
        tok = Tokenizer.from_file(os.path.join(OUT, name, "tokenizer.json"))
        encodings = tok.encode_batch(texts, add_special_tokens=True)
        for i, (rec, enc) in enumerate(zip(corpus, encodings)):
            ids, sp = rec[name][0], rec[name][1]
            assert enc.ids == (sp["ids"] if isinstance(sp, dict) else sp[0] + ids + sp[1]), (name, i)
            p = pos[i]
            out[i][name] = [[p[b], p[e]] for b, e in enc.offsets]
            out[i][name + "_w"] = [-1 if w is None else w for w in enc.word_ids]
            assert has_pair(name, i) == (name + "_pair" in rec), (name, i)
            if has_pair(name, i):
                j = (i + 1) % len(texts)
                enc = tok.encode(texts[i], texts[j])
                assert enc.ids == rec[name + "_pair"][0], (name, i)
                ps = (pos[i], pos[j])
                out[i][name + "_pair"] = [[ps[s or 0][b], ps[s or 0][e], -1 if s is None else s]
                                          for (b, e), s in zip(enc.offsets, enc.sequence_ids)]
    path = os.path.join(OUT, "offsets.jsonl.gz")
    with gzip.GzipFile(path, "wb", mtime=0, compresslevel=9) as f:
        for rec in out:
            f.write((json.dumps(rec, separators=(",", ":")) + "\n").encode("ascii"))
    print(os.path.relpath(path, OUT), os.path.getsize(path))


def has_pair(name, i):
    """Whether the corpus has the pair (line i, line i + 1) for this tokenizer."""
    return (name.startswith("bert") or name == "xlmr") and i % 20 == 0


if __name__ == "__main__":
    if sys.argv[1:] == ["offsets"]:
        write_offsets()
    elif sys.argv[1:]:
        sys.exit("usage: make_tokenizer_golden.py [offsets]")
    else:
        main()
