#!/usr/bin/env bash
# Writes the seed corpora of fuzz/corpus/ (committed): tiny model files of every kind, made by
# qkv itself (build/qkv), small safetensors, IDX and text files, and the configs. Rerun after a
# change to the model-file format: bash fuzz/make_seeds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
Q=build/qkv
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
C=fuzz/corpus
# (only the corpora made here: image/, http/ and train_config/ hold hand-made seeds)
rm -rf $C/safetensors $C/model_file $C/config $C/text $C/idx $C/tokenizer $C/sentencepiece
mkdir -p $C/safetensors $C/model_file $C/config $C/text $C/idx $C/tokenizer $C/sentencepiece
# a tiny GPT with characters
printf 'to be or not to be\n%.0s' {1..40} > $T/text.txt
cat > $T/gpt.json <<JSON
{"task": "lm", "data": {"path": "$T/text.txt"}, "model": {"n_layer": 1, "n_head": 1, "n_embd": 4, "block_size": 8},
 "train": {"max_iters": 1, "batch_size": 2, "eval_interval": 0, "checkpoint_interval": 0}}
JSON
$Q train $T/gpt.json -o $T/gpt -q >/dev/null 2>&1
# tiny translators (a word-level SentencePiece vocabulary of 12 pieces)
python3 - "$T" <<'PY'
import itertools, sys
en, fr = ["one", "two", "three", "four"], ["un", "deux", "trois", "quatre"]
with open(f"{sys.argv[1]}/pairs.tsv", "w") as f:
    for n in (1, 2, 3):
        for p in itertools.permutations(range(4), n):
            f.write(" ".join(en[i] for i in p) + "\t" + " ".join(fr[i] for i in p) + "\n")
PY
for type in transformer rnn-attention; do
  if [ $type = transformer ]; then m='{"type": "transformer", "preset": "tiny", "d_model": 4, "nhead": 1, "num_encoder_layers": 1, "num_decoder_layers": 1, "dim_feedforward": 4, "max_len": 8}'
  else m='{"type": "rnn-attention", "embedding_dim": 4, "hidden_size": 4, "max_len": 8}'; fi
  cat > $T/$type.json <<JSON
{"task": "translation", "data": {"train": {"tsv": "$T/pairs.tsv"}, "split": {"dev": 1, "test": 1, "seed": 1}},
 "tokenizer": {"type": "word", "vocab_size": 10}, "model": $m,
 "train": {"max_iters": 1, "batch_size": 20, "eval_interval": 0, "checkpoint_interval": 0, "model_dtype": "f16"},
 "eval": {"bleu_sentences": 1}}
JSON
  $Q train $T/$type.json -o $T/$type -q >/dev/null 2>&1
done
# a tiny ConvNet on 4×4 IDX images, and the IDX seeds
python3 - "$T" <<'PY'
import gzip, struct, sys
t = sys.argv[1]
def idx(shape, data):
    return bytes([0, 0, 8, len(shape)]) + b"".join(struct.pack(">I", n) for n in shape) + bytes(data)
for split, n in (("train", 8), ("test", 4)):
    open(f"{t}/{split}-images", "wb").write(idx((n, 4, 4), [(i * 37 + k * 11) % 256 for i in range(n) for k in range(16)]))
    open(f"{t}/{split}-labels", "wb").write(idx((n,), [i % 2 for i in range(n)]))
open("fuzz/corpus/idx/images.idx", "wb").write(idx((2, 3, 3), range(18)))
open("fuzz/corpus/idx/labels.idx", "wb").write(idx((5,), range(5)))
open("fuzz/corpus/idx/images.idx.gz", "wb").write(gzip.compress(idx((1, 2, 2), [1, 2, 3, 4])))
PY
cat > $T/convnet.json <<JSON
{"task": "image_classification",
 "data": {"dataset": "idx", "train_images": "$T/train-images", "train_labels": "$T/train-labels",
          "test_images": "$T/test-images", "test_labels": "$T/test-labels", "num_classes": 2, "val_size": 0},
 "model": {"channels": [2, 2], "blocks": [1, 1], "non_local": [1]},
 "train": {"max_iters": 1, "batch_size": 4, "eval_interval": 0, "checkpoint_interval": 0}}
JSON
$Q train $T/convnet.json -o $T/convnet -q >/dev/null 2>&1
# a tiny captioner (Kind::image_to_text) on 2×2 scenes of Fashion-MNIST items (the Debian package's
# IDX files), the smallest the captioning task accepts
$Q train configs/captions.json -o $T/captioner -q --set data.cell=28 --set data.grid=2 --set data.max_items=2 \
  --set data.val_scenes=2 --set data.tokenizer_scenes=100 --set 'model.channels=[2,2]' --set 'model.blocks=[1,1]' \
  --set model.embedding_dim=4 --set model.hidden_size=4 --set model.max_len=12 --set train.max_iters=1 \
  --set train.batch_size=2 --set train.eval_interval=0 --set train.checkpoint_interval=0 --set train.warmup_iters=0 \
  --set train.lr_decay_iters=1 >/dev/null 2>&1
for k in gpt transformer rnn-attention convnet captioner; do cp $T/$k/model.safetensors $C/model_file/$k.safetensors; done
# The translators' and the captioner's SentencePiece models carry NFKC's 240 KB character map, which would make the seeds
# 300 KB and each execution spend its time in the JSON lexer. The seeds get "identity" normalization
# instead (no map): the same loaders, 3 KB files, so the fuzzer mutates the parts qkv reads.
python3 - $C/model_file/transformer.safetensors $C/model_file/rnn-attention.safetensors \
  $C/model_file/captioner.safetensors <<'PY'
import base64, json, struct, sys

def varint(b, i):
    n = s = 0
    while True:
        n |= (b[i] & 0x7F) << s; s += 7; i += 1
        if not b[i - 1] & 0x80: return n, i

def put_varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0)); n >>= 7
        if not n: return bytes(out)

def fields(b):  # (number, wire type, raw bytes of the whole field)
    i = 0
    while i < len(b):
        start = i; key, i = varint(b, i); wt = key & 7
        if wt == 0: _, i = varint(b, i)
        elif wt == 1: i += 8
        elif wt == 5: i += 4
        elif wt == 2: n, i = varint(b, i); i += n
        else: raise ValueError(f"wire type {wt}")
        yield key >> 3, wt, b[start:i]

def length_delimited(number, payload):
    return put_varint(number << 3 | 2) + put_varint(len(payload)) + payload

def identity_normalizer(spm):  # ModelProto field 3 = NormalizerSpec; its 1 = name, 2 = charsmap
    out = bytearray()
    for number, wt, raw in fields(spm):
        if number == 3:
            _, j = varint(raw, 0); n, j = varint(raw, j); spec = raw[j:j + n]
            kept = b"".join(r for k, _, r in fields(spec) if k not in (1, 2))
            raw = length_delimited(3, length_delimited(1, b"identity") + kept)
        out += raw
    return bytes(out)

for path in sys.argv[1:]:
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n]); meta = json.loads(header["__metadata__"]["qkv"])
    tok = meta["tokenizer"]
    tok["model_base64"] = base64.b64encode(identity_normalizer(base64.b64decode(tok["model_base64"]))).decode()
    header["__metadata__"]["qkv"] = json.dumps(meta, separators=(",", ":"))
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
PY
# an int8 file (qkv quantize) of the same transformer: the loaders' int8-rows path
$Q quantize $C/model_file/transformer.safetensors -o $C/model_file/transformer-int8.safetensors >/dev/null 2>&1
cp $T/gpt/model.safetensors $C/safetensors/gpt.safetensors
cp $T/convnet/checkpoint.safetensors $C/safetensors/checkpoint.safetensors
for f in configs/shakespeare-char.json configs/tatoeba-en-fr.json configs/multi30k-de-en-gru-attention.json \
         configs/fashion-mnist-nonlocal.json; do cp $f $C/config/; done
cp $T/gpt.json $T/transformer.json $T/convnet.json $C/config/ 2>/dev/null || true
# the Hugging Face config.json of every golden model folder (tests/golden/make_hf_golden.py)
for d in tests/golden/hf/*/; do cp "$d/config.json" "$C/config/hf-$(basename "$d").json"; done
# findings kept as seeds: a Llama config whose rotary table outgrew the fuzzer's memory (d4b9a2b)
printf '{\n   "hidden_size": 7922337203684}' > $C/config/llama-hidden-size-1e12.json
# and a config.json whose hidden_size, a float past int64, the converters cast (undefined; 2026-12-05)
printf '{\n   "hidden_size": 7922337200e94}' > $C/config/hf-hidden-size-7.9e103.json
head -c 2000 $T/text.txt > $C/text/lines.txt
head -5 $T/pairs.tsv > $C/text/pairs.tsv
printf 'caf\xc3\xa9 \xff\xfe broken\r\n\n  spaces   \t tab\n' > $C/text/odd.txt
gzip -c $C/text/pairs.tsv > $C/text/pairs.tsv.gz
printf '\xef\xbb\xbfsent1,sent2,label\r\n"a, quoted","say ""hi""",0\r\n\r\n"two\nlines",,1\n' > $C/text/swag.csv
# the golden tokenizers (tests/golden/make_tokenizer_golden.py): GPT-2's byte level, Llama 3's regex,
# Llama 2's byte fallback, BERT's WordPiece (tokenizer.json and vocab.txt)
for t in gpt2 llama3 byte_fallback gemma bert_uncased bert_cased; do cp tests/golden/tokenizers/$t/tokenizer.json $C/tokenizer/$t.json; done
cp tests/golden/tokenizers/bert_cased/vocab.txt $C/tokenizer/vocab.txt
cp tests/golden/hf/qwen2/tokenizer.json $C/tokenizer/hf-qwen2.json
cp tests/golden/hf/mistral-window/tokenizer.json $C/tokenizer/hf-mistral-window.json
cp tests/golden/hf/marian/source.spm $C/sentencepiece/marian-source.model
for d in gpt2 llama-gqa bert-uncased qwen2; do cp tests/golden/hf/$d/tokenizer_config.json $C/tokenizer/cfg-$d.json; done
# SentencePiece models: the bundled translator's (unigram, 8,000 pieces, nmt_nfkc's character map)
# and the tiny transformer's above (word, 12 pieces), out of their files' metadata
python3 - <<'PY'
import base64, json, struct
for src, name in [("models/en-fr.safetensors", "en-fr.model"), ("fuzz/corpus/model_file/transformer.safetensors", "word12.model")]:
    b = open(src, "rb").read()
    header = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
    tok = json.loads(header["__metadata__"]["qkv"])["tokenizer"]
    open("fuzz/corpus/sentencepiece/" + name, "wb").write(base64.b64decode(tok["model_base64"]))
PY
du -sh $C; ls -la $C/*
