"""The hostile inputs of tests/hostile/hostile_test.py: model files of every registered model type
with lying configs and tensor tables, training configs with out-of-range values, pictures that are
not what they say, flags at their limits, output paths that are special files, and Python values.

Everything is made deterministically in one folder (`make_cases(tmp, ...)`); each case is a dict:
  name     unique, "<category>/<kind>/<what>"
  argv     the command ("{qkv}" and "{python}" are filled in by the runner)
  expect   "fail": exit 1 with a last stderr line naming the input; "any": exit 0 is also right
           (the value is legitimately valid) — a failure must still be exit 1 naming the input;
           "pass": exit 0 only
  names    strings of which the last stderr line must hold one (the file, the key, the flag)
  gone     paths that must not exist afterwards (nothing half-written)
  kinds    {path: file type} that must hold afterwards ("chr", "fifo", "link:<target>", "dir")
  python   True: a Python snippet; its last stderr line is "EXC <Type>: ..." or "OK ..."
  usage    True: a flag case where CLI11's usage error (exit 2) is also accepted
  partner  a FIFO's other end, started right after the command (a FIFO is read and written in place,
           as `cat` and the shell's `>` do: opening one waits for the other end):
           {"write": path, "data": bytes} writes data into it; {"read": path} drains it, and the
           drained bytes must be non-empty
  stdout_lines  the number of lines stdout must hold (exit 0)
"""
import base64
import copy
import json
import os
import stat
import struct
import subprocess
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = os.path.join(REPO, "fuzz", "corpus", "model_file")
MODELS = os.path.join(REPO, "models")

BIG = {"2^31": 2**31, "2^40": 2**40, "2^62": 2**62, "2^63-1": 2**63 - 1, "1e300": 1e300}
DEEP = 100_000


# ---- safetensors --------------------------------------------------------------------------------

def st_read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    return header, b[8 + n:]


def st_bytes(header, data, raw=None):
    h = raw if raw is not None else json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def meta_of(header):
    return json.loads(header["__metadata__"]["qkv"])


def with_meta(header, meta):
    h = copy.deepcopy(header)
    h["__metadata__"]["qkv"] = json.dumps(meta, separators=(",", ":"))
    return h


def tensors_of(header):
    return [k for k in header if k != "__metadata__"]


def deep_json(depth, leaf="1"):
    return "[" * depth + leaf + "]" * depth


# ---- pictures -----------------------------------------------------------------------------------

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width, height, pixels=None, extra=b"", idat=None):
    """An 8-bit greyscale PNG; pixels: bytes of width*height (default zeros, streamed through zlib)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    if idat is None:
        c = zlib.compressobj(9)
        out = []
        row = b"\0" * (width + 1)
        if pixels is None:
            chunk = row * max(1, (1 << 22) // len(row))
            rows_per = len(chunk) // len(row)
            left = height
            while left > 0:
                k = min(rows_per, left)
                out.append(c.compress(chunk[:k * len(row)]))
                left -= k
        else:
            for y in range(height):
                out.append(c.compress(b"\0" + pixels[y * width:(y + 1) * width]))
        out.append(c.flush())
        idat = b"".join(out)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", idat) +
            png_chunk(b"IEND", b""))


def tiny_jpeg():
    # a valid 8×8 grey baseline JPEG (made once with Pillow 9.4, quality 75)
    return bytes.fromhex(
        "ffd8ffe000104a46494600010100000100010000ffdb004300080606070605080707070909080a0c140d0c0b0b0c1912"
        "130f141d1a1f1e1d1a1c1c20242e2720222c231c1c2837292c30313434341f27393d38323c2e333432ffc0000b080008"
        "000801011100ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303"
        "020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282"
        "090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465666768696a73747576"
        "7778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9ca"
        "d2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffda0008010100003f00e32bffd9")


# ---- the cases ----------------------------------------------------------------------------------

class Maker:
    def __init__(self, tmp, qkv, log=print):
        self.tmp, self.qkv, self.log = tmp, qkv, log
        self.cases = []
        self.skipped = []
        self.n = 0

    def path(self, name):
        p = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def write(self, name, data):
        p = self.path(name)
        with open(p, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return p

    def add(self, name, argv, expect="fail", names=(), gone=(), kinds=None, python=False, usage=False,
            env=None, timeout=None, plant=(), no_temps=(), partner=None, stdout_lines=None):
        assert not any(c["name"] == name for c in self.cases), name
        self.cases.append(dict(name=name, argv=list(argv), expect=expect, names=list(names), gone=list(gone),
                               kinds=dict(kinds or {}), python=python, usage=usage, env=dict(env or {}),
                               plant=list(plant), no_temps=list(no_temps), partner=partner,
                               stdout_lines=stdout_lines,
                               timeout=timeout or (8 if "fifo" in name else None)))

    def out(self, stem):
        """A fresh output path in the temp dir that must not exist after a failing command."""
        self.n += 1
        return os.path.join(self.tmp, "out", f"{self.n:04d}-{stem}")


# -- tiny model files of every registered type --

def tiny_pairs(m):
    import itertools
    en, fr = ["one", "two", "three", "four"], ["un", "deux", "trois", "quatre"]
    lines = []
    for n in (1, 2, 3):
        for p in itertools.permutations(range(4), n):
            lines.append(" ".join(en[i] for i in p) + "\t" + " ".join(fr[i] for i in p))
    return m.write("data/pairs.tsv", "\n".join(lines) + "\n")


def tiny_idx(m):
    def idx(shape, data):
        return bytes([0, 0, 8, len(shape)]) + b"".join(struct.pack(">I", n) for n in shape) + bytes(data)
    paths = {}
    for split, n in (("train", 8), ("test", 4)):
        paths[split + "_images"] = m.write(f"data/{split}-images",
                                           idx((n, 4, 4), [(i * 37 + k * 11) % 256 for i in range(n) for k in range(16)]))
        paths[split + "_labels"] = m.write(f"data/{split}-labels", idx((n,), [i % 2 for i in range(n)]))
    return paths


def base_configs(m):
    """Tiny training configs of every task (a second or so each)."""
    text = m.write("data/text.txt", "to be or not to be\n" * 40)
    pairs = tiny_pairs(m)
    idx = tiny_idx(m)
    t = {"max_iters": 2, "eval_interval": 0, "checkpoint_interval": 0}
    cfgs = {
        "gpt": {"task": "lm", "data": {"path": text},
                "model": {"n_layer": 1, "n_head": 1, "n_embd": 4, "block_size": 8},
                "train": dict(t, batch_size=2)},
        "transformer": {"task": "translation",
                        "data": {"train": {"tsv": pairs}, "split": {"dev": 1, "test": 1, "seed": 1}},
                        "tokenizer": {"type": "word", "vocab_size": 10},
                        "model": {"type": "transformer", "preset": "tiny", "d_model": 4, "nhead": 1,
                                  "num_encoder_layers": 1, "num_decoder_layers": 1, "dim_feedforward": 4, "max_len": 8},
                        "train": dict(t, batch_size=20), "eval": {"bleu_sentences": 1}},
        "rnn-encdec": {"task": "translation",
                       "data": {"train": {"tsv": pairs}, "split": {"dev": 1, "test": 1, "seed": 1}},
                       "tokenizer": {"type": "word", "vocab_size": 10},
                       "model": {"type": "rnn-encdec", "embedding_dim": 4, "hidden_size": 4, "max_len": 8},
                       "train": dict(t, batch_size=20), "eval": {"bleu_sentences": 1}},
        "convnet": {"task": "image_classification",
                    "data": dict(dataset="idx", num_classes=2, val_size=0, **idx),
                    "model": {"channels": [2, 2], "blocks": [1, 1], "non_local": [1]},
                    "train": dict(t, batch_size=4)},
    }
    return cfgs


def model_files(m, cfgs):
    files = {}
    for k in ("gpt", "transformer", "rnn-attention", "convnet"):
        files[k] = os.path.join(SEEDS, k + ".safetensors")
    files["captioner"] = os.path.join(MODELS, "captioner.safetensors")
    # rnn-encdec has no seed: train one (a second)
    cfg = m.write("models/rnn-encdec.json", json.dumps(cfgs["rnn-encdec"]))
    out = m.path("models/rnn-encdec")
    r = subprocess.run([m.qkv, "train", cfg, "-o", out, "-q", "--threads", "1"], capture_output=True, text=True,
                       timeout=120)
    if r.returncode == 0 and os.path.exists(os.path.join(out, "model.safetensors")):
        files["rnn-encdec"] = os.path.join(out, "model.safetensors")
    else:
        m.skipped.append(f"rnn-encdec model files: qkv train of a tiny config failed ({r.stderr.strip()[-200:]})")
    return {k: v for k, v in files.items() if os.path.exists(v)}


def commands(m, kind, f, picture):
    """{command name: (argv, outputs)} of every command that reads a model file of this kind."""
    cmds = {}
    if kind in ("transformer", "rnn-attention", "rnn-encdec"):
        cmds["translate"] = (["{qkv}", "translate", "--threads", "1", "-m", f, "one two"], [])
        o = m.out("attend")
        cmds["attend"] = (["{qkv}", "attend", "--threads", "1", "-m", f, "-o", o, "one two"], [])
        if kind == "transformer":
            o = m.out("ct2")
            cmds["export"] = (["{qkv}", "export", "--to", "ctranslate2", f, o], [o])
    elif kind == "gpt":
        cmds["generate"] = (["{qkv}", "generate", "--threads", "1", "-m", f, "-n", "4", "-p", "to be"], [])
        o = m.out("gpt-hf")  # (a language model qkv trained goes to GPT2LMHeadModel)
        cmds["export-hf"] = (["{qkv}", "export", "--to", "hf", f, o], [o])
    elif kind == "convnet":
        cmds["classify"] = (["{qkv}", "classify", "--threads", "1", "-m", f, picture], [])
        o = m.out("attend")
        cmds["attend"] = (["{qkv}", "attend", "--threads", "1", "-m", f, "-o", o, picture], [])
    elif kind == "captioner":
        cmds["caption"] = (["{qkv}", "caption", "--threads", "1", "-m", f, picture], [])
        o = m.out("attend")
        cmds["attend"] = (["{qkv}", "attend", "--threads", "1", "-m", f, "-o", o, picture], [])
    o = m.out("avg.safetensors")
    cmds["average"] = (["{qkv}", "average", f, f, "-o", o], [o])
    return cmds


def model_mutations(kind, header, data):
    """(name, bytes or None, expect) of the broken model files of one kind."""
    meta = meta_of(header)
    names = tensors_of(header)
    first, second = names[0], names[1]
    muts = []

    def meta_mut(name, fn, expect="fail"):
        mm = copy.deepcopy(meta)
        fn(mm)
        muts.append((name, st_bytes(with_meta(header, mm), data), expect))

    def head_mut(name, fn, expect="fail"):
        h = copy.deepcopy(header)
        fn(h)
        muts.append((name, st_bytes(h, data), expect))

    # -- the model's config: every numeric field at the edges, wrong types, missing --
    rot = [sum(map(ord, kind))]
    for key, val in sorted(meta["model"].items()):
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            for label, bad in (("null", None), ("deep", "DEEP")) if key in DEEP_KEYS else (("null", None),):
                if label == "deep":
                    raw_meta = json.dumps(dict(meta, model=dict(meta["model"], **{key: "@@"})), separators=(",", ":"))
                    raw_meta = raw_meta.replace('"@@"', deep_json(DEEP))
                    h = copy.deepcopy(header)
                    h["__metadata__"]["qkv"] = raw_meta
                    muts.append((f"model.{key}={label}", st_bytes(h, data), "fail"))
                else:
                    meta_mut(f"model.{key}={label}", lambda mm, k=key, b=bad: mm["model"].__setitem__(k, b))
            continue
        # every field gets -1 or 2^63-1 (in turn), and in turn one of the others (all of them over the fields)
        extra = ROTATING[rot[0] % len(ROTATING)]
        edge = (("-1", -1, "fail"), ("2^63-1", 2**63 - 1, "fail"))[rot[0] % 2]
        rot[0] += 1
        for label, bad, expect in (edge, extra):
            # a float field (dropout, mean…) at 0 is fine; at -1 or 1e300 it is not
            meta_mut(f"model.{key}={label}", lambda mm, k=key, b=bad: mm["model"].pop(k) if b == "MISSING"
                     else mm["model"].__setitem__(k, b), expect)
    if "eos_id" in meta["model"]:
        meta_mut("model.eos_id=pad_id", lambda mm: mm["model"].__setitem__("eos_id", mm["model"].get("pad_id", 0)),
                 "any")
        meta_mut("model.bos_id=eos_id", lambda mm: mm["model"].__setitem__("bos_id", mm["model"]["eos_id"]), "any")
    for key in ("max_len", "block_size"):
        if key in meta["model"]:
            meta_mut(f"model.{key}=1e9", lambda mm, k=key: mm["model"].__setitem__(k, 10**9), "any")
    # -- the metadata around it --
    meta_mut("model_type=unknown", lambda mm: mm.__setitem__("model_type", "no-such-type"))
    meta_mut("model_type=null", lambda mm: mm.__setitem__("model_type", None))
    meta_mut("model=missing", lambda mm: mm.pop("model"))
    meta_mut("model=list", lambda mm: mm.__setitem__("model", [1, 2]))
    meta_mut("version=99", lambda mm: mm.__setitem__("version", 99))
    meta_mut("version=string", lambda mm: mm.__setitem__("version", "1"))
    meta_mut("format=other", lambda mm: mm.__setitem__("format", "pytorch"))
    meta_mut("trained_steps=-1", lambda mm: mm.__setitem__("trained_steps", -1), "any")
    meta_mut("trained_steps=1e300", lambda mm: mm.__setitem__("trained_steps", 1e300), "any")
    if meta.get("tokenizer") is not None:
        meta_mut("tokenizer=null", lambda mm: mm.__setitem__("tokenizer", None))
        meta_mut("tokenizer=string", lambda mm: mm.__setitem__("tokenizer", "spm"))
        meta_mut("tokenizer.type=unknown", lambda mm: mm["tokenizer"].__setitem__("type", "bpe-from-mars"))
        if "model_base64" in meta["tokenizer"]:
            meta_mut("tokenizer.model_base64=garbage",
                     lambda mm: mm["tokenizer"].__setitem__("model_base64", "!!!not base64!!!"))
            meta_mut("tokenizer.model_base64=truncated",
                     lambda mm: mm["tokenizer"].__setitem__("model_base64", mm["tokenizer"]["model_base64"][:40]))
        if "chars" in meta["tokenizer"]:
            meta_mut("tokenizer.chars=too-few", lambda mm: mm["tokenizer"].__setitem__("chars", ["a"]))
            meta_mut("tokenizer.chars=numbers", lambda mm: mm["tokenizer"].__setitem__("chars", list(range(8))))
    h = copy.deepcopy(header)
    h["__metadata__"]["qkv"] = deep_json(DEEP)
    muts.append(("metadata=deep-array", st_bytes(h, data), "fail"))
    h = copy.deepcopy(header)
    h["__metadata__"]["qkv"] = json.dumps(meta)[:-7]
    muts.append(("metadata=invalid-json", st_bytes(h, data), "fail"))
    head_mut("metadata=missing", lambda h: h.pop("__metadata__"))
    head_mut("metadata=object", lambda h: h["__metadata__"].__setitem__("qkv", meta))
    # -- the tensor table --
    shape0 = header[first]["shape"]
    head_mut("tensor.shape=transposed", lambda h: h[first].__setitem__("shape", list(reversed(shape0)) + [1]))
    head_mut("tensor.shape=scalar", lambda h: h[first].__setitem__("shape", []))
    head_mut("tensor.shape=negative", lambda h: h[first].__setitem__("shape", [-1] + shape0[1:]))
    head_mut("tensor.shape=2^62x2^62", lambda h: h[first].__setitem__("shape", [2**62, 2**62]))
    head_mut("tensor.shape=2^32x2^32-wraps", lambda h: h[first].__setitem__("shape", [2**32, 2**32]))
    head_mut("tensor.shape=rank-100", lambda h: h[first].__setitem__("shape", [1] * 100))
    head_mut("tensor.shape=string", lambda h: h[first].__setitem__("shape", "4x4"))
    head_mut("tensor.dtype=I64", lambda h: h[first].__setitem__("dtype", "I64"))
    head_mut("tensor.dtype=F64", lambda h: h[first].__setitem__("dtype", "F64"))
    head_mut("tensor.dtype=BOOL", lambda h: h[first].__setitem__("dtype", "BOOL"))
    head_mut("tensor.dtype=unknown", lambda h: h[first].__setitem__("dtype", "Q7"))
    head_mut("tensor.dtype=number", lambda h: h[first].__setitem__("dtype", 5))
    n = len(data)
    head_mut("tensor.offsets=past-end", lambda h: h[first].__setitem__("data_offsets", [n - 4, n + 4]))
    head_mut("tensor.offsets=2^40", lambda h: h[first].__setitem__("data_offsets", [0, 2**40]))
    head_mut("tensor.offsets=2^64-1", lambda h: h[first].__setitem__("data_offsets", [2**64 - 8, 2**64 - 1]))
    head_mut("tensor.offsets=reversed", lambda h: h[first].__setitem__("data_offsets",
                                                                       list(reversed(h[first]["data_offsets"]))))
    head_mut("tensor.offsets=negative", lambda h: h[first].__setitem__("data_offsets", [-8, 0]))
    head_mut("tensor.offsets=three", lambda h: h[first].__setitem__("data_offsets", [0, 4, 8]))
    head_mut("tensor.offsets=overlap", lambda h: h[second].__setitem__("data_offsets", h[first]["data_offsets"]),
             "fail")
    head_mut("tensor.offsets=missing", lambda h: h[first].pop("data_offsets"))
    head_mut("tensor=missing", lambda h: h.pop(first))
    head_mut("tensor=extra", lambda h: h.__setitem__("no.such.weight", dict(h[first])))
    head_mut("tensor=renamed", lambda h: h.__setitem__("x" + first, h.pop(first)))
    # duplicate names: the same key twice in the JSON text
    raw = json.dumps(header, separators=(",", ":"))
    dup = json.dumps({first: header[first]}, separators=(",", ":"))[1:-1]
    muts.append(("tensor=duplicate-name", st_bytes(None, data, raw=(raw[:-1] + "," + dup + "}").encode()), "fail"))
    raw_h = json.dumps(header, separators=(",", ":")).encode()
    raw_h += b" " * (-len(raw_h) % 8)
    full = struct.pack("<Q", len(raw_h)) + raw_h + data
    # -- header length lies, truncation, wrong top level --
    muts.append(("header-length=2^63", struct.pack("<Q", 2**63) + full[8:], "fail"))
    muts.append(("header-length=2^64-1", struct.pack("<Q", 2**64 - 1) + full[8:], "fail"))
    muts.append(("header-length=file+1", struct.pack("<Q", len(full) - 7) + full[8:], "fail"))
    muts.append(("header-length=0", struct.pack("<Q", 0) + full[8:], "fail"))
    muts.append(("header-length=short", struct.pack("<Q", len(raw_h) // 2) + full[8:], "fail"))
    muts.append(("header=deep-array", st_bytes(None, b"", raw=deep_json(DEEP).encode()), "fail"))
    muts.append(("header=deep-object", st_bytes(None, b"", raw=('{"a":' * DEEP + "1" + "}" * DEEP).encode()), "fail"))
    muts.append(("header=array", st_bytes(None, data, raw=b"[1,2,3]"), "fail"))
    muts.append(("header=not-json", st_bytes(None, data, raw=b"\xff\xfe{not json"), "fail"))
    muts.append(("truncated=empty", b"", "fail"))
    muts.append(("truncated=7-bytes", full[:7], "fail"))
    muts.append(("truncated=mid-header", full[:8 + len(raw_h) // 2], "fail"))
    muts.append(("truncated=mid-data", full[:8 + len(raw_h) + len(data) // 2], "fail"))
    muts.append(("truncated=last-byte", full[:-1], "fail"))
    muts.append(("extra-bytes", full + b"\0" * 13, "any"))
    return muts


AVERAGE_MUTATIONS = ("header-length=2^63", "header=deep-array", "truncated=mid-data", "tensor.offsets=past-end",
                     "tensor.offsets=overlap", "tensor.shape=2^62x2^62", "tensor.dtype=unknown", "tensor=duplicate-name")
ROTATING = (("0", 0, "any"), ("2^31", 2**31, "fail"), ("1e300", 1e300, "fail"), ("string", "x", "fail"),
            ("null", None, "fail"), ("missing", "MISSING", "any"))
DEEP_KEYS = ("channels", "attention", "activation", "class_names", "positions")

# the mutations also run through a model kind's other commands (the rest only through the first)
OTHER_CMD_MUTATIONS = ("tensor.shape=2^62x2^62", "tensor.offsets=past-end", "tensor=duplicate-name",
                       "header-length=2^63", "metadata=deep-array", "truncated=mid-data", "model.max_len=1e9",
                       "model.block_size=1e9", "model.eos_id=pad_id")


def add_model_cases(m, files, pictures):
    for kind, f in sorted(files.items()):
        header, data = st_read(f)
        pic = pictures.get(kind, pictures["default"])
        first_cmd = None
        for name, blob, expect in model_mutations(kind, header, data):
            p = m.write(f"models/{kind}/{name.replace('/', '_')}.safetensors", blob)
            cmds = commands(m, kind, p, pic)
            for ci, (cname, (argv, outs)) in enumerate(cmds.items()):
                if ci > 0 and name not in OTHER_CMD_MUTATIONS and cname != "average":
                    continue
                if cname == "average" and name not in AVERAGE_MUTATIONS:
                    continue  # average copies the metadata; it reads the tensor table
                exp = expect
                if kind in ("rnn-attention", "rnn-encdec", "captioner") and name.startswith("model.max_len="):
                    exp = "any"  # a recurrent decoder's length cap: no table is sized by it
                if cname == "export" and exp == "any":
                    continue  # exporting needs Python with ctranslate2: a valid file cannot succeed here
                m.add(f"model/{kind}/{cname}/{name}", argv, expect=exp, names=[p], gone=outs if exp == "fail" else [])
        # special files in the model's place (every kind's first command)
        specials = {"directory": m.path(f"models/{kind}/a-directory.safetensors"),
                    "fifo": m.path(f"models/{kind}/a-fifo.safetensors"),
                    "dev-zero": "/dev/zero", "missing": m.path(f"models/{kind}/missing.safetensors")}
        os.makedirs(specials["directory"], exist_ok=True)
        if not os.path.exists(specials["fifo"]):
            os.mkfifo(specials["fifo"])
        for sname, sp in specials.items():
            cmds = commands(m, kind, sp, pic)
            cname, (argv, outs) = next(iter(cmds.items()))
            m.add(f"model/{kind}/{cname}/special={sname}", argv, names=[sp], gone=outs,
                  kinds={specials["fifo"]: "fifo"} if sname == "fifo" else {})


# -- training configs --

TRAIN_KEYS = {
    # key: {label: (value, expect)}, on every task's config
    "train.max_iters": {"-1": (-1, "fail"), "string": ("x", "fail"), "1e300": (1e300, "fail"),
                        "0": (0, "any"), "null": (None, "fail")},
    "train.batch_size": {"0": (0, "fail"), "-1": (-1, "fail"), "2^62": (2**62, "fail"),
                         "2^31": (2**31, "fail"), "1e300": (1e300, "fail"), "string": ("x", "fail"),
                         "2.5": (2.5, "fail"), "null": (None, "fail")},
    "train.gradient_accumulation_steps": {"0": (0, "fail"), "-1": (-1, "fail"), "1e9": (10**9, "fail"),
                                          "2^62": (2**62, "fail"), "1e300": (1e300, "fail"),
                                          "string": ("x", "fail")},
    "train.learning_rate": {"-1": (-1, "fail"), "1e300": (1e300, "fail"), "nan-string": ("nan", "fail"),
                            "0": (0, "any")},
    "train.min_lr": {"-1": (-1, "fail"), "1e300": (1e300, "fail")},
    "train.warmup_iters": {"-1": (-1, "fail"), "2^62": (2**62, "any"), "1e300": (1e300, "fail")},
    "train.lr_decay_iters": {"-1": (-1, "fail"), "2^62": (2**62, "any"), "0": (0, "any")},
    "train.beta1": {"-1": (-1, "fail"), "1": (1, "fail"), "1e300": (1e300, "fail")},
    "train.beta2": {"-1": (-1, "fail"), "1": (1, "fail")},
    "train.eps": {"-1": (-1, "fail"), "2": (2, "fail")},
    "train.weight_decay": {"-1": (-1, "fail"), "1e300": (1e300, "fail")},
    "train.grad_clip": {"-1": (-1, "fail"), "1e300": (1e300, "fail")},
    "train.eval_interval": {"-1": (-1, "fail"), "2^62": (2**62, "any"), "1": (1, "any")},
    "train.eval_iters": {"0": (0, "fail"), "-1": (-1, "fail"), "2^62": (2**62, "any")},
    "train.log_interval": {"0": (0, "fail"), "2^63-1": (2**63 - 1, "any")},
    "train.checkpoint_interval": {"-1": (-1, "fail"), "2^62": (2**62, "any"), "1": (1, "any")},
    "train.keep_checkpoints": {"-1": (-1, "fail"), "2^62": (2**62, "any")},
    "train.seed": {"-1": (-1, "fail"), "2^64": (2**64, "fail"), "2^63-1": (2**63 - 1, "any"),
                   "string": ("x", "fail")},
    "train.optimizer": {"unknown": ("sgd-from-mars", "fail"), "number": (3, "fail")},
    "train.schedule": {"unknown": ("zigzag", "fail")},
    "train.dtype": {"unknown": ("f8", "fail")},
    "train.model_dtype": {"unknown": ("int4", "fail")},
    "train.label_smoothing": {"1": (1, "fail"), "-1": (-1, "fail")},
    "train.bucket_cap_mb": {"0": (0, "fail"), "1e300": (1e300, "fail")},
    "train.early_stopping_patience": {"-1": (-1, "fail"), "string": ("x", "fail"), "2^62": (2**62, "any")},
    "train.early_stopping_threshold": {"-1": (-1, "fail"), "1e300": (1e300, "fail")},
    "train.greater_is_better": {"string": ("x", "fail"), "list": ([], "fail")},
    "train.keep_best": {"string": ("x", "fail")},
    "train": {"null": (None, "fail"), "list": ([], "fail"), "string": ("x", "fail")},
    "model": {"null": (None, "fail"), "list": ([], "fail")},
    "task": {"unknown": ("regression", "fail"), "null": (None, "fail")},
    "model.type": {"unknown": ("no-such-type", "fail"), "number": (1, "fail")},
}

LIGHT_VALUES = ("0", "-1", "2^40", "2^62", "string", "deep", "1e9", "unknown")
MODEL_KEYS = {
    "gpt": ("n_layer", "n_head", "n_embd", "block_size"),
    "transformer": ("d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward", "max_len"),
    "rnn-encdec": ("embedding_dim", "hidden_size", "max_len"),
    "convnet": ("channels", "blocks", "non_local"),
}


def add_train_cases(m, cfgs):
    for task, cfg in cfgs.items():
        base = m.write(f"configs/{task}.json", json.dumps(cfg, indent=1))
        keys = dict(TRAIN_KEYS)
        for mk in MODEL_KEYS[task]:
            if mk in ("channels", "blocks", "non_local"):
                keys["model." + mk] = {"0": ([0, 0], "fail"), "-1": ([-1, 2], "fail"), "2^40": ([2**40, 2], "fail"),
                                       "string": ("x", "fail"), "deep": ("DEEP", "fail")}
            else:
                keys["model." + mk] = {"0": (0, "fail"), "-1": (-1, "fail"), "2^31": (2**31, "fail"),
                                       "2^40": (2**40, "fail"), "2^62": (2**62, "fail"), "1e300": (1e300, "fail"),
                                       "string": ("x", "fail"), "deep": ("DEEP", "fail")}
                if task != "gpt":
                    for k in ("0", "2^62"):
                        keys["model." + mk].pop(k)
        if task == "gpt":
            keys["model.n_layer"]["100000"] = (100000, "fail")
            keys["data.path"] = {"dev-zero": ("/dev/zero", "fail"), "directory": (m.tmp, "fail"),
                                 "missing": (m.path("no/such/file.txt"), "fail"), "fifo": ("FIFO", "fail")}
        # the GPT task gets everything; the others their model's sizes and the keys most likely to bite
        light = task != "gpt"
        for key, vals in keys.items():
            if light:
                if key.startswith("train.") and key not in ("train.batch_size", "train.gradient_accumulation_steps"):
                    continue
                if key in ("train", "model", "task"):
                    continue
                vals = {k: v for k, v in vals.items() if k in LIGHT_VALUES}
            if task == "convnet" and key == "model.type":
                continue
            for label, (val, expect) in vals.items():
                if task in ("transformer", "rnn-encdec") and key == "train.batch_size" and isinstance(val, int) \
                        and val > 0:
                    expect = "any"  # tokens per batch: more than the data holds is one batch
                if task == "rnn-encdec" and key == "model.max_len" and isinstance(val, int) and val > 0:
                    expect = "any"  # a recurrent model's length cap
                out = m.out(f"train-{task}")
                leaf = key.split(".")[-1]
                if val == "FIFO":
                    val = m.path("data/a-fifo.txt")
                    if not os.path.exists(val):
                        os.mkfifo(val)
                names = [key, leaf] + ([str(val)] if key == "data.path" else [])
                kinds = {val: "fifo"} if key == "data.path" and label == "fifo" else {}
                gone = [os.path.join(out, "model.safetensors"), os.path.join(out, "checkpoint.safetensors")]
                # as --set
                if val != "DEEP":
                    argv = ["{qkv}", "train", base, "-o", out, "-q", "--threads", "1",
                            "--set", f"{key}={json.dumps(val)}"]
                    m.add(f"train/{task}/set/{key}={label}", argv, expect=expect, names=names,
                          gone=gone if expect == "fail" else [], kinds=kinds)
                # as an edited file: the deep values, and each key's first value
                if val != "DEEP" and label != next(iter(vals)):
                    continue
                edited = copy.deepcopy(cfg)
                parts = key.split(".")
                node = edited
                for p in parts[:-1]:
                    node = node.setdefault(p, {}) if isinstance(node, dict) else node
                if isinstance(node, dict):
                    node[parts[-1]] = "@@DEEP@@" if val == "DEEP" else val
                text = json.dumps(edited, indent=1).replace('"@@DEEP@@"', deep_json(DEEP))
                f = m.write(f"configs/{task}/{key}={label}.json", text)
                out2 = m.out(f"train-{task}")
                gone2 = [os.path.join(out2, "model.safetensors"), os.path.join(out2, "checkpoint.safetensors")]
                m.add(f"train/{task}/file/{key}={label}",
                      ["{qkv}", "train", f, "-o", out2, "-q", "--threads", "1"], expect=expect,
                      names=names + [f], gone=gone2 if expect == "fail" else [], kinds=kinds)
    # whole-config hostility (the GPT task)
    cfg = cfgs["gpt"]
    for label, text in (("deep-array", deep_json(DEEP)), ("deep-object", '{"a":' * DEEP + "1" + "}" * DEEP),
                        ("empty", ""), ("not-json", "{task: lm"), ("array", "[]"), ("null", "null"),
                        ("invalid-utf8", '{"task": "lm\xff"}'),
                        ("deep-in-train", json.dumps(dict(cfg, train="@@")).replace('"@@"', deep_json(DEEP)))):
        f = m.write(f"configs/whole/{label}.json", text.encode("latin-1") if label == "invalid-utf8" else text)
        out = m.out("train-whole")
        m.add(f"train/whole/{label}", ["{qkv}", "train", f, "-o", out, "-q"], names=[f],
              gone=[os.path.join(out, "model.safetensors")])
    base = os.path.join(m.tmp, "configs", "gpt.json")
    for label, setarg in (("no-equals", "train.max_iters"), ("bad-json", "train.max_iters={"),
                          ("deep", "train.max_iters=" + deep_json(30000)), ("empty-key", "=3"),
                          ("through-number", "train.max_iters.x=3"), ("long-key", "a." * 5000 + "b=1")):
        out = m.out("train-set")
        m.add(f"train/set-syntax/{label}", ["{qkv}", "train", base, "-o", out, "-q", "--set", setarg],
              names=["--set", setarg[:40], "max_iters", '"a"' if label == "long-key" else "--set"], gone=[os.path.join(out, "model.safetensors")])
    # config paths that are special files
    fifo = m.path("configs/a-fifo.json")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    for label, p in (("fifo", fifo), ("dev-zero", "/dev/zero"), ("directory", m.path("configs/dir.json/x")[:-2])):
        os.makedirs(m.path("configs/dir.json"), exist_ok=True)
        out = m.out("train-special")
        # a config may be a pipe (`qkv train <(cmd)`): the FIFO is read in place; what comes through it is
        # not JSON, an error naming it
        m.add(f"train/config-file/{label}", ["{qkv}", "train", p, "-o", out, "-q"], names=[p],
              gone=[os.path.join(out, "model.safetensors")], kinds={fifo: "fifo"} if label == "fifo" else {},
              partner={"write": fifo, "data": b'{"task": "lm", not json\n'} if label == "fifo" else None)


# -- pictures --

RESIZE_PICTURES = ("20000x20000.png", "65535x65535-lying-idat.png", "2^31x1.png", "0x0.png", "svg.png",
                   "svg-entities.png", "tiff.png", "xpm.png", "tga.png", "pgm-huge.png", "bmp.png", "gif.png",
                   "jpeg-65500x65500.jpg", "text-chunk-2^31.png")

def add_picture_cases(m):
    pics = {}
    # a valid 96×96 picture for the captioner, a 4×4 one for the tiny ConvNet (made for the model cases)
    pics["captioner"] = m.write("pictures/ok-96.png", png(96, 96, bytes((x * 7 + y * 3) % 256 for y in range(96)
                                                                       for x in range(96))))
    pics["convnet"] = m.write("pictures/ok-4.png", png(4, 4, bytes(range(0, 160, 10))))
    pics["default"] = pics["captioner"]
    bad = {}
    bad["20000x20000.png"] = png(20000, 20000)
    bad["65535x65535-lying-idat.png"] = png(65535, 65535, idat=zlib.compress(b"\0" * 1000))
    bad["2^31x1.png"] = png(2**31 - 1, 1, idat=zlib.compress(b"\0" * 100))
    bad["0x0.png"] = png(0, 0, idat=zlib.compress(b""))
    bad["text-chunk-2^31.png"] = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 96, 96, 8, 0, 0, 0, 0))
                                  + struct.pack(">I", 2**31 - 1) + b"tEXt" + b"comment\0" + b"x" * 100)
    bad["chunk-length-2^32-1.png"] = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 2**32 - 1) + b"IHDR" + b"\0" * 64)
    good96 = open(pics["captioner"], "rb").read()
    bad["truncated.png"] = good96[:len(good96) // 2]
    bad["signature-only.png"] = good96[:8]
    bad["bad-crc.png"] = good96[:29] + b"\0\0\0\0" + good96[33:]
    bad["bit-depth-16-size-lie.png"] = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 96, 96, 16, 6, 0, 0, 0))
                                        + png_chunk(b"IDAT", zlib.compress(b"\0" * 50)) + png_chunk(b"IEND", b""))
    bad["svg.png"] = (b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="100000" height="100000">'
                      b'<rect width="100000" height="100000"/></svg>')
    bad["svg-entities.png"] = (b'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa">'
                               + b"".join(b'<!ENTITY a%d "&a%s;&a%s;&a%s;&a%s;&a%s;&a%s;&a%s;&a%s;&a%s;&a%s;">'
                                          % ((i,) + (b"" if i == 1 else str(i - 1).encode(),) * 10) for i in range(1, 10))
                               + b']><svg xmlns="http://www.w3.org/2000/svg"><text>&a9;</text></svg>')
    bad["tiff.png"] = (b"II*\x00\x08\x00\x00\x00" + struct.pack("<H", 3)
                       + struct.pack("<HHII", 256, 4, 1, 100000) + struct.pack("<HHII", 257, 4, 1, 100000)
                       + struct.pack("<HHII", 273, 4, 1, 2**31) + b"\0\0\0\0")
    bad["xpm.png"] = b'/* XPM */\nstatic char *x[] = {\n"100000 100000 1 1",\n"a c #000000",\n};\n'
    bad["tga.png"] = bytes([0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]) + struct.pack("<HH", 65535, 65535) + bytes([24, 0]) + b"\0" * 30
    bad["pgm-huge.png"] = b"P5\n100000 100000\n255\n" + b"\0" * 10
    bad["bmp.png"] = b"BM" + struct.pack("<IHHI", 0, 0, 0, 54) + struct.pack("<IiiHHIIiiII", 40, 100000, -100000, 1, 8, 0, 0, 0, 0, 0, 0)
    bad["gif.png"] = b"GIF89a" + struct.pack("<HH", 65535, 65535) + b"\0\0\0" + b";"
    jpg = tiny_jpeg()
    bad["truncated.jpg"] = jpg[:len(jpg) // 2]
    bad["jpeg-header-only.jpg"] = jpg[:20]
    bad["jpeg-65500x65500.jpg"] = jpg.replace(bytes.fromhex("ffc0000b08000800080101"), bytes.fromhex("ffc0000b08ffdcffdc0101"))
    bad["empty.png"] = b""
    bad["random.png"] = bytes((i * 7919 + 13) % 256 for i in range(5000))
    files = {k: m.write("pictures/bad/" + k, v) for k, v in bad.items()}
    d = m.path("pictures/bad/a-directory.png")
    os.makedirs(d, exist_ok=True)
    files["a-directory.png"] = d
    fifo = m.path("pictures/bad/a-fifo.png")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    files["a-fifo.png"] = fifo
    files["dev-zero"] = "/dev/zero"
    files["missing.png"] = m.path("pictures/bad/missing.png")
    cap = os.path.join(MODELS, "captioner.safetensors")
    conv = os.path.join(MODELS, "fashion-mnist-nonlocal.safetensors")
    for name, p in sorted(files.items()):
        kinds = {fifo: "fifo"} if p == fifo else {}
        m.add(f"picture/caption/{name}", ["{qkv}", "caption", "--threads", "1", "-m", cap, p], names=[p], kinds=kinds)
        if name in RESIZE_PICTURES:
            m.add(f"picture/caption-resize/{name}", ["{qkv}", "caption", "--resize", "--threads", "1", "-m", cap, p],
                  names=[p], kinds=kinds)
        m.add(f"picture/classify/{name}", ["{qkv}", "classify", "--threads", "1", "-m", conv, p], names=[p], kinds=kinds)
        o = m.out("attend-pic")
        m.add(f"picture/attend-captioner/{name}",
              ["{qkv}", "attend", "--threads", "1", "-m", cap, "-o", o, p], names=[p], kinds=kinds)
    return pics


# -- flags and output paths --

VALID_FLAG_VALUES = {("--threads", "1000000"), ("--top-k", "9223372036854775807"), ("--top", "9223372036854775807"),
                     ("--scenes", "4294967296"), ("--temperature", "inf"), ("--temperature", "1e300")}

def add_flag_cases(m, files, pics):
    tr = files.get("transformer")
    gpt = files.get("gpt")
    cap = os.path.join(MODELS, "captioner.safetensors")
    conv = files.get("convnet")
    inp = m.write("flags/in.txt", "one two\nthree four\n")
    numeric = [
        ("translate", ["-m", tr, "one"], ["--beam", "-b"], ["0", "-1", "65", "1000000", "2147483648", "9223372036854775808", "x", "1e300"]),
        ("translate", ["-m", tr, "one"], ["--max-input-length"], ["-2", "1000001", "9223372036854775808", "x"]),
        ("translate", ["-m", tr, "one"], ["--max-extra"], ["0", "-1", "10001", "9223372036854775808"]),
        ("translate", ["-m", tr, "one"], ["--max-length"], ["-1", "1000001", "9223372036854775808", "x"]),
        ("translate", ["-m", tr, "one"], ["--batch-size"], ["0", "-1", "4097", "9223372036854775808"]),
        ("translate", ["-m", tr, "one"], ["--alpha"], ["-1", "6", "nan", "inf", "1e300"]),
        ("translate", ["-m", tr, "one"], ["--threads"], ["0", "-1", "1000000", "2147483648", "9223372036854775808"]),
        ("translate", ["-m", tr, "one"], ["--dtype"], ["f64", ""]),
        ("translate", ["-m", tr, "one"], ["--device"], ["cuda:99999999999", "gpu", "cuda:-1"]),
        ("generate", ["-m", gpt], ["-n", "--max-new-tokens"], ["-1", "9223372036854775807", "1000000000000", "x"]),
        ("generate", ["-m", gpt, "-n", "2"], ["--top-k"], ["-1", "9223372036854775807"]),
        ("generate", ["-m", gpt, "-n", "2"], ["--top-p"], ["0", "-1", "1.5", "nan"]),
        ("generate", ["-m", gpt, "-n", "2"], ["--temperature"], ["-1", "nan", "inf", "1e300"]),
        ("generate", ["-m", gpt, "-n", "2"], ["--repetition-penalty"], ["0", "-1", "11", "nan", "inf"]),
        ("generate", ["-m", gpt, "-n", "2"], ["--frequency-penalty"], ["-3", "2.5", "nan", "-inf", "1e300"]),
        ("generate", ["-m", gpt, "-n", "2"], ["--presence-penalty"], ["-3", "2.5", "nan", "inf"]),
        ("generate", ["-m", gpt, "-n", "2"], ["--num-samples"], ["0", "-1", "1000000000000"]),
        ("generate", ["-m", gpt, "-n", "2"], ["--seed"], ["-1", "18446744073709551616"]),
        ("generate", ["-m", gpt, "-n", "2"], ["--threads"], ["0", "1000000", "2147483648"]),
        ("caption", ["-m", cap, pics["captioner"]], ["--beam"], ["0", "65", "-1", "1000000"]),
        ("caption", ["-m", cap, pics["captioner"]], ["--threads"], ["1000000", "0"]),
        ("caption", ["-m", cap], ["--scenes"], ["-1", "9223372036854775807", "4294967296"]),
        ("attend", ["-m", tr, "-o", "{out}", "one"], ["--beam"], ["0", "65", "1000000"]),
        ("attend", ["-m", tr, "-o", "{out}", "one"], ["--threads"], ["1000000"]),
        ("attend", ["-m", conv, "-o", "{out}", pics["convnet"]], ["--grid"], ["0", "9", "-1", "1000000"]),
        ("attend", ["-m", conv, "-o", "{out}", pics["convnet"]], ["--block"], ["-1", "99", "9223372036854775807"]),
        ("classify", ["-m", conv, pics["convnet"]], ["--top"], ["0", "-1", "9223372036854775807"]),
        ("classify", ["-m", os.path.join(MODELS, "fashion-mnist-nonlocal.safetensors")], ["--test-images"],
         ["-1", "9223372036854775807", "10000"]),
        ("eval", ["-m", tr, "--src", inp, "--ref", inp], ["--limit"], ["-1"]),
        ("eval", ["-m", tr, "--src", inp, "--ref", inp, "--limit", "1"], ["--seed"], ["-1", "18446744073709551616"]),
        ("eval", ["-m", tr, "--src", inp, "--ref", inp], ["--bucket-width", "--by-length"], ["0"]),
        ("eval", ["-m", cap], ["--scenes"], ["0", "1000001", "-1"]),
        ("eval", ["-m", cap, "--scenes", "1"], ["--first"], ["-1", "9223372036854775807"]),
        ("train", [os.path.join(m.tmp, "configs", "gpt.json"), "-o", "{out}", "-q"], ["--threads"],
         ["0", "-1", "1000000", "2147483648"]),
        ("scenes", ["-o", "{out}"], ["-n"], ["-1", "9223372036854775807", "1000000000000"]),
        ("bench", ["linear-cross-entropy", "-d", "2", "-V", "3"], ["--tokens", "-N"],
         ["0", "-1", "9223372036854775807", "x"]),
        ("bench", ["linear-cross-entropy", "-N", "2", "-d", "2"], ["--vocab", "-V"], ["0", "2147483648", "1e300"]),
        ("bench", ["linear-cross-entropy", "-N", "2", "-V", "3"], ["--dim", "-d"], ["0", "9223372036854775807"]),
        ("bench", ["linear-cross-entropy", "-N", "2", "-d", "2", "-V", "3"], ["--chunk-rows"], ["-1", "x"]),
        ("bench", ["linear-cross-entropy", "-N", "2", "-d", "2", "-V", "3"], ["--dtype"], ["f64", ""]),
        ("bench", ["linear-cross-entropy", "-N", "2", "-d", "2", "-V", "3"], ["--repeats"], ["0", "-1"]),
        ("bench", ["tokenizer", os.path.join(REPO, "tests/golden/tokenizers/gpt2"), "-i", inp], ["--repeats"],
         ["0", "-1", "1001", "x"]),
    ]
    for cmd, args, flags, values in numeric:
        flag = flags[0]
        for v in values:
            out = m.out(f"flag-{cmd}")
            argv = ["{qkv}", cmd] + [out if a == "{out}" else a for a in args]
            if flag == "--bucket-width":
                argv += ["--by-length"]
            argv += [flag, v]
            if flag != "--threads" and "--threads" not in argv:
                argv += ["--threads", "1"] if cmd not in ("scenes", "average", "export", "eval") else []
            # values one may pass: --threads 1000000 (qkv may clamp it or refuse it), more top-k / top
            # classes than there are (clamped), a scene index past 2^32 (scenes are made from their index),
            # an infinite temperature (uniform sampling)
            expect = "any" if (flag, v) in VALID_FLAG_VALUES else "fail"
            if flag == "--num-samples" and v == "1000000000000":
                continue  # a valid (large) request: it would sample for the whole timeout
            if flag == "-n" and cmd == "generate" and v in ("9223372036854775807", "1000000000000"):
                expect = "any"  # a legitimate request for a long text: it runs; the timeout catches a hang
                continue  # would generate for the whole timeout; not a hostile-input check
            if flag == "-n" and cmd == "scenes" and v != "-1":
                continue  # a valid (large) request
            what = "bench-tokenizer" if cmd == "bench" and args[0] == "tokenizer" else cmd  # (bench's own --repeats)
            m.add(f"flag/{what}/{flag}={v}", argv, expect=expect, names=flags + [v], usage=True,
                  gone=[out] if cmd in ("attend", "train", "scenes") and expect == "fail" else [])
    # text inputs (-i, --src, --ref, --hyp) that are not text files
    import gzip
    bomb = m.path("inputs/bomb.txt.gz")
    if not os.path.exists(bomb):
        with gzip.open(bomb, "wb", compresslevel=1) as g:  # 512 MiB of zeros, no newline: one endless line
            z = b"\0" * (1 << 20)
            for _ in range(512):
                g.write(z)
    inputs = {"dev-zero": "/dev/zero", "fifo": None, "directory": m.path("inputs"),
              "missing": m.path("inputs/missing.txt"), "gzip-bomb": bomb,
              "bad-gzip": m.write("inputs/bad.txt.gz", gzip.compress(b"one two\n" * 100)[:-20]),
              "not-gzip": m.write("inputs/plain.txt.gz", "one two\n"),
              "invalid-utf8": m.write("inputs/invalid.txt", b"one \xff\xfe two \xc3\n"),
              "long-line": m.write("inputs/long-line.txt", "one two " * 200000 + "\n")}
    one = m.write("inputs/one.txt", "one two\n")  # the other side: one line, as the hostile ones hold
    two_lines = "one two\nthree four\n"
    two = m.write("inputs/two.txt", two_lines)  # the other side of a FIFO's two lines
    for label, p in inputs.items():
        # replaced bytes / a truncated line with a warning are documented; plain text named .gz is read as such
        valid = label in ("invalid-utf8", "long-line", "not-gzip")
        for cmd in ("translate-i", "eval-src", "eval-ref", "eval-hyp"):
            kinds, partner, other, lines = {}, None, one, None
            if label == "fifo":
                # a text input may be a pipe (`-i <(cmd)`): a FIFO of its own per case (cases run side by
                # side), read in place as `cat` does; a partner writes two plain lines, all processed
                p = m.path(f"inputs/a-fifo-{cmd}.txt")
                if not os.path.exists(p):
                    os.mkfifo(p)
                kinds, partner, other = {p: "fifo"}, {"write": p, "data": two_lines.encode()}, two
                lines = 2 if cmd == "translate-i" else None
            argv = {"translate-i": ["{qkv}", "translate", "--threads", "1", "-m", tr, "-i", p],
                    "eval-src": ["{qkv}", "eval", "--threads", "1", "-m", tr, "--src", p, "--ref", other],
                    "eval-ref": ["{qkv}", "eval", "--threads", "1", "-m", tr, "--src", other, "--ref", p],
                    "eval-hyp": ["{qkv}", "eval", "--hyp", p, "--ref", other]}[cmd]
            m.add(f"input/{cmd}/{label}", argv, expect="pass" if label == "fifo" else "any" if valid else "fail",
                  names=[p], kinds=kinds, partner=partner, stdout_lines=lines)

    # OMP_NUM_THREADS and friends
    for var, val in (("OMP_NUM_THREADS", "1000000"), ("OMP_NUM_THREADS", "-1"), ("OMP_NUM_THREADS", "x"),
                     ("OMP_NUM_THREADS", "99999999999999999999"), ("OMP_STACKSIZE", "100G"),
                     ("QKV_THREADS", "1000000")):
        for cmd, args in (("translate", ["-m", tr, "one"]), ("generate", ["-m", gpt, "-n", "2"])):
            m.add(f"env/{cmd}/{var}={val}", ["{qkv}", cmd] + args, expect="any", names=[var], env={var: val})
    # the int8 products' activation bits: 7, or 8 where the CPU sums them exactly (else an error, as
    # for anything else)
    for val, expect in (("7", "pass"), ("8", "any"), ("9", "fail"), ("x", "fail"), ("-1", "fail"), ("8" * 30, "fail")):
        var = "QKV_INT8_ACTIVATION_BITS"
        m.add(f"env/translate-int8/{var}={val[:12]}", ["{qkv}", "translate", "--dtype", "int8", "-m", tr, "one"],
              expect=expect, names=[] if expect == "pass" else [var], env={var: val})
    # output paths that are special files: /dev/null made with mknod, a FIFO, planted symlinks
    victim = m.write("flags/victim.txt", "do not touch\n")
    for label in ("chr", "fifo", "link", "dangling-link", "directory", "temp-name-link"):
        for cmd in ("translate", "average", "generate-none", "attend", "scenes", "eval-hyp-out", "eval-csv",
                    "train", "export"):
            base = m.path(f"flags/outputs/{cmd}-{label}")
            kinds = {}
            if label == "chr":
                try:
                    os.mknod(base, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                    kinds[base] = "chr"
                except (PermissionError, OSError):
                    m.skipped.append(f"output/{cmd}/{label}: mknod needs root")
                    continue
            elif label == "fifo":
                os.mkfifo(base)
                kinds[base] = "fifo"
            elif label == "link":
                os.symlink(victim, base)
                kinds[base] = "link:" + victim  # writing through a link -o names is the user's choice
            elif label == "dangling-link":
                target = m.path(f"flags/outputs/planted-target-{cmd}")
                os.symlink(target, base)
                kinds[base] = "link:" + target
                kinds[target] = "absent"
            elif label == "directory":
                os.makedirs(base)
                kinds[base] = "dir"
            elif label == "temp-name-link":
                # the runner plants <base>.tmp-<pid> -> a victim in the child before exec (qkv's temp name)
                if cmd in ("train", "scenes", "export"):
                    continue  # folders: their files' temp names are inside
                own_victim = m.write(f"flags/victims/{cmd}.txt", "do not touch\n")
                kinds[own_victim] = "content:do not touch\n"
            if cmd == "translate":
                argv = ["{qkv}", "translate", "--threads", "1", "-m", tr, "-i", inp, "-o", base]
            elif cmd == "average":
                argv = ["{qkv}", "average", tr, tr, "-o", base]
            elif cmd == "attend":
                if label not in ("link", "dangling-link", "chr", "fifo"):
                    continue
                argv = ["{qkv}", "attend", "--threads", "1", "-m", tr, "-o", base, "one"]
            elif cmd == "scenes":
                argv = ["{qkv}", "scenes", "-n", "1", "-o", base]
            elif cmd == "eval-hyp-out":
                argv = ["{qkv}", "eval", "--threads", "1", "-m", tr, "--src", inp, "--ref", inp, "--hyp-out", base]
            elif cmd == "eval-csv":
                argv = ["{qkv}", "eval", "--threads", "1", "-m", tr, "--src", inp, "--ref", inp, "--by-length",
                        "--by-length-csv", base]
            elif cmd == "train":
                argv = ["{qkv}", "train", os.path.join(m.tmp, "configs", "gpt.json"), "-q", "--threads", "1", "-o", base]
            elif cmd == "export":
                if label in ("dangling-link", "directory"):
                    continue  # a valid OUT_DIR: the export itself needs Python with ctranslate2
                argv = ["{qkv}", "export", "--to", "ctranslate2", tr, base]
            else:
                continue
            # writing to /dev/null or through a link to a regular file could be defended either way;
            # what must hold: exit 0 or a clean exit 1 naming the path, and the file type unchanged
            # a FIFO is written in place, as the shell's `>` does (opening it waits for a reader): a partner
            # drains it; the command must succeed and the output must have gone through the FIFO
            fifo_out = label == "fifo" and cmd in ("translate", "average", "eval-hyp-out", "eval-csv")  # files, not folders
            m.add(f"output/{cmd}/{label}", argv, expect="pass" if fifo_out else "any", names=[base, "-o", "--out"],
                  kinds=kinds, plant=[(base, own_victim)] if label == "temp-name-link" else [], no_temps=[base],
                  partner={"read": base} if fifo_out else None)


# -- Python --

PY_CASES = [
    # (name, code, expectation) — expectation: "exc" (a Python exception), "any" (an exception or OK)
    ("as_tensor-2^40-no-wrap",
     "t = qkv.as_tensor([2**40, -2**40, 3, 2**31])\n"
     "v = [float(x) for x in t.numpy().ravel()] if hasattr(t, 'numpy') else None\n"
     "assert v == [2.0**40, -2.0**40, 3.0, 2.0**31], f'values wrapped or rounded: {v} dtype {t.dtype}'", "any"),
    ("as_tensor-2^64", "qkv.as_tensor([2**64])", "exc"),
    ("as_tensor-2^63",  # past int64: an error, or floats that hold it
     "t = qkv.as_tensor([2**63, 1])\nv = [float(x) for x in t.numpy().ravel()]\n"
     "assert v == [2.0**63, 1.0], f'values wrapped: {v} dtype {t.dtype}'", "any"),
    ("as_tensor-huge-int", "qkv.as_tensor([10**400])", "exc"),
    ("as_tensor-ragged", "qkv.as_tensor([[1, 2], [3]])", "exc"),
    ("as_tensor-strings", "qkv.as_tensor(['a', 'b'])", "exc"),
    ("as_tensor-none", "qkv.as_tensor(None)", "exc"),
    ("as_tensor-dict", "qkv.as_tensor({'a': 1})", "exc"),
    ("as_tensor-deep-list", "x = 1\nfor _ in range(100000): x = [x]\nqkv.as_tensor(x)", "exc"),
    ("as_tensor-self-ref", "x = [1]\nx.append(x)\nqkv.as_tensor(x)", "exc"),
    ("as_tensor-rank-200", "x = 1.0\nfor _ in range(200): x = [x]\nt = qkv.as_tensor(x)\nrepr(t)", "any"),
    ("zeros-rank-200-repr", "t = qkv.zeros([1] * 200)\nprint(repr(t)[:100])", "any"),
    ("zeros-2^62", "qkv.zeros([2**62])", "exc"),
    ("zeros-2^32x2^32", "qkv.zeros([2**32, 2**32])", "exc"),
    ("zeros-negative", "qkv.zeros([-1, 4])", "exc"),
    ("ones-2^40", "qkv.ones([2**20, 2**20])", "exc"),
    ("randn-2^63-1", "qkv.randn([2**63 - 1])", "exc"),
    ("tensor-nan-inf", "t = qkv.tensor([float('nan'), float('inf')])\nrepr(t)", "any"),
    ("set_num_threads-10^6", "qkv.set_num_threads(10**6)\nqkv.zeros([4]).numpy()", "any"),
    ("set_num_threads-0", "qkv.set_num_threads(0)", "exc"),
    ("set_num_threads--1", "qkv.set_num_threads(-1)", "exc"),
    ("set_num_threads-2^40", "qkv.set_num_threads(2**40)", "exc"),
    ("set_num_threads-2^64", "qkv.set_num_threads(2**64)", "exc"),
    # the host allocator's cache bound (issue 47)
    ("set_cache_limit-nan", "qkv.set_cache_limit(0, float('nan'))", "exc"),
    ("set_cache_limit-inf", "qkv.set_cache_limit(0, float('inf'))", "exc"),
    ("set_cache_limit--1", "qkv.set_cache_limit(0, -1.0)", "exc"),
    ("set_cache_limit-bytes--1", "qkv.set_cache_limit(-1)", "exc"),
    ("set_cache_limit-bytes-2^70", "qkv.set_cache_limit(2**70)", "exc"),
    ("set_cache_limit-str", "qkv.set_cache_limit('lots')", "exc"),
    ("manual_seed--1", "qkv.manual_seed(-1)", "any"),
    ("manual_seed-2^64", "qkv.manual_seed(2**64)", "exc"),
    ("translate-int", "T.translate(5)", "exc"),
    ("translate-none", "T.translate(None)", "exc"),
    ("translate-lone-surrogate", "T.translate('one \\ud800 two')", "exc"),
    ("translate_batch-lone-surrogate", "T.translate_batch(['\\udfff'])", "exc"),
    ("translate-nul", "T.translate('one\\x00two')", "any"),
    ("translate_batch-beam-10^6", "T.translate_batch(['one two'], beam_size=10**6)", "exc"),
    ("translate_batch-beam-2^63", "T.translate_batch(['one two'], beam_size=2**63)", "exc"),
    ("translate_batch-beam-0", "T.translate_batch(['one'], beam_size=0)", "exc"),
    ("translate_batch-max_extra-2^63-1", "T.translate_batch(['one'], max_extra_length=2**63 - 1)", "any"),
    ("translate_batch-max_extra--1", "T.translate_batch(['one'], max_extra_length=-1)", "exc"),
    ("translate_batch-max_length--1", "T.translate_batch(['one'], max_decoding_length=-1)", "exc"),
    ("translate_batch-max_length-2^63-1", "T.translate_batch(['one'], max_decoding_length=2**63 - 1)", "exc"),
    ("translate_batch-max_length-2^64", "T.translate_batch(['one'], max_decoding_length=2**64)", "exc"),
    ("translate_batch-num_hyp-10^6", "T.translate_batch(['one'], num_hypotheses=10**6)", "exc"),
    ("translate_batch-penalty-nan", "T.translate_batch(['one'], length_penalty=float('nan'))", "exc"),
    ("translate_batch-penalty-1e300", "T.translate_batch(['one'], length_penalty=1e300)", "exc"),
    ("translate_batch-not-list", "T.translate_batch('one two')", "any"),
    ("translate_batch-ints", "T.translate_batch([1, 2])", "exc"),
    ("translate_batch-long", "T.translate_batch(['one ' * 1000000])", "any"),
    ("translate-beam-10^6", "T.translate('one', beam_size=10**6)", "exc"),
    ("translate-beam--1", "T.translate('one', beam_size=-1)", "exc"),
    ("Translator-missing", "qkv.Translator(TMP + '/nope.safetensors')", "exc"),
    ("Translator-dir", "qkv.Translator(TMP)", "exc"),
    ("Translator-int", "qkv.Translator(5)", "exc"),
    ("Translator-surrogate-path", "qkv.Translator('\\udc80.safetensors')", "exc"),
    ("Translator-weights-bad", "qkv.Translator(TR, weights='f64')", "exc"),
    ("Translator-device-bad", "qkv.Translator(TR, device='cuda:99999999999')", "exc"),
    ("Translator-gpt-file", "qkv.Translator(GPT)", "exc"),
    ("load-dev-zero", "qkv.load('/dev/zero')", "exc"),
    ("load-fifo", "import os\np = TMP + '/py.fifo'\nos.path.exists(p) or os.mkfifo(p)\nqkv.load(p)", "exc"),
    ("LanguageModel-generate-n-2^64", "L = qkv.LanguageModel(GPT)\nL.generate('to', max_new_tokens=2**64)", "exc"),
    ("LanguageModel-generate-n--1", "L = qkv.LanguageModel(GPT)\nL.generate('to', max_new_tokens=-1)", "exc"),
    ("LanguageModel-generate-temp-nan", "L = qkv.LanguageModel(GPT)\nL.generate('to', max_new_tokens=2, temperature=float('nan'))", "exc"),
    ("LanguageModel-generate-top_k--1", "L = qkv.LanguageModel(GPT)\nL.generate('to', max_new_tokens=2, top_k=-1)", "exc"),
    ("LanguageModel-generate-repetition-nan", "L = qkv.LanguageModel(GPT)\nL.generate('to', max_new_tokens=2, repetition_penalty=float('nan'))", "exc"),
    ("LanguageModel-generate-presence-inf", "L = qkv.LanguageModel(GPT)\nL.generate('to', max_new_tokens=2, presence_penalty=float('inf'))", "exc"),
    ("LanguageModel-generate-frequency-1e308", "L = qkv.LanguageModel(GPT)\nL.generate_batch(['to'], max_new_tokens=2, frequency_penalty=-1e308)", "exc"),
    ("ImageCaptioner-caption-string", "C = qkv.ImageCaptioner(CAP)\nC.caption('picture.png')", "exc"),
    ("ImageCaptioner-caption-none", "C = qkv.ImageCaptioner(CAP)\nC.caption(None)", "exc"),
    ("ImageCaptioner-caption-wrong-shape", "C = qkv.ImageCaptioner(CAP)\nC.caption(qkv.zeros([1, 1, 7, 7]))", "exc"),
    ("ImageCaptioner-caption-empty-batch", "C = qkv.ImageCaptioner(CAP)\nC.caption(qkv.zeros([0, 1, 96, 96]))", "any"),
    ("ImageCaptioner-caption-nan", "C = qkv.ImageCaptioner(CAP)\nC.caption(qkv.tensor([[[[float('nan')] * 96] * 96]]))", "any"),
    ("ImageCaptioner-caption-beam-10^6", "C = qkv.ImageCaptioner(CAP)\nC.caption(qkv.zeros([1, 1, 96, 96]), beam_size=10**6)", "exc"),
    ("ImageCaptioner-caption-beam-2^63", "C = qkv.ImageCaptioner(CAP)\nC.caption(qkv.zeros([1, 1, 96, 96]), beam_size=2**63)", "exc"),
    ("ImageCaptioner-gpt-file", "qkv.ImageCaptioner(GPT)", "exc"),
    ("ImageClassifier-classify-rank-200", "C = qkv.ImageClassifier(CONV)\nC.classify(qkv.zeros([1] * 200))", "exc"),
    ("ImageClassifier-classify-list", "C = qkv.ImageClassifier(CONV)\nC.classify([[1, 2], [3]])", "exc"),
    ("ImageClassifier-translator-file", "qkv.ImageClassifier(TR)", "exc"),
    ("ImageClassifier-evaluate-labels-short", "C = qkv.ImageClassifier(CONV)\nC.evaluate(qkv.zeros([3, 1, 28, 28]), [0])", "exc"),
    ("ImageClassifier-evaluate-label-2^31", "C = qkv.ImageClassifier(CONV)\nC.evaluate(qkv.zeros([1, 1, 28, 28]), [2**31])", "exc"),
    ("ImageClassifier-evaluate-label--1", "C = qkv.ImageClassifier(CONV)\nC.evaluate(qkv.zeros([1, 1, 28, 28]), [-1])", "exc"),
    ("ImageClassifier-evaluate-label-str", "C = qkv.ImageClassifier(CONV)\nC.evaluate(qkv.zeros([1, 1, 28, 28]), ['a'])", "exc"),
    ("ImageClassifier-evaluate-labels-none", "C = qkv.ImageClassifier(CONV)\nC.evaluate(qkv.zeros([1, 1, 28, 28]), None)", "exc"),
    ("ImageClassifier-evaluate-batch-0", "C = qkv.ImageClassifier(CONV)\nC.evaluate(qkv.zeros([1, 1, 28, 28]), [0], batch_size=0)", "exc"),
    ("ImageClassifier-evaluate-batch-2^63", "C = qkv.ImageClassifier(CONV)\nC.evaluate(qkv.zeros([1, 1, 28, 28]), [0], batch_size=2**63)", "exc"),
    ("ImageClassifier-evaluate-empty", "C = qkv.ImageClassifier(CONV)\nC.evaluate(qkv.zeros([0, 1, 28, 28]), [])", "any"),
    ("ImageClassifier-evaluate-nan", "C = qkv.ImageClassifier(CONV)\nC.evaluate(qkv.tensor([[[[float('nan')] * 28] * 28]]), [0])", "any"),
    ("LanguageModel-perplexity-empty", "L = qkv.LanguageModel(GPT)\nL.perplexity('')", "exc"),
    ("LanguageModel-perplexity-block--1", "L = qkv.LanguageModel(GPT)\nL.perplexity('to be or not', block_size=-1)", "exc"),
    ("LanguageModel-perplexity-block-2^64", "L = qkv.LanguageModel(GPT)\nL.perplexity('to be or not', block_size=2**64)", "exc"),
    ("LanguageModel-perplexity-surrogate", "L = qkv.LanguageModel(GPT)\nL.perplexity('\\ud800 to be')", "exc"),
    ("LanguageModel-perplexity-bytes", "L = qkv.LanguageModel(GPT)\nL.perplexity(b'to be')", "exc"),
    ("LanguageModel-perplexity-1MB", "L = qkv.LanguageModel(GPT)\nL.perplexity('to be or not to be ' * 50000, block_size=64)", "any"),
    ("LanguageModel-generate-surrogate", "L = qkv.LanguageModel(GPT)\nL.generate('\\ud800', max_new_tokens=2)", "exc"),
    ("evaluate_translations-bucket--1", "qkv.evaluate_translations(['a'], [['a']], sources=['a'], bucket_width=-1)", "exc"),
    ("evaluate_translations-bucket-2^64", "qkv.evaluate_translations(['a'], [['a']], sources=['a'], bucket_width=2**64)", "exc"),
    ("evaluate_translations-bucket-2^62", "qkv.evaluate_translations(['a'], [['a']], sources=['a'], bucket_width=2**62)", "any"),
    ("evaluate_translations-bucket-1-long", "s = ['x ' * 200000]\nqkv.evaluate_translations(s, [s], sources=s, bucket_width=1)", "any"),
    ("evaluate_translations-not-strings", "qkv.evaluate_translations([1, 2], [[3, 4]])", "exc"),
    ("evaluate_translations-flat-refs", "qkv.evaluate_translations(['a'], ['a'])", "exc"),
    ("evaluate_translations-none", "qkv.evaluate_translations(None, None)", "exc"),
    ("evaluate_translations-mismatch", "qkv.evaluate_translations(['a', 'b'], [['a']], sources=['a'], group=True)", "exc"),
    ("evaluate_translations-surrogate", "qkv.evaluate_translations(['\\ud800'], [['a']])", "exc"),
    ("evaluate_translations-empty", "qkv.evaluate_translations([], [[]])", "any"),
    ('linear_cross_entropy-target-2^40', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), [0, 2**40])", 'exc'),
    ('linear_cross_entropy-target-out-of-range', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), [0, 5])", 'exc'),
    ('linear_cross_entropy-target-negative', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), [-7, 1])", 'exc'),
    ('linear_cross_entropy-target-str', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), 'ab')", 'exc'),
    ('linear_cross_entropy-chunk--1', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), [0, 1], chunk_rows=-1)", 'exc'),
    ('linear_cross_entropy-chunk-2^63', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), [0, 1], chunk_rows=2**63)", 'exc'),
    ('linear_cross_entropy-chunk-2^62', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), [0, 1], chunk_rows=2**62)", 'any'),
    ('linear_cross_entropy-reduction-none', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), [0, 1], reduction='none')", 'exc'),
    ('linear_cross_entropy-smoothing-nan', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), [0, 1], label_smoothing=float('nan'))", 'exc'),
    ('linear_cross_entropy-weight-mismatch', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 3]), [0, 1])", 'exc'),
    ('linear_cross_entropy-bias-mismatch', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 4]), qkv.zeros([5, 4]), [0, 1], qkv.zeros([4]))", 'exc'),
    ('linear_cross_entropy-x-3d', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.zeros([2, 2, 4]), qkv.zeros([5, 4]), [0, 1])", 'exc'),
    ('linear_cross_entropy-no-rows', "F = qkv.nn.functional\nimport numpy as np\nF.linear_cross_entropy(qkv.zeros([0, 4]), qkv.zeros([5, 4]), np.zeros(0, np.int32))", 'any'),
    ('linear_cross_entropy-nan-x', "F = qkv.nn.functional\nF.linear_cross_entropy(qkv.tensor([[float('nan')] * 4]), qkv.zeros([5, 4]), [1])", 'any'),
    ('cross_entropy-target-float', "F = qkv.nn.functional\nF.cross_entropy(qkv.zeros([2, 5]), qkv.zeros([2]))", 'exc'),
    ('cross_entropy-reduction-bogus', "F = qkv.nn.functional\nF.cross_entropy(qkv.zeros([2, 5]), [0, 1], reduction='avg')", 'exc'),
]

PY_TRAIN = [
    ("batch_size-2^62", ("train", "batch_size"), 2**62),
    ("batch_size-4611686018427387904", ("train", "batch_size"), 4611686018427387904),
    ("batch_size-0", ("train", "batch_size"), 0),
    ("batch_size-2^64", ("train", "batch_size"), 2**64),
    ("batch_size-float", ("train", "batch_size"), 2.5),
    ("batch_size-nan", ("train", "batch_size"), float("nan")),
    ("grad_accum-1e9", ("train", "gradient_accumulation_steps"), 10**9),
    ("n_layer-100000", ("model", "n_layer"), 100000),
    ("n_embd-2^40", ("model", "n_embd"), 2**40),
    ("block_size-2^40", ("model", "block_size"), 2**40),
    ("n_head-0", ("model", "n_head"), 0),
    ("data.path-dev-zero", ("data", "path"), "/dev/zero"),
    ("data.path-directory", ("data", "path"), "/tmp"),
    ("model-none", ("model",), None),
    ("learning_rate-inf", ("train", "learning_rate"), float("inf")),
]


def add_python_cases(m, files):
    tr, gpt = files.get("transformer"), files.get("gpt")
    cap, conv = os.path.join(MODELS, "captioner.safetensors"), files.get("convnet")
    prelude = (f"import sys\nimport qkv\nTMP = {m.tmp!r}\nTR = {tr!r}\nGPT = {gpt!r}\nCAP = {cap!r}\nCONV = {conv!r}\n"
               "T = qkv.Translator(TR) if 'T.' in CODE else None\n")
    runner = ("try:\n    exec(compile(CODE, 'case', 'exec'))\n"
              "except BaseException as e:\n"
              "    msg = str(e).splitlines()[0] if str(e) else ''\n"
              "    print(f'EXC {type(e).__name__}: {msg}', file=sys.stderr); sys.exit(1)\n"
              "print('OK', file=sys.stderr)\n")
    cases = list(PY_CASES)
    gpt_cfg = json.load(open(os.path.join(m.tmp, "configs", "gpt.json")))
    for name, path, val in PY_TRAIN:
        cfg = copy.deepcopy(gpt_cfg)
        node = cfg
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = val
        out = m.out("py-train")
        code = f"import json\ncfg = json.loads({json.dumps(cfg)!r})\nqkv.train(cfg, out_dir={out!r}, quiet=True)"
        cases.append((f"train-{name}", code, "exc"))
    cases.append(("train-deep-dict", "d = {}\nx = d\nfor _ in range(100000):\n    x['a'] = {}\n    x = x['a']\n"
                  f"qkv.train(d, out_dir={m.out('py-train')!r}, quiet=True)", "exc"))
    cases.append(("train-self-ref", "d = {'task': 'lm'}\nd['model'] = d\n"
                  f"qkv.train(d, out_dir={m.out('py-train')!r}, quiet=True)", "exc"))
    cases.append(("train-not-dict", f"qkv.train(5, out_dir={m.out('py-train')!r}, quiet=True)", "exc"))
    # chat messages that are no JSON, or a model without a chat template (qkv's own GPT)
    lm = "lm = qkv.LanguageModel(GPT)\n"
    cases += [
        ("chat-deep-messages", lm + "x = []\nfor _ in range(100000):\n    x = [x]\nlm.apply_chat_template(x)", "exc"),
        ("chat-self-reference", lm + "x = [{'role': 'user'}]\nx[0]['content'] = x\nlm.apply_chat_template(x)", "exc"),
        ("chat-object-content", lm + "lm.apply_chat_template([{'role': 'user', 'content': object()}])", "exc"),
        ("chat-nan-kwarg", lm + "lm.apply_chat_template([], temperature=float('nan'))", "exc"),
        ("chat-no-template", lm + "lm.chat([{'role': 'user', 'content': 'hi'}], max_new_tokens=2)", "exc"),
        ("chat-messages-not-list", lm + "lm.chat('hi')", "exc"),
    ]
    # the encoders' Python methods on values that are no texts, or options out of range
    golden = os.path.join(REPO, "tests", "golden", "hf")
    enc = f"import os\nc = qkv.load({os.path.join(golden, 'bert-seqcls')!r})\n"
    st = f"e = qkv.load({os.path.join(golden, 'st-bert')!r})\n"
    tk = f"t = qkv.load({os.path.join(golden, 'bert-tokcls')!r})\n"
    cases += [
        ("classify-not-text", enc + "c.text_classification([1, 2])", "exc"),
        ("classify-top-k", enc + "c.text_classification('x', top_k=-3)", "exc"),
        ("classify-top-k-float", enc + "c.text_classification('x', top_k=2.5)", "exc"),
        ("classify-function", enc + "c.text_classification('x', function_to_apply='tanh')", "exc"),
        ("classify-batch-size", enc + "c.text_classification(['x'], batch_size=0)", "exc"),
        ("classify-long", enc + "c.text_classification('cat ' * 100000)", "exc"),
        ("token-classify-strategy", tk + "t.token_classification('x', aggregation_strategy='sum')", "exc"),
        ("token-classify-labels", tk + "t.token_classification('x', ignore_labels=[None])", "exc"),
        ("encode-not-text", st + "e.encode(object())", "exc"),
        ("encode-pooling", st + "e.encode('x', pooling='sum')", "exc"),
        ("encode-empty-list", st + "assert e.encode([]).shape[0] == 0", "any"),  # (an AssertionError fails it)
        ("encode-surrogates", st + "e.encode('\\ud800x')", "exc"),
    ]
    ce = f"r = qkv.load({os.path.join(golden, 'ce-bert')!r})\n"
    cases += [
        ("rank-not-text", ce + "r.rank('q', [1, 2])", "exc"),
        ("rank-query-not-text", ce + "r.rank(None, ['d'])", "exc"),
        ("rank-top-k", ce + "r.rank('q', ['d'], top_k=-1)", "exc"),
        ("rank-activation", ce + "r.rank('q', ['d'], activation='softmax')", "exc"),
        ("rank-max-length", ce + "r.rank('q', ['d'], max_length=2)", "exc"),  # no room for [CLS] [SEP] [SEP]
        ("rank-max-length-past", ce + "r.rank('q', ['d'], max_length=10**9)", "exc"),
        ("rank-long", ce + "assert len(r.rank('cat ' * 100000, ['dog ' * 100000, 'x'])) == 2", "any"),
        ("rank-three-labels", enc + "c.rank('q', ['d'])", "exc"),
    ]
    nli = f"z = qkv.load({os.path.join(golden, 'deberta-seqcls')!r})\n"
    cases += [
        ("zero-shot-labels-not-text", nli + "z.zero_shot_classification('x', [1, 2])", "exc"),
        ("zero-shot-labels-none", nli + "z.zero_shot_classification('x', None)", "exc"),
        ("zero-shot-no-label", nli + "z.zero_shot_classification('x', ' , ,')", "exc"),
        ("zero-shot-template-brace", nli + "z.zero_shot_classification('x', 'a', hypothesis_template='{} {x}')", "exc"),
        ("zero-shot-template-huge", nli + "z.zero_shot_classification('x', 'a', hypothesis_template='{}' + 'ab ' * 100000)",
         "exc"),
        ("zero-shot-batch-size", nli + "z.zero_shot_classification('x', 'a', batch_size=0)", "exc"),
        ("zero-shot-long", nli + "assert len(z.zero_shot_classification(['cat ' * 100000], ['a', 'b'])) == 1", "any"),
        ("zero-shot-not-nli", enc + "c.zero_shot_classification('x', 'a, b')", "exc"),
    ]
    qa = f"a = qkv.load({os.path.join(golden, 'qa-bert')!r})\n"
    cases += [
        ("answer-not-text", qa + "a.question_answering(1, 'x')", "exc"),
        ("answer-mixed", qa + "a.question_answering('Who?', ['x', 'y'])", "exc"),
        ("answer-empty", qa + "a.question_answering('', 'x')", "exc"),
        ("answer-stride", qa + "a.question_answering('Who?', 'x', doc_stride=10**9)", "exc"),
        ("answer-window", qa + "a.question_answering('Who?', 'x', max_seq_len=10**9)", "exc"),
        ("answer-surrogates", qa + "a.question_answering('Who?', '\\ud800x')", "exc"),
        ("answer-long", qa + "assert a.question_answering('Who?', 'cat ' * 20000)['answer']", "any"),
        ("answer-not-qa", enc + "c.question_answering('Who?', 'x')", "exc"),
    ]
    for name, code, expect in cases:
        script = f"CODE = {code!r}\n" + prelude + runner
        m.add(f"python/{name}", ["{python}", "-c", script], expect=expect, python=True)


# -- int8 model files (qkv quantize) --

def add_quantize_cases(m, files):
    """qkv quantize's inputs and outputs, and int8 files whose rows, scales or list lie."""
    f = files.get("transformer")
    if not f:
        return
    good = m.path("models/int8/good.safetensors")
    r = subprocess.run([m.qkv, "quantize", f, "-o", good], capture_output=True, text=True)
    if r.returncode != 0:
        m.skipped.append(f"int8 files: qkv quantize of the tiny transformer failed ({r.stderr.strip()[-200:]})")
        return
    o = m.path("out/q-gpt.safetensors")
    m.add("quantize/input=gpt", ["{qkv}", "quantize", files["gpt"], "-o", o], names=[files["gpt"]], gone=[o])
    o = m.out("avg.safetensors")
    m.add("int8-file/average/valid", ["{qkv}", "average", good, good, "-o", o], names=[good], gone=[o])
    o = m.path("out/q-again.safetensors")
    m.add("quantize/input=int8-file", ["{qkv}", "quantize", good, "-o", o], names=[good], gone=[o])
    same = m.write("models/int8/self.safetensors", open(f, "rb").read())
    m.add("quantize/out=the-input", ["{qkv}", "quantize", same, "-o", same], names=[same])
    o = os.path.join(m.tmp, "out", "no-such-dir", "q.safetensors")  # (m.path would make the folder)
    m.add("quantize/out=missing-folder", ["{qkv}", "quantize", f, "-o", o], names=[o], gone=[o])
    m.add("quantize/dtype=int4", ["{qkv}", "quantize", f, "-o", m.path("out/q4.safetensors"), "--dtype", "int4"],
          names=["--dtype"], usage=True, gone=[m.path("out/q4.safetensors")])
    for dtype in ("int8", "f32", None):  # None: the file's own (int8)
        flags = ["--dtype", dtype] if dtype else []
        m.add(f"int8-file/translate-{dtype or 'default'}/valid",
              ["{qkv}", "translate", "--threads", "1", *flags, "-m", good, "one two"], expect="pass")
    header, data = st_read(good)
    meta = meta_of(header)
    listed = meta["quantized"]["tensors"]
    w = listed[-1]
    wo = header[w]["data_offsets"][0]
    so = header[w + "_scale"]["data_offsets"][0]

    def patched(at, raw):
        return data[:at] + raw + data[at + len(raw):]

    def retyped(name, dtype):
        h = copy.deepcopy(header)
        h[name]["dtype"] = dtype
        return h
    muts = {
        "value=-128": st_bytes(header, patched(wo + 3, b"\x80")),
        "scale=nan": st_bytes(header, patched(so, struct.pack("<f", float("nan")))),
        "scale=-inf": st_bytes(header, patched(so + 4, struct.pack("<f", float("-inf")))),
        "rows-as-u8": st_bytes(retyped(w, "U8"), data),
        "rows-as-bool": st_bytes(retyped(w, "BOOL"), data),
        "list=not-a-list": st_bytes(with_meta(header, {**meta, "quantized": {"dtype": "int8", "tensors": w}}), data),
        "list=number": st_bytes(with_meta(header, {**meta, "quantized": {"dtype": "int8", "tensors": [7]}}), data),
        "list=a-norm": st_bytes(with_meta(header, {**meta, "quantized": {
            "dtype": "int8", "tensors": listed + [n for n in tensors_of(header) if n.endswith("norm1.weight")][:1]}}), data),
        "list=twice": st_bytes(with_meta(header, {**meta, "quantized": {"dtype": "int8", "tensors": listed + [w]}}), data),
        "list=missing": st_bytes(with_meta(header, {**meta, "quantized": {"dtype": "int8", "tensors": listed[:-1]}}), data),
        "dtype=int4": st_bytes(with_meta(header, {**meta, "quantized": {"dtype": "int4", "tensors": listed}}), data),
        "quantized=null": st_bytes(with_meta(header, {**meta, "quantized": None}), data),
    }
    for name, blob in muts.items():
        p = m.write(f"models/int8/{name}.safetensors", blob)
        for dtype in ("int8", "f32", None):  # None: the file's own (int8)
            flags = ["--dtype", dtype] if dtype else []
            m.add(f"int8-file/translate-{dtype or 'default'}/{name}",
                  ["{qkv}", "translate", "--threads", "1", *flags, "-m", p, "one two"], names=[p])
        o = m.out("avg.safetensors")
        m.add(f"int8-file/average/{name}", ["{qkv}", "average", p, p, "-o", o], names=[p], gone=[o])


def add_pretrained_cases(m):
    """Hugging Face folders whose tokenizers are crafted: qkv convert keeps a tokenizer.json as it is
    (its regexes then run on every prompt) and reads a Marian folder's SentencePiece models."""
    import shutil
    golden = os.path.join(REPO, "tests", "golden", "hf")

    def folder(case, name, edit):
        d = m.path(f"hf/{name}/x")[:-2]
        shutil.copytree(os.path.join(golden, case), d, dirs_exist_ok=True)
        edit(d)
        return d

    def json_edit(file, change):  # the folder's `file` (tokenizer.json, config.json) changed by change(j)
        def edit(d):
            p = os.path.join(d, file)
            j = json.load(open(p))
            change(j)
            json.dump(j, open(p, "w"))
        return edit

    replace = {"type": "Replace", "pattern": {"String": "a"}, "content": "a" * 1000}
    crafted = {
        # "a*a*b|." tries a*a*b from every start of a long word: hours on 30,000 letters
        "regex-cubic": lambda j: j.__setitem__("pre_tokenizer", {
            "type": "Split", "pattern": {"Regex": "a*a*b|."}, "behavior": "Isolated", "invert": False}),
        # four Replaces of "a" by 1,000 of them: a terabyte of ten letters
        "replace-chain": lambda j: j.__setitem__("normalizer", {"type": "Sequence", "normalizers": [replace] * 4}),
        # and in the decoder, every character of the generated text
        "decoder-replace-chain": lambda j: j.__setitem__("decoder", {"type": "Sequence", "decoders": [
            {**replace, "pattern": {"Regex": "(?s)."}}] * 4}),
    }
    for name, change in crafted.items():
        d = folder("gpt2", name, json_edit("tokenizer.json", change))
        out = m.path(f"hf/{name}.safetensors")
        r = subprocess.run([m.qkv, "convert", d, "-o", out], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:  # refused already: that is a case of its own
            m.add(f"pretrained/convert/{name}", ["{qkv}", "convert", d, "-o", m.out(name)], names=["tokenizer.json"])
            continue
        m.add(f"pretrained/generate/{name}", ["{qkv}", "generate", "--threads", "1", "-m", out, "-n", "2",
                                               "-p", "a" * 30000], names=["tokenizer.json"])
    # a Marian folder whose source.spm's character map leads outside itself (libsentencepiece would read
    # past it on the first text)
    def spm_edit(d):
        p = os.path.join(d, "source.spm")
        b = bytearray(open(p, "rb").read())
        inner = b"\x12" + bytes([5]) + struct.pack("<I", 1) + b"\x00"  # precompiled_charsmap: trie of 1 byte
        b += b"\x1a" + bytes([len(inner)]) + inner  # normalizer_spec, merged in
        open(p, "wb").write(bytes(b))
    d = folder("marian", "spm-empty-trie", spm_edit)
    o = m.out("marian.safetensors")
    m.add("pretrained/convert/marian-source-spm", ["{qkv}", "convert", d, "-o", o], names=[d], gone=[o])

    # Gemma 2 and 3 folders whose config.json asks for what qkv's Gemma cannot compute: named, nothing written
    gemma = {
        "gemma3-layer-types": ("gemma3", lambda j: j.__setitem__("layer_types", ["full_attention"] + ["sliding_attention"] * 2)),
        "gemma3-softcap-negative": ("gemma3", lambda j: j.__setitem__("final_logit_softcapping", -30.0)),
        "gemma3-window-huge": ("gemma3", lambda j: j.__setitem__("sliding_window", 2 ** 63)),
        "gemma3-rope-local": ("gemma3", lambda j: j["rope_parameters"].__setitem__("sliding_attention", {"rope_type": "yarn"})),
        "gemma2-softcap-string": ("gemma2", lambda j: j.__setitem__("attn_logit_softcapping", "50")),
        "gemma2-scalar-zero": ("gemma2", lambda j: j.__setitem__("query_pre_attn_scalar", 0)),
        "gemma2-local-base": ("gemma2", lambda j: j.__setitem__("rope_local_base_freq", 10000.0)),
        "gemma3-multimodal-text-config-list": ("gemma3-multimodal", lambda j: j.__setitem__("text_config", [])),
        "gemma3-multimodal-scalar-huge": ("gemma3-multimodal",
                                          lambda j: j["text_config"].__setitem__("query_pre_attn_scalar", 1e300)),
    }
    # Phi-3 folders whose config.json does not describe the fused projections, or a longrope without its
    # factors, with too few, with a negative one, without its original context
    phi3 = {
        "phi3-kv-heads": ("phi3", lambda j: j.__setitem__("num_key_value_heads", 4)),
        "phi3-longrope": ("phi3", lambda j: j.__setitem__("rope_parameters", {"rope_type": "longrope", "rope_theta": 1e4})),
        "phi3-window-float": ("phi3", lambda j: j.__setitem__("sliding_window", 6.5)),
        "phi3-longrope-few-factors": ("phi3-longrope", lambda j: j["rope_parameters"].__setitem__("long_factor", [2.0])),
        "phi3-longrope-negative-factor": ("phi3-longrope",
                                          lambda j: j["rope_parameters"].__setitem__("short_factor", [-1.0] * 6)),
        "phi3-longrope-no-original": ("phi3-longrope", lambda j: (j.pop("original_max_position_embeddings"),
                                                                  j["rope_parameters"].pop("original_max_position_embeddings"))),
    }
    # OPT, GPT-NeoX, StableLM and Phi folders whose config.json asks for a form qkv does not compute, or
    # lies about the tensors (OPT's position table, GPT-NeoX's head-by-head query_key_value)
    decoders = {
        "opt-post-ln": ("opt", lambda j: j.__setitem__("do_layer_norm_before", False)),
        "opt-proj-dim": ("opt", lambda j: j.__setitem__("word_embed_proj_dim", 32)),
        "opt-positions-short": ("opt", lambda j: j.__setitem__("max_position_embeddings", 10)),
        "opt-no-bias": ("opt", lambda j: j.__setitem__("enable_bias", False)),
        "neox-heads-3": ("gpt-neox", lambda j: j.__setitem__("num_attention_heads", 3)),
        "neox-heads-huge": ("gpt-neox", lambda j: j.__setitem__("num_attention_heads", 2 ** 40)),
        "neox-rotary-none": ("gpt-neox", lambda j: j["rope_parameters"].__setitem__("partial_rotary_factor", 0.0)),
        "neox-act-swish": ("gpt-neox", lambda j: j.__setitem__("hidden_act", "swish")),
        "neox-width-lies": ("gpt-neox", lambda j: j.__setitem__("hidden_size", 32)),
        "stablelm-parallel": ("stablelm", lambda j: j.__setitem__("use_parallel_residual", True)),
        "stablelm-qk-layernorm": ("stablelm", lambda j: j.__setitem__("qk_layernorm", True)),
        "phi-tied": ("phi", lambda j: j.__setitem__("tie_word_embeddings", True)),
        "phi-qk-layernorm": ("phi", lambda j: j.__setitem__("qk_layernorm", True)),
    }
    for name, (base, change) in decoders.items():
        d = folder(base, name, json_edit("config.json", change))
        o = m.out(f"{name}.safetensors")
        m.add(f"pretrained/convert/{name}", ["{qkv}", "convert", d, "-o", o], names=[d], gone=[o])
    # config.json asking for a model far larger than the folder's tensors: refused before it is built
    # (it once took the machine's memory and was killed)
    huge = {"bert-layers-huge": ("bert-uncased", dict(num_hidden_layers=100000, hidden_size=4096,
                                                      intermediate_size=16384, num_attention_heads=32)),
            "llama-layers-huge": ("llama-gqa", dict(num_hidden_layers=100000, hidden_size=4096, head_dim=128,
                                                    num_attention_heads=32, num_key_value_heads=8,
                                                    intermediate_size=16384))}
    for name, (base, sizes) in huge.items():
        d = folder(base, name, json_edit("config.json", lambda j, sizes=sizes: j.update(sizes)))
        o = m.out(f"{name}.safetensors")
        m.add(f"pretrained/convert/{name}", ["{qkv}", "convert", d, "-o", o], names=["config.json"], gone=[o])
    m.add("pretrained/convert/bert-layers-huge-new-head",
          ["{qkv}", "convert", m.path("hf/bert-layers-huge/x")[:-2], "--head", "sequence", "--labels", "a,b", "-o",
           m.out("bert-huge-head.safetensors")], names=["config.json"])
    for name, (base, change) in phi3.items():
        d = folder(base, name, json_edit("config.json", change))
        o = m.out(f"{name}.safetensors")
        m.add(f"pretrained/convert/{name}", ["{qkv}", "convert", d, "-o", o], names=[d], gone=[o])
    for name, (base, change) in gemma.items():
        d = folder(base, name, json_edit("config.json", change))
        o = m.out(f"{name}.safetensors")
        m.add(f"pretrained/convert/{name}", ["{qkv}", "convert", d, "-o", o], names=["config.json"], gone=[o])

    # chat templates: a chat_template.jinja that is no file, too big, or a chat_template.json of the wrong
    # shape is refused at conversion, named; a crafted template converts (with a warning where it does not
    # compile) and each chat then ends in a message naming the template — no hang, no memory past its limits
    def write_file(name, data):
        def edit(d):
            p = os.path.join(d, name)
            if data is None:
                os.makedirs(p)
            else:
                open(p, "wb").write(data if isinstance(data, bytes) else data.encode())
        return edit
    refused = {
        "chat-template-directory": ("chat_template.jinja", None),
        "chat-template-huge": ("chat_template.jinja", "{{ 1 }}" * (1 << 20)),
        "chat-template-json-shape": ("chat_template.json", '{"chat_template": 5}'),
        "chat-template-json-not-json": ("chat_template.json", "{"),
        "chat-template-not-utf8": ("chat_template.jinja", b"{{ messages[0].content }}\xff\xfe"),
    }
    for name, (file, data) in refused.items():
        d = folder("qwen2", name, write_file(file, data))
        o = m.out(f"{name}.safetensors")
        m.add(f"pretrained/convert/{name}", ["{qkv}", "convert", d, "-o", o], names=[file], gone=[o])
    crafted_templates = {
        "loops": "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}",
        "output": "{% for i in range(100000) %}{{ 'x' * 60000 }}{% endfor %}",
        "doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "nesting": "{{ " + "(" * 100000 + "1" + ")" * 100000 + " }}",
        "unknown-tag": "{% include 'x.jinja' %}",
        "raise": "{{ raise_exception('no chats here') }}",
        "sandbox": "{{ messages.append(1) }}{{ ''.__class__ }}",
        "undefined-chain": "{{ nothing.at.all }}",
        "range-huge": "{{ range(2 ** 62)|length }}",
    }
    # encoders: classifier configs and sentence-transformers modules that qkv cannot honour, named,
    # nothing written; then a converted classifier and embedder on texts that are empty, huge or binary
    encoders = {
        "seqcls-id2label-gap": ("bert-seqcls", "config.json", lambda j: j.__setitem__("id2label", {"0": "a", "5": "b"})),
        "seqcls-id2label-huge-key": ("bert-seqcls", "config.json",
                                     lambda j: j.__setitem__("id2label", {"99999999999999999999": "a"})),
        "seqcls-id2label-list": ("bert-seqcls", "config.json", lambda j: j.__setitem__("id2label", ["a", "b"])),
        "seqcls-label-long": ("bert-seqcls", "config.json", lambda j: j.__setitem__("id2label", {"0": "x" * 10000})),
        "seqcls-problem-type": ("bert-seqcls", "config.json", lambda j: j.__setitem__("problem_type", 7)),
        "tokcls-num-labels": ("bert-tokcls", "config.json", lambda j: j.__setitem__("num_labels", -1)),
        "distilbert-dim-heads": ("distilbert-seqcls", "config.json", lambda j: j.__setitem__("n_heads", 5)),
        "roberta-pad-past-positions": ("roberta-seqcls", "config.json", lambda j: j.__setitem__("pad_token_id", 39)),
        "roberta-pad-negative": ("roberta-tokcls", "config.json", lambda j: j.__setitem__("pad_token_id", -3)),
        "st-modules-dense": ("st-bert", "modules.json", lambda j: j.append(
            {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})),
        "st-modules-escape": ("st-bert", "modules.json", lambda j: j[1].__setitem__("path", "../../../etc")),
        "st-modules-not-list": ("st-bert", "modules.json", lambda j: (j.clear(), j.append(5))),
        "st-pooling-two-modes": ("st-bert", "1_Pooling/config.json",
                                 lambda j: j.__setitem__("pooling_mode_cls_token", True)),
        "st-pooling-string": ("st-bert", "1_Pooling/config.json",
                              lambda j: j.__setitem__("pooling_mode_mean_tokens", "yes")),
        "st-max-seq-length": ("st-bert", "sentence_bert_config.json", lambda j: j.__setitem__("max_seq_length", -5)),
        "mpnet-buckets-odd": ("st-mpnet", "config.json", lambda j: j.__setitem__("relative_attention_num_buckets", 31)),
        "mpnet-buckets-huge": ("st-mpnet", "config.json",
                               lambda j: j.__setitem__("relative_attention_num_buckets", 2 ** 40)),
        "mpnet-buckets-float": ("mpnet-seqcls", "config.json",
                                lambda j: j.__setitem__("relative_attention_num_buckets", 32.5)),
        "mpnet-pad-past-positions": ("mpnet-mlm", "config.json", lambda j: j.__setitem__("pad_token_id", 79)),
        "mpnet-untied": ("mpnet-mlm", "config.json", lambda j: j.__setitem__("tie_word_embeddings", False)),
        "ce-activation-tanh": ("ce-bert", "config_sentence_transformers.json",
                               lambda j: j.__setitem__("activation_fn", "torch.nn.modules.activation.Tanh")),
        "ce-activation-number": ("ce-bert", "config_sentence_transformers.json",
                                 lambda j: j.__setitem__("activation_fn", 7)),
        "ce-activation-code": ("ce-roberta", "config.json", lambda j: j.__setitem__(
            "sentence_transformers", {"activation_fn": "os.system"})),
        "ce-st-not-object": ("ce-roberta", "config.json", lambda j: j.__setitem__("sentence_transformers", "yes")),
        "ce-on-token-classifier": ("bert-tokcls", "config.json", lambda j: j.__setitem__(
            "sentence_transformers", {"activation_fn": "torch.nn.modules.activation.Sigmoid"})),
        "st6-pooling-mode-unknown": ("st6-bert", "1_Pooling/config.json", lambda j: j.__setitem__("pooling_mode", "sum")),
        "st6-pooling-mode-two": ("st6-bert", "1_Pooling/config.json",
                                 lambda j: j.__setitem__("pooling_mode", ["mean", "max"])),
        "st6-pooling-mode-number": ("st6-bert", "1_Pooling/config.json", lambda j: j.__setitem__("pooling_mode", 3)),
        "st6-max-length-negative": ("st6-bert", "tokenizer_config.json",
                                    lambda j: j.__setitem__("model_max_length", -4)),
        "electra-embedding-size-huge": ("electra-seqcls", "config.json",
                                        lambda j: j.__setitem__("embedding_size", 2 ** 40)),
        "electra-embedding-size-zero": ("electra-mlm", "config.json", lambda j: j.__setitem__("embedding_size", 0)),
        "electra-relative-positions": ("electra-tokcls", "config.json",
                                       lambda j: j.__setitem__("position_embedding_type", "relative_key")),
        "electra-untied-generator": ("electra-mlm", "config.json", lambda j: j.__setitem__("tie_word_embeddings", False)),
        "deberta-conv": ("deberta-seqcls", "config.json", lambda j: j.__setitem__("conv_kernel_size", 3)),
        "deberta-separate-position-keys": ("deberta-mlm", "config.json", lambda j: j.__setitem__("share_att_key", False)),
        "deberta-p2p": ("deberta-tokcls", "config.json", lambda j: j.__setitem__("pos_att_type", ["p2c", "p2p"])),
        "deberta-pos-att-number": ("deberta-seqcls", "config.json", lambda j: j.__setitem__("pos_att_type", 5)),
        "deberta-pos-att-no-relative": ("deberta-v2-seqcls", "config.json",
                                        lambda j: j.__setitem__("relative_attention", False)),
        "deberta-buckets-huge": ("deberta-seqcls", "config.json", lambda j: j.__setitem__("position_buckets", 2 ** 40)),
        "deberta-buckets-two": ("deberta-seqcls", "config.json", lambda j: j.__setitem__("position_buckets", 2)),
        "deberta-buckets-past-reach": ("deberta-mlm", "config.json",
                                       lambda j: j.__setitem__("max_relative_positions", 5)),
        "deberta-norm-rel": ("deberta-seqcls", "config.json", lambda j: j.__setitem__("norm_rel_ebd", "batch_norm")),
        "deberta-pooler-width": ("deberta-seqcls", "config.json", lambda j: j.__setitem__("pooler_hidden_size", 32)),
        "deberta-pooler-act": ("deberta-seqcls", "config.json", lambda j: j.__setitem__("pooler_hidden_act", "softsign")),
        "deberta-enhanced-mlm": ("deberta-mlm", "config.json", lambda j: j.__setitem__("legacy", False)),
        "deberta-head-size": ("deberta-tokcls", "config.json", lambda j: j.__setitem__("attention_head_size", 7)),
        "deberta-positions-float": ("deberta-tokcls", "config.json",
                                    lambda j: j.__setitem__("max_position_embeddings", 1e300)),
        # ModernBERT: layer types, rope parameters and window of other sizes, kinds and nesting
        "modernbert-layer-types-huge": ("modernbert-mlm", "config.json",
                                        lambda j: j.__setitem__("layer_types", ["full_attention"] * 100000)),
        "modernbert-layer-types-nested": ("modernbert-seqcls", "config.json",
                                          lambda j: j.__setitem__("layer_types", [[["full_attention"]]] * 3)),
        "modernbert-rope-yarn": ("modernbert-tokcls", "config.json", lambda j: j.__setitem__(
            "rope_parameters", {"full_attention": {"rope_type": "yarn", "factor": 4.0}})),
        "modernbert-rope-not-object": ("modernbert-mlm", "config.json", lambda j: j.__setitem__("rope_parameters", [1])),
        "modernbert-rope-theta-zero": ("modernbert-mlm", "config.json",
                                       lambda j: j.__setitem__("rope_parameters",
                                                               {"sliding_attention": {"rope_theta": 0}})),
        "modernbert-rope-theta-string": ("st-modernbert", "config.json", lambda j: (
            j.pop("rope_parameters"), j.__setitem__("global_rope_theta", "1e4"))),
        "modernbert-window-negative": ("modernbert-seqcls", "config.json", lambda j: j.__setitem__("local_attention", -8)),
        "modernbert-window-huge": ("modernbert-seqcls", "config.json",
                                   lambda j: j.__setitem__("local_attention", 2 ** 70)),
        "modernbert-every-zero": ("st-modernbert", "config.json",
                                  lambda j: (j.pop("layer_types"), j.__setitem__("global_attn_every_n_layers", 0))),
        "modernbert-pooling-max": ("modernbert-seqcls", "config.json", lambda j: j.__setitem__("classifier_pooling", "max")),
        "modernbert-heads-odd": ("modernbert-mlm", "config.json", lambda j: j.__setitem__("num_attention_heads", 5)),
        "modernbert-untied": ("modernbert-mlm", "config.json", lambda j: j.__setitem__("tie_word_embeddings", False)),
        # ALBERT: groupings no released model has, an embedding size past any budget
        "albert-groups": ("albert-seqcls", "config.json", lambda j: j.__setitem__("num_hidden_groups", 3)),
        "albert-inner-groups": ("albert-mlm", "config.json", lambda j: j.__setitem__("inner_group_num", 2 ** 62)),
        "albert-embedding-size-huge": ("albert-tokcls", "config.json", lambda j: j.__setitem__("embedding_size", 2 ** 40)),
        "albert-untied": ("albert-mlm", "config.json", lambda j: j.__setitem__("tie_word_embeddings", False)),
    }
    for name, (base, file, change) in encoders.items():
        d = folder(base, name, json_edit(file, change))
        o = m.out(f"{name}.safetensors")
        m.add(f"pretrained/convert/{name}", ["{qkv}", "convert", d, "-o", o], names=[file.split("/")[-1]], gone=[o])
    converted = {}
    for case in ("bert-seqcls", "roberta-tokcls", "st-bert"):
        converted[case] = m.path(f"hf/{case}.safetensors")
        r = subprocess.run([m.qkv, "convert", os.path.join(golden, case), "-o", converted[case]], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    long_text = "the cat " * 5000
    m.add("pretrained/classify/too-long", ["{qkv}", "classify-text", "--threads", "1", converted["bert-seqcls"],
                                           long_text], names=["positions"])
    m.add("pretrained/classify/empty", ["{qkv}", "classify-text", "--threads", "1", converted["roberta-tokcls"], ""],
          expect="pass")
    m.add("pretrained/classify/embedder", ["{qkv}", "classify-text", "--threads", "1", converted["st-bert"], "x"],
          names=["no sequence classifier"])
    m.add("pretrained/classify/function", ["{qkv}", "classify-text", converted["bert-seqcls"], "x", "--function",
                                           "tanh"], names=["--function"], usage=True)
    m.add("pretrained/embed/binary", ["{qkv}", "embed", "--threads", "1", converted["st-bert"],
                                      "\x01\xff" + "\u202e" * 3000 + "\U0001F600" * 100], expect="pass")
    m.add("pretrained/embed/long", ["{qkv}", "embed", "--threads", "1", converted["st-bert"], long_text], expect="pass")
    m.add("pretrained/embed/pooling", ["{qkv}", "embed", converted["st-bert"], "x", "--pooling", "sum"],
          names=["--pooling"], usage=True)
    ce_file = m.path("hf/ce-bert.safetensors")
    r = subprocess.run([m.qkv, "convert", os.path.join(golden, "ce-bert"), "-o", ce_file], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m.add("pretrained/rerank/long", ["{qkv}", "rerank", "--threads", "1", ce_file, long_text, long_text,
                                     "\x01\xff" + "\u202e" * 3000], expect="pass")
    m.add("pretrained/rerank/no-documents", ["{qkv}", "rerank", ce_file, "q"], names=["no documents"])
    m.add("pretrained/rerank/max-length", ["{qkv}", "rerank", ce_file, "q", "d", "--max-length", "2"],
          names=["max_length 2"])
    m.add("pretrained/rerank/max-length-past", ["{qkv}", "rerank", ce_file, "q", "d", "--max-length", "100000"],
          names=["max_length 100000"])
    m.add("pretrained/rerank/function", ["{qkv}", "rerank", ce_file, "q", "d", "--function", "softmax"],
          names=["--function"], usage=True)
    m.add("pretrained/rerank/classifier", ["{qkv}", "rerank", converted["bert-seqcls"], "q", "d"],
          names=["one label"])
    m.add("pretrained/rerank/embedder", ["{qkv}", "rerank", converted["st-bert"], "q", "d"],
          names=["no sequence classifier"])
    # zero-shot: an NLI classifier (DeBERTa-v3's network) given labels, templates and texts that do not fit
    nli_file = m.path("hf/deberta-seqcls.safetensors")
    r = subprocess.run([m.qkv, "convert", os.path.join(golden, "deberta-seqcls"), "-o", nli_file], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    zs = ["{qkv}", "classify-text", "--threads", "1", nli_file]
    m.add("pretrained/zero-shot/long", zs + [long_text, "\x01\xff" + "\u202e" * 3000, "--candidate-labels", "a, b"],
          expect="pass")  # (cut to the tokenizer's model_max_length, "only_first")
    m.add("pretrained/zero-shot/no-label", zs + ["x", "--candidate-labels", " , ,"], names=["no label"])
    m.add("pretrained/zero-shot/template", zs + ["x", "--candidate-labels", "a", "--hypothesis-template", "about {x}"],
          names=["hypothesis template"])
    m.add("pretrained/zero-shot/template-huge", zs + ["x", "--candidate-labels", "a", "--hypothesis-template",
                                                      "{}" + "ab " * 40000], names=["no room"])
    m.add("pretrained/zero-shot/not-nli", ["{qkv}", "classify-text", converted["bert-seqcls"], "x", "--candidate-labels",
                                           "a"], names=["no entailment"])
    m.add("pretrained/zero-shot/tokens", ["{qkv}", "classify-text", converted["roberta-tokcls"], "x",
                                          "--candidate-labels", "a"], names=["no sequence classifier"])
    # question answering: a …ForQuestionAnswering given contexts, questions and windows that do not fit
    qa_file = m.path("hf/qa-bert.safetensors")
    r = subprocess.run([m.qkv, "convert", os.path.join(golden, "qa-bert"), "-o", qa_file], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    qa = ["{qkv}", "answer", "--threads", "1", qa_file]
    m.add("pretrained/answer/long", qa + ["Who?", "\x01\xff" + "\u202e" * 3000 + " the cat " * 3000], expect="pass")
    m.add("pretrained/answer/no-context", qa + ["Who?", "-c", m.path("nowhere.txt")], names=["nowhere.txt"])
    m.add("pretrained/answer/context-dir", qa + ["Who?", "-c", m.tmp], names=[os.path.basename(m.tmp)])
    m.add("pretrained/answer/question-fills", qa + ["who " * 60, "a text"], names=["no room"])
    m.add("pretrained/answer/stride", qa + ["Who?", "a text", "--doc-stride", "100"], names=["doc_stride 100"])
    m.add("pretrained/answer/window", qa + ["Who?", "a text", "--max-seq-len", "100000"], names=["max_seq_len"])
    m.add("pretrained/answer/top-k", qa + ["Who?", "a text", "--top-k", "0"], names=["--top-k"], usage=True)
    m.add("pretrained/answer/not-qa", ["{qkv}", "answer", converted["bert-seqcls"], "Who?", "a text"],
          names=["no question-answering head"])
    # multiple choice: a …ForMultipleChoice given contexts and endings that do not fit, too few endings
    mc_file = m.path("hf/mc-roberta.safetensors")
    r = subprocess.run([m.qkv, "convert", os.path.join(golden, "mc-roberta"), "-o", mc_file], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    mc = ["{qkv}", "choose", "--threads", "1", mc_file]
    m.add("pretrained/choose/long", mc + ["\x01\xff" + "\u202e" * 3000 + " the cat " * 3000, "a", "b"], expect="pass")
    m.add("pretrained/choose/one-ending", mc + ["a context", "an ending"], names=["two endings or more"])
    m.add("pretrained/choose/no-context", mc, names=["two endings or more"])
    m.add("pretrained/choose/max-length", mc + ["a", "b", "c", "--max-length", "100000"], names=["max_length"])
    m.add("pretrained/choose/not-choice", ["{qkv}", "choose", converted["bert-seqcls"], "a", "b", "c"],
          names=["no multiple-choice head"])
    # XLM-RoBERTa's SentencePiece tokenizer crafted: its charsmap (darts-clone units mapping "a" to a
    # string of the pool) leading outside itself, or multiplying a text; its Unigram vocabulary
    def charsmap_of_a(value, pool, root=1 << 10):
        units = [0] * 128
        units[0], units[96], units[97] = root, 0x61 | 1 << 8 | 1 << 10, value
        blob = struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + pool
        return {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(blob).decode()}
    xlmr = {
        "charsmap-outside": lambda j: j.__setitem__("normalizer", charsmap_of_a(0, b"b", 1000 << 10)),
        "charsmap-past-pool": lambda j: j.__setitem__("normalizer", charsmap_of_a(5000, b"b\0")),
        "charsmap-bomb": lambda j: j.__setitem__("normalizer", charsmap_of_a(0, b"b" * 100000)),
        "charsmap-truncated": lambda j: j["normalizer"].__setitem__(
            "precompiled_charsmap", j["normalizer"]["precompiled_charsmap"][:64]),
        "charsmap-not-base64": lambda j: j["normalizer"].__setitem__("precompiled_charsmap", "%%%%"),
        "unigram-no-unk": lambda j: j["model"].__setitem__("unk_id", None),
        "unigram-unk-past": lambda j: j["model"].__setitem__("unk_id", 10 ** 12),
        "unigram-entry-garbage": lambda j: j["model"]["vocab"].__setitem__(5, "x"),
        "unigram-score-string": lambda j: j["model"]["vocab"].__setitem__(5, ["x", "high"]),
    }
    for name, change in xlmr.items():
        d = folder("st-xlmr", f"xlmr-{name}", json_edit("tokenizer.json", change))
        out = m.path(f"hf/xlmr-{name}.safetensors")
        r = subprocess.run([m.qkv, "convert", d, "-o", out], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:  # refused already: that is a case of its own
            m.add(f"pretrained/convert/xlmr-{name}", ["{qkv}", "convert", d, "-o", m.out(name)], names=["tokenizer.json"])
            continue
        m.add(f"pretrained/embed/xlmr-{name}", ["{qkv}", "embed", "--threads", "1", out, "a cat \u2603 " + "a" * 20000],
              names=["tokenizer.json"])
    st_xlmr = m.path("hf/st-xlmr.safetensors")
    r = subprocess.run([m.qkv, "convert", os.path.join(golden, "st-xlmr"), "-o", st_xlmr], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m.add("pretrained/embed/xlmr-long-word", ["{qkv}", "embed", "--threads", "1", st_xlmr,
                                              "x" * 40000 + "\u0301" * 3000 + "\ufb01" * 3000], expect="pass")

    lm = m.path("hf/qwen2-for-embed.safetensors")
    r = subprocess.run([m.qkv, "convert", os.path.join(golden, "qwen2"), "-o", lm], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    m.add("pretrained/embed/not-an-encoder", ["{qkv}", "embed", lm, "x"], names=["qwen2-for-embed.safetensors"])

    for name, template in crafted_templates.items():
        d = folder("qwen2", f"chat-{name}", write_file("chat_template.jinja", template))
        out = m.path(f"hf/chat-{name}.safetensors")
        r = subprocess.run([m.qkv, "convert", d, "-o", out], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        m.add(f"pretrained/chat/{name}", ["{qkv}", "generate", "--threads", "1", "-m", out, "--chat", "-n", "2",
                                          "-p", "hello " * 2000], names=["chat template"])


def add_export_cases(m):
    """qkv export --to hf of converted files whose metadata lies: every case an error naming what cannot go
    back, and no folder (nor a half-written one beside it) left."""
    golden = os.path.join(REPO, "tests", "golden", "hf")
    good = m.path("hf-export/bert-seqcls.safetensors")
    r = subprocess.run([m.qkv, "convert", os.path.join(golden, "bert-seqcls"), "-o", good], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        m.skipped.append(f"export --to hf: qkv convert of bert-seqcls failed ({r.stderr.strip()[-200:]})")
        return
    header, data = st_read(good)
    meta = meta_of(header)

    def edited(name, change):
        j = copy.deepcopy(meta)
        change(j)
        return m.write(f"hf-export/{name}.safetensors", st_bytes(with_meta(header, j), data))

    def export(name, f, says, extra=()):
        o = m.out(f"{name}-hf")
        m.add(f"export-hf/{name}", ["{qkv}", "export", "--to", "hf", f, o, *extra], names=says, gone=[o])

    def cf(key, value):
        return lambda j: j["converted_from"].__setitem__(key, value)

    cases = {
        "no-converted-from": (lambda j: j.pop("converted_from"), ["no Hugging Face class qkv writes"]),
        "converted-from-string": (lambda j: j.__setitem__("converted_from", "x" * 100), ["Hugging Face checkpoint"]),
        "architecture-unknown": (cf("architecture", "EvilForSequenceClassification"), ["EvilForSequence"]),
        "architecture-number": (cf("architecture", 7), ["Hugging Face checkpoint"]),
        "architecture-other-kind": (cf("architecture", "GPT2LMHeadModel"), ["GPT2LMHeadModel"]),
        "config-array": (cf("config", [1, 2]), ["Hugging Face checkpoint"]),
        "config-deep": (cf("config", {"a": json.loads(deep_json(200))}), ["config.json: the field 'a'"]),
        "metadata-too-deep": (cf("config", {"a": json.loads(deep_json(400))}), ["nested deeper"]),
        "config-field-unknown": (lambda j: j["converted_from"]["config"].__setitem__("rotary", True), ["'rotary'"]),
        "config-lies-layers": (lambda j: j["converted_from"]["config"].__setitem__("num_hidden_layers", 7),
                               ["num_hidden_layers"]),
        "config-lies-width": (lambda j: j["converted_from"]["config"].__setitem__("hidden_size", 2 ** 40),
                              ["hidden_size"]),
        "tensors-missing": (lambda j: j["converted_from"].pop("tensors"), ["older qkv"]),
        "tensors-names-number": (lambda j: j["converted_from"]["tensors"].__setitem__("names", 5), ["older qkv"]),
        "tensors-name-not-string": (lambda j: j["converted_from"]["tensors"]["names"].append(5), ["not all strings"]),
        "tensors-name-unknown": (lambda j: j["converted_from"]["tensors"]["names"].append("bert.evil\n" + "x" * 300),
                                 ["bert.evil"]),
        "tensors-names-empty": (lambda j: j["converted_from"]["tensors"].__setitem__("names", []),
                                ["holds the parameter"]),
        "tensors-names-million": (lambda j: j["converted_from"]["tensors"].__setitem__(
            "names", ["bert.embeddings.word_embeddings.weight"] * 1_000_000), ["holds the parameter"]),
        "labels-not-strings": (lambda j: j["model"].__setitem__("labels", [1, 2]), ["labels"]),
        "tokenizer-type": (lambda j: j.__setitem__("tokenizer", {"type": "evil"}), ["tokenizer"]),
    }
    for name, (change, says) in cases.items():
        export(name, edited(name, change), says)
    # a language model qkv trained (the shipped character GPT), its metadata lying
    gpt = os.path.join(REPO, "models", "shakespeare-char.safetensors")
    gheader, gdata = st_read(gpt)
    gmeta = meta_of(gheader)
    native = {
        "tokenizer-spm-garbage": (lambda j: j.__setitem__("tokenizer", {"type": "sentencepiece",
                                                                         "model_base64": "AAAA////"}), ["tokenizer"]),
        "tokenizer-chars-number": (lambda j: j["tokenizer"].__setitem__("chars", 5), ["tokenizer"]),
        "model-type-convnet": (lambda j: j.__setitem__("model_type", "convnet"), ["no Hugging Face class"]),
        "activation-silu": (lambda j: j["model"].__setitem__("activation", "silu"), ["silu"]),
        "model-not-object": (lambda j: j.__setitem__("model", 5), ["model config"]),
        "n-layer-huge": (lambda j: j["model"].__setitem__("n_layer", 2 ** 40), ["larger than the tensors"]),
    }
    for name, (change, says) in native.items():
        j = copy.deepcopy(gmeta)
        change(j)
        export(f"native-{name}", m.write(f"hf-export/native-{name}.safetensors", st_bytes(with_meta(gheader, j), gdata)),
               says)
    export("max-shard-size-garbage", good, ["--max-shard-size"], ["--max-shard-size", "5XB"])
    export("max-shard-size-zero", good, ["--max-shard-size"], ["--max-shard-size", "0"])
    export("max-shard-size-overflow", good, ["--max-shard-size"], ["--max-shard-size", "999999999999GiB"])
    export("quantization-given", good, ["--quantization"], ["--quantization", "int8"])
    o = m.out("ct2-dtype")
    m.add("export-hf/ctranslate2-dtype", ["{qkv}", "export", "--to", "ctranslate2", good, o, "--dtype", "bf16"],
          names=["--dtype"], gone=[o])
    a_file = m.write("hf-export/a-file", "x")
    m.add("export-hf/out-is-a-file", ["{qkv}", "export", "--to", "hf", good, a_file], names=["not a folder"])
    full = m.write("hf-export/full/notes.txt", "mine")
    m.add("export-hf/out-not-empty", ["{qkv}", "export", "--to", "hf", good, os.path.dirname(full)],
          names=["not empty"])
    m.add("export-hf/out-under-a-file", ["{qkv}", "export", "--to", "hf", good, os.path.join(a_file, "sub")],
          names=["a-file"])
    m.add("export-hf/valid", ["{qkv}", "export", "--to", "hf", good, m.out("valid-hf")], expect="pass")


def add_bench_tokenizer_cases(m):
    """qkv bench tokenizer's folder and lines."""
    gpt2 = os.path.join(REPO, "tests/golden/tokenizers/gpt2")
    lines = m.write("bench-tokenizer/lines.txt", "one two\n")
    for name, folder, inp in (("input-dev-zero", gpt2, "/dev/zero"), ("input-empty", gpt2, m.write("bench-tokenizer/empty.txt", "")),
                              ("folder-missing", m.path("bench-tokenizer/nowhere"), lines),
                              ("folder-a-file", lines, lines)):
        m.add(f"bench-tokenizer/{name}", ["{qkv}", "bench", "tokenizer", folder, "-i", inp], names=[folder, inp])


def add_plot_cases(m):
    """qkv plot's metrics files (a run's metrics.csv, or any csv)."""
    def csv(name, data):
        return m.write(f"plot/{name}.csv", data)
    fails = {
        "dev-zero": "/dev/zero",  # read until the memory ran out
        "value-1e999": csv("value-1e999", "step,val_loss\n0,1\n1,1e999\n"),
        "no-step-column": csv("no-step-column", "x" * (10 << 20)),  # one 10 MB line: the message cut
        "binary": m.write("plot/binary.csv", bytes(range(256)) * 64),
        "empty": csv("empty", ""),
    }
    for name, path in fails.items():
        o = m.out(f"plot-{name}.svg")
        m.add(f"plot/{name}", ["{qkv}", "plot", path, "-o", o], names=[path], gone=[o])
    # values past what the plot can space (ticks over ±1e308 hung), NaN and inf: drawn
    for name, data in {"span-1e308": "step,val_loss\n0,1e308\n1,-1e308\n",
                       "steps-1e308": "step,val_loss\n-1.7e308,1\n1.7e308,2\n",
                       "nan-inf": "step,val_loss\nnan,1\n1,inf\n2,nan\n3,1\n"}.items():
        m.add(f"plot/{name}", ["{qkv}", "plot", csv(name, data), "-o", m.out(f"plot-{name}.png")], expect="pass")


def add_text_classification_cases(m):
    """Fine-tuning an encoder's classifier: `qkv convert --head` flags at their limits, and the
    text_classification task's data files — TSVs and JSONL that lie, special files, labels the model
    lacks, values at their limits — each refused naming the file and line or the key."""
    golden = os.path.join(REPO, "tests", "golden", "hf", "bert-uncased")
    model = m.path("textcls/bert-head.safetensors")
    r = subprocess.run([m.qkv, "convert", golden, "--head", "sequence", "--labels", "neg,pos", "-o", model],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for label, extra in (("no-labels", []), ("empty-label", ["--labels", "a,,b"]), ("twice", ["--labels", "a,a"]),
                         ("long-label", ["--labels", "x" * 300]), ("head-bad", ["--labels", "a", "--head", "qa"]),
                         ("span-labels", ["--labels", "a", "--head", "span"]),
                         ("problem-bad", ["--labels", "a", "--problem-type", "ranking"]),
                         ("seed-negative", ["--labels", "a", "--seed", "-1"]),
                         ("seed-huge", ["--labels", "a", "--seed", "1" + "0" * 30])):
        o = m.out("head.safetensors")
        head = [] if label in ("head-bad", "span-labels") else ["--head", "sequence"]
        usage = label in ("head-bad", "problem-bad", "seed-negative", "seed-huge")
        m.add(f"textcls/convert/{label}", ["{qkv}", "convert", golden, *head, *extra, "-o", o],
              names=["--labels", "--head", "--problem-type", "--seed", "label"], gone=[o], usage=usage)
    o = m.out("head.safetensors")
    m.add("textcls/convert/gpt2", ["{qkv}", "convert", os.path.join(REPO, "tests", "golden", "hf", "gpt2"), "--head",
                                   "sequence", "--labels", "a,b", "-o", o], names=["gpt2"], gone=[o])
    fifo = m.path("textcls/a-fifo.tsv")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    deep = '{"text": "a", "label": ' + "[" * 100000 + "]" * 100000 + "}\n"
    files = {
        "short-line.tsv": "sentence\tlabel\ngood\tpos\nno tab here\n",
        "long-line.tsv": "sentence\tlabel\ngood\tpos\tmore\n",
        "unknown-label.tsv": "sentence\tlabel\ngood\tmaybe\n",
        "id-huge.tsv": "sentence\tlabel\ngood\t99999999999999999999\n",
        "id-negative.jsonl": '{"text": "a", "label": -1}\n',
        "label-float.jsonl": '{"text": "a", "label": 0.5}\n',
        "label-null.jsonl": '{"text": "a", "label": null}\n',
        "no-column.tsv": "words\tlabel\nfine\tpos\n",
        "header-only.tsv": "sentence\tlabel\n",
        "empty.tsv": "",
        "blank-lines.jsonl": "\n\n\n",
        "not-json.jsonl": '{"text": "a", "label": 0}\n{oops\n',
        "array-line.jsonl": "[1, 2]\n",
        "text-number.jsonl": '{"text": 5, "label": 0}\n',
        "key-twice.jsonl": '{"text": "a", "text": "b", "label": 0}\n',
        "deep.jsonl": deep,
        "invalid-utf8.tsv": b"sentence\tlabel\n\xff\xfe\tpos\n",
        "nul-bytes.tsv": b"sentence\tlabel\na\x00b\tpos\n",
        "huge-text.tsv": "sentence\tlabel\n" + "word " * 2000000 + "\tpos\n" + "ok\tneg\n",
        "one-example.tsv": "sentence\tlabel\nfine\tpos\n",
        "csv.csv": "sentence,label\nfine,pos\n\"a, quoted\nline\",neg\n",
        "csv-open-quote.csv": 'sentence,label\nfine,pos\n"never closed,neg\n' + "x\n" * 1000,
        "csv-quote-inside.csv": 'sentence,label\nfi"ne,pos\n',
        "csv-width.csv": "sentence,label\nfine,pos\nfine,pos,extra\n",
        "csv-commas.csv": "sentence,label\nfine,pos\n" + "," * 1000000 + "\n",
        "csv-header-twice.csv": "sentence,sentence,label\na,b,pos\n",
        "csv-bom-only.csv": b"\xef\xbb\xbf",
        "csv-invalid-utf8.csv": b"sentence,label\n\xff\xfe,pos\n\"\xc3\",neg\n",
        "csv-nul-bytes.csv": b"sentence,label\na\x00b,pos\n\"c\x00\",neg\n",
        "csv-huge-field.csv": "sentence,label\n\"" + "word, " * 400000 + "\",pos\nok,neg\n",
    }
    valid = {"invalid-utf8.tsv", "nul-bytes.tsv", "huge-text.tsv",  # read, cut, trained on: fine
             "csv.csv", "csv-invalid-utf8.csv", "csv-nul-bytes.csv", "csv-huge-field.csv"}
    cfg = {"task": "text_classification", "init_from": model, "data": {"max_length": 16},
           "train": {"max_iters": 2, "batch_size": 2, "eval_interval": 0, "log_interval": 1, "checkpoint_interval": 0}}
    paths = {name: m.write(f"textcls/data/{name}", data) for name, data in files.items()}
    paths.update({"fifo": fifo, "dev-zero": "/dev/zero", "directory": m.path("textcls/data/x")[:-2],
                  "missing": m.path("textcls/no/such.tsv")})
    for name, path in paths.items():
        c = json.loads(json.dumps(cfg))
        c["data"]["train"] = path
        if name not in ("one-example.tsv",) and name not in valid:
            c["data"]["val"] = paths["short-line.tsv"] if name == "fifo" else path
        if name in valid:  # a held-out share of two examples: give a val file
            c["data"]["val"] = m.write("textcls/data/val.tsv", "sentence\tlabel\nfine\tpos\nbad\tneg\n")
        f = m.write(f"textcls/configs/{name}.json", json.dumps(c))
        out = m.out("textcls")
        m.add(f"textcls/data/{name}", ["{qkv}", "train", f, "-o", out, "-q", "--threads", "1"],
              expect="any" if name in valid else "fail", names=[path, os.path.basename(path), "data.train"],
              gone=[] if name in valid else [os.path.join(out, "model.safetensors")],
              kinds={fifo: "fifo"} if name == "fifo" else {})  # (a FIFO is refused unopened: data is read from files)
    # token classification: CoNLL and JSONL sentences that lie
    ner = m.path("textcls/ner.safetensors")
    r = subprocess.run([m.qkv, "convert", golden, "--head", "token", "--labels", "O,B-PER,I-PER", "-o", ner],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sentences = {
        "no-tag.conll": "Romeo B-PER\nwent\n",
        "unknown-tag.conll": "Romeo B-LOC\n",
        "only-docstart.conll": "-DOCSTART- -X- O\n\n",
        "nul.conll": b"Rom\x00eo B-PER\n\nx O\n",
        "long-word.conll": "R" + "o" * 3000000 + " B-PER\n\nx O\n",
        "lengths.jsonl": '{"tokens": ["a", "b"], "ner_tags": [0]}\n',
        "empty-lists.jsonl": '{"tokens": [], "ner_tags": []}\n',
        "tag-huge.jsonl": '{"tokens": ["a"], "ner_tags": [4294967296]}\n',
        "word-object.jsonl": '{"tokens": [{"a": 1}], "ner_tags": [0]}\n',
        "deep.jsonl": '{"tokens": ["a"], "ner_tags": ' + "[" * 100000 + "]" * 100000 + "}\n",
        "tsv.tsv": "a\tO\n",
    }
    valid_ner = {"nul.conll", "long-word.conll"}
    ner_val = m.write("textcls/ner-data/val.conll", "Romeo B-PER\nwent O\n")
    for name, data in sentences.items():
        path = m.write(f"textcls/ner-data/{name}", data)
        c = {"task": "token_classification", "init_from": ner,
             "data": {"train": path, "val": ner_val if name in valid_ner else path, "max_length": 16},
             "train": {"max_iters": 2, "batch_size": 2, "eval_interval": 0, "log_interval": 1, "checkpoint_interval": 0}}
        f = m.write(f"textcls/configs/ner-{name}.json", json.dumps(c))
        out = m.out("textcls-ner")
        m.add(f"textcls/ner/{name}", ["{qkv}", "train", f, "-o", out, "-q", "--threads", "1"],
              expect="any" if name in valid_ner else "fail", names=[path, os.path.basename(path)],
              gone=[] if name in valid_ner else [os.path.join(out, "model.safetensors")])
    # the keys of the data section at their limits
    base = dict(cfg, data={"train": paths["one-example.tsv"], "val": m.write("textcls/data/v.tsv", "sentence\tlabel\nok\tneg\n"),
                           "max_length": 16})
    keys = {"data.max_length": {"-1": -1, "2^40": 2 ** 40, "41": 41, "3": 3, "string": "x"},
            "data.val_fraction": {"1": 1, "-0.5": -0.5, "nan-ish": "NaN"},
            "data.text": {"missing": "nope", "number": 5},
            "data.label": {"missing": "nope"},
            "data.text_pair": {"missing": "nope"},
            "init_from": {"missing": m.path("textcls/none.safetensors"), "empty": "", "a-tsv": paths["one-example.tsv"],
                          "mlm": m.path("textcls/mlm.safetensors")},
            "train.batch_size": {"0": 0, "2^40": 2 ** 40}}
    subprocess.run([m.qkv, "convert", golden, "-o", m.path("textcls/mlm.safetensors")], capture_output=True, timeout=120)
    f = m.write("textcls/configs/base.json", json.dumps(base))
    for key, vals in keys.items():
        for label, val in vals.items():
            out = m.out("textcls")
            m.add(f"textcls/set/{key}={label}", ["{qkv}", "train", f, "-o", out, "-q", "--threads", "1", "--set",
                                                 f"{key}={json.dumps(val)}"],
                  names=[key, key.split(".")[-1], str(val)], gone=[os.path.join(out, "model.safetensors")])


def add_question_answering_cases(m):
    """Fine-tuning extractive question answering: the question_answering task's SQuAD JSON and JSONL
    files that lie — answers outside their contexts, texts not where they say, nesting, special files —
    and the data keys at their limits, each refused naming the file and question or the key."""
    golden = os.path.join(REPO, "tests", "golden", "hf", "bert-uncased")
    model = m.path("qa/bert-span.safetensors")
    r = subprocess.run([m.qkv, "convert", golden, "--head", "span", "-o", model], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    good = {"id": "a", "question": "who is king?", "context": "the king henry",
            "answers": {"text": ["henry"], "answer_start": [9]}}

    def row(**change):
        d = dict(good, **change)
        return json.dumps({k: v for k, v in d.items() if v is not None}) + "\n"

    fifo = m.path("qa/a-fifo.jsonl")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    files = {
        "not-json.jsonl": row() + "{oops\n",
        "array-line.jsonl": row() + "[1, 2]\n",
        "no-context.jsonl": row() + row(context=None),
        "context-number.jsonl": row() + row(context=5),
        "empty-context.jsonl": row() + row(context=""),
        "start-outside.jsonl": row() + row(answers={"text": ["henry"], "answer_start": [10 ** 6]}),
        "start-huge.jsonl": row() + '{"question": "q", "context": "c", "answers": {"text": ["c"], '
                                    '"answer_start": [1e400]}}\n',
        "start-negative.jsonl": row() + row(answers={"text": ["henry"], "answer_start": [-9]}),
        "start-float.jsonl": row() + row(answers={"text": ["henry"], "answer_start": [9.5]}),
        "text-elsewhere.jsonl": row() + row(answers={"text": ["king"], "answer_start": [9]}),
        "lengths.jsonl": row() + row(answers={"text": ["henry", "king"], "answer_start": [9]}),
        "no-answer.jsonl": row() + row(answers={"text": [], "answer_start": []}),
        "answers-string.jsonl": row() + row(answers="henry"),
        "deep.jsonl": row() + '{"question": "q", "context": "c", "answers": ' + "[" * 100000 + "]" * 100000 + "}\n",
        "mid-character.jsonl": row() + row(context="été henry", answers={"text": ["henry"], "answer_start": [5]}),
        "squad-data-object.json": '{"data": {"paragraphs": []}}',
        "squad-no-qas.json": '{"data": [{"paragraphs": [{"context": "x"}]}]}',
        "squad-qa-string.json": '{"data": [{"paragraphs": [{"context": "x", "qas": ["q"]}]}]}',
        "squad-empty.json": '{"data": []}',
        "squad-truncated.json": '{"data": [{"paragraphs": [{"context": "x", "qas": [',
        "empty.jsonl": "",
        "invalid-utf8.jsonl": row().encode() + b'{"question": "q\xff", "context": "the \xfe king henry", '
                                               b'"answers": {"text": ["king"], "answer_start": [6]}}\n',
        "huge-context.jsonl": row(context="word " * 100000 + "king henry",
                                  answers={"text": ["henry"], "answer_start": [5 * 100000 + 5]}),
        "text.txt": "who is king?\tthe king henry\n",
    }
    valid = {"huge-context.jsonl"}  # read, cut into windows, trained on: fine
    val = m.write("qa/data/val.jsonl", row())
    paths = {name: m.write(f"qa/data/{name}", data) for name, data in files.items()}
    paths.update({"fifo": fifo, "dev-zero": "/dev/zero", "directory": m.path("qa/data/x")[:-2],
                  "missing": m.path("qa/no/such.jsonl")})
    cfg = {"task": "question_answering", "init_from": model, "data": {"max_length": 32, "doc_stride": 8},
           "train": {"max_iters": 2, "batch_size": 2, "eval_interval": 0, "log_interval": 1, "checkpoint_interval": 0}}
    for name, path in paths.items():
        c = json.loads(json.dumps(cfg))
        c["data"]["train"] = path
        c["data"]["val"] = val if name in valid or name == "fifo" else path
        f = m.write(f"qa/configs/{name}.json", json.dumps(c))
        out = m.out("qa")
        m.add(f"qa/data/{name}", ["{qkv}", "train", f, "-o", out, "-q", "--threads", "1"],
              expect="any" if name in valid else "fail", names=[path, os.path.basename(path), "data.train"],
              gone=[] if name in valid else [os.path.join(out, "model.safetensors")],
              kinds={fifo: "fifo"} if name == "fifo" else {})
    # the keys of the data section at their limits
    base = dict(cfg, data={"train": val, "val": val, "max_length": 32, "doc_stride": 8})
    keys = {"data.max_length": {"-1": -1, "2^40": 2 ** 40, "65": 65, "3": 3, "string": "x"},
            "data.doc_stride": {"-1": -1, "32": 32, "2^40": 2 ** 40},
            "data.n_best_size": {"0": 0, "2^40": 2 ** 40},
            "data.max_answer_length": {"0": 0, "-5": -5},
            "data.null_score_diff_threshold": {"string": "x", "1e400": "1e400"},
            "data.version_2_with_negative": {"string": "yes"},
            "data.val_fraction": {"1": 1, "-0.5": -0.5},
            "init_from": {"classifier": m.path("textcls/bert-head.safetensors"), "empty": ""}}
    f = m.write("qa/configs/base.json", json.dumps(base))
    for key, vals in keys.items():
        for label, v in vals.items():
            out = m.out("qa")
            m.add(f"qa/set/{key}={label}", ["{qkv}", "train", f, "-o", out, "-q", "--threads", "1", "--set",
                                            f"{key}={json.dumps(v)}"],
                  names=[key, key.split(".")[-1], str(v)], gone=[os.path.join(out, "model.safetensors")])


def add_masked_lm_cases(m):
    """Masked-language-model training continued on a text: the masked_lm task's text and JSONL files that
    lie — not JSON, the wrong column, nesting, special files, invalid UTF-8, one huge line — and the data
    keys at their limits, each refused naming the file and line or the key."""
    golden = os.path.join(REPO, "tests", "golden", "hf", "bert-uncased")
    model = m.path("mlm/bert.safetensors")
    r = subprocess.run([m.qkv, "convert", golden, "-o", model], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    good = "romeo loves juliet and juliet loves romeo\nthe king of rome is old\nmy lord the king is dead\n" * 4
    fifo = m.path("mlm/a-fifo.txt")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    files = {
        "not-json.jsonl": '{"text": "a b c"}\n{oops\n',
        "array-line.jsonl": '{"text": "a b c"}\n[1, 2]\n',
        "number-text.jsonl": '{"text": "a b c"}\n{"text": 5}\n',
        "other-column.jsonl": '{"sentence": "a b c"}\n',
        "deep.jsonl": '{"text": ' + "[" * 100000 + "]" * 100000 + "}\n",
        "empty.txt": "",
        "blank-lines.txt": "\n \n\t\n",
        "no-block.txt": "a\n",
        "data.csv": "text\na b c\n",
        "csv-no-text.csv": "sentence\nthe king is old the king is old the king is old\n",
        "csv-open-quote.csv": 'text\n"the king is old\n' * 50,
        "invalid-utf8.txt": good.encode() + b"the \xfe king \xff\xfe is old\n",
        "nul-bytes.txt": good + "the king\x00 is old\n",
        "huge-line.txt": "the king is old " * 200000 + "\n",
    }
    valid = {"invalid-utf8.txt", "nul-bytes.txt", "huge-line.txt"}  # read (U+FFFD), cut into blocks, trained on
    val = m.write("mlm/data/val.txt", good)
    paths = {name: m.write(f"mlm/data/{name}", data) for name, data in files.items()}
    paths.update({"fifo": fifo, "dev-zero": "/dev/zero", "directory": m.path("mlm/data/x")[:-2],
                  "missing": m.path("mlm/no/such.txt")})
    cfg = {"task": "masked_lm", "init_from": model, "data": {"max_length": 8},
           "train": {"max_iters": 2, "batch_size": 2, "eval_interval": 0, "log_interval": 1, "checkpoint_interval": 0}}
    for name, path in paths.items():
        c = json.loads(json.dumps(cfg))
        c["data"]["train"] = path
        c["data"]["val"] = val if name in valid or name == "fifo" else path
        if name == "blank-lines.txt":
            c["data"]["line_by_line"] = True
        f = m.write(f"mlm/configs/{name}.json", json.dumps(c))
        out = m.out("mlm")
        m.add(f"mlm/data/{name}", ["{qkv}", "train", f, "-o", out, "-q", "--threads", "1"],
              expect="any" if name in valid else "fail", names=[path, os.path.basename(path), "data.train"],
              gone=[] if name in valid else [os.path.join(out, "model.safetensors")],
              kinds={fifo: "fifo"} if name == "fifo" else {})
    # a new head on a qkv file (convert FILE --head …) whose metadata lies: the converted_from's config
    # far larger than the file's tensors, none, a decoder's architecture, no --head
    def with_meta(name, change):
        raw = open(model, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        meta = json.loads(header["__metadata__"]["qkv"])
        change(meta)
        header["__metadata__"]["qkv"] = json.dumps(meta)
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        return m.write(f"mlm/files/{name}.safetensors", struct.pack("<Q", len(h)) + h + raw[8 + n:])
    files = {
        "config-huge": lambda j: j["converted_from"]["config"].update(num_hidden_layers=100000, hidden_size=4096,
                                                                      intermediate_size=16384,
                                                                      num_attention_heads=32),
        "no-converted-from": lambda j: j.pop("converted_from"),
        "decoder-architecture": lambda j: j["converted_from"].update(architecture="GPT2LMHeadModel"),
        "config-string": lambda j: j["converted_from"].update(config="x"),
        "width-differs": lambda j: j["converted_from"]["config"].update(hidden_size=64),
    }
    for name, change in files.items():
        f = with_meta(name, change)
        o = m.out("mlm-head.safetensors")
        m.add(f"mlm/convert/{name}", ["{qkv}", "convert", f, "--head", "sequence", "--labels", "a,b", "-o", o],
              names=[f, os.path.basename(f)], gone=[o])
    o = m.out("mlm-head.safetensors")
    m.add("mlm/convert/no-head", ["{qkv}", "convert", model, "-o", o], names=[model, "--head"], gone=[o])

    # the keys of the data section at their limits
    base = dict(cfg, data={"train": val, "val": val, "max_length": 8})
    keys = {"data.max_length": {"-1": -1, "2^40": 2 ** 40, "41": 41, "1": 1, "string": "x"},
            "data.mlm_probability": {"0": 0, "1": 1, "-0.1": -0.1, "nan": "nan"},
            "data.mask_replace_prob": {"1.5": 1.5, "-1": -1},
            "data.random_replace_prob": {"0.9": 0.9},
            "data.line_by_line": {"string": "yes"},
            "data.text": {"number": 5},
            "data.val_fraction": {"1": 1, "-0.5": -0.5},
            "data.whole_word_mask": {"string": "yes"},
            "data.whole_word_masking": {"true": True},
            "init_from": {"classifier": m.path("textcls/bert-head.safetensors"), "empty": "",
                          "qa": m.path("qa/bert-span.safetensors")}}
    f = m.write("mlm/configs/base.json", json.dumps(base))
    for key, vals in keys.items():
        for label, v in vals.items():
            out = m.out("mlm")
            m.add(f"mlm/set/{key}={label}", ["{qkv}", "train", f, "-o", out, "-q", "--threads", "1", "--set",
                                             f"{key}={json.dumps(v)}"],
                  names=[key, key.split(".")[-1], str(v)], gone=[os.path.join(out, "model.safetensors")])


def add_multiple_choice_cases(m):
    """Fine-tuning multiple choice: the multiple_choice task's JSONL files that lie — labels out of range,
    endings missing or of other counts, nesting, special files — and the data keys at their limits, each
    refused naming the file and line or the key."""
    golden = os.path.join(REPO, "tests", "golden", "hf", "bert-uncased")
    model = m.path("mc/bert-choice.safetensors")
    r = subprocess.run([m.qkv, "convert", golden, "--head", "choice", "-o", model], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    good = {"sent1": "the king is henry", "sent2": "now", "ending0": "henry rules", "ending1": "gaunt rules",
            "ending2": "nobody rules", "ending3": "romeo rules", "label": 0}

    def row(**change):
        d = dict(good, **change)
        return json.dumps({k: v for k, v in d.items() if v is not None}) + "\n"

    fifo = m.path("mc/a-fifo.jsonl")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    files = {
        "not-json.jsonl": row() + "{oops\n",
        "array-line.jsonl": row() + "[1, 2]\n",
        "no-context.jsonl": row() + row(sent1=None),
        "context-number.jsonl": row() + row(sent1=5),
        "ending-missing.jsonl": row() + row(ending3=None),
        "label-out.jsonl": row() + row(label=4),
        "label-negative.jsonl": row() + row(label=-1),
        "label-float.jsonl": row() + row(label=1.5),
        "label-huge.jsonl": row() + row(label=10 ** 30),
        "label-string.jsonl": row() + row(label="0"),
        "deep.jsonl": row() + '{"sent1": ' + "[" * 100000 + "]" * 100000 + "}\n",
        "empty.jsonl": "",
        "invalid-utf8.jsonl": row().encode() + b'{"sent1": "the \xfe king", "sent2": "x\xff", "ending0": "a", '
                                               b'"ending1": "b", "ending2": "c", "ending3": "d", "label": 1}\n',
        "huge-context.jsonl": row(sent1="word " * 100000),
        "data.csv": "sent1,sent2,ending0,ending1,ending2,ending3,label\na,b,c,d,e,f,0\n\"g, h\",i,j,k,l,m,3\n",
        "label-word.csv": "sent1,sent2,ending0,ending1,ending2,ending3,label\na,b,c,d,e,f,zero\n",
        "label-huge.csv": "sent1,sent2,ending0,ending1,ending2,ending3,label\na,b,c,d,e,f," + "9" * 40 + "\n",
        "open-quote.csv": 'sent1,sent2,ending0,ending1,ending2,ending3,label\n"a,b,c,d,e,f,0\n',
        "no-ending3.csv": "sent1,sent2,ending0,ending1,ending2,label\na,b,c,d,e,0\n",
    }
    valid = {"invalid-utf8.jsonl", "huge-context.jsonl",  # read (U+FFFD; cut to max_length), trained on: fine
             "data.csv"}
    val = m.write("mc/data/val.jsonl", row() + row(label=1))
    paths = {name: m.write(f"mc/data/{name}", data) for name, data in files.items()}
    paths.update({"fifo": fifo, "dev-zero": "/dev/zero", "directory": m.path("mc/data/x")[:-2],
                  "missing": m.path("mc/no/such.jsonl")})
    cfg = {"task": "multiple_choice", "init_from": model, "data": {"max_length": 32},
           "train": {"max_iters": 2, "batch_size": 2, "eval_interval": 0, "log_interval": 1, "checkpoint_interval": 0}}
    for name, path in paths.items():
        c = json.loads(json.dumps(cfg))
        c["data"]["train"] = path
        c["data"]["val"] = val if name in valid or name == "fifo" else path
        f = m.write(f"mc/configs/{name}.json", json.dumps(c))
        out = m.out("mc")
        m.add(f"mc/data/{name}", ["{qkv}", "train", f, "-o", out, "-q", "--threads", "1"],
              expect="any" if name in valid else "fail", names=[path, os.path.basename(path), "data.train"],
              gone=[] if name in valid else [os.path.join(out, "model.safetensors")],
              kinds={fifo: "fifo"} if name == "fifo" else {})
    base = dict(cfg, data={"train": val, "val": val, "max_length": 32})
    keys = {"data.max_length": {"-1": -1, "2^40": 2 ** 40, "41": 41, "3": 3, "string": "x"},
            "data.endings": {"empty": [], "one": ["ending0"], "number": 5, "numbers": [1, 2], "missing": "choices",
                             "object": {"a": 1}},
            "data.label": {"number": 5, "missing": "answer"},
            "data.context": {"missing": "question"},
            "data.val_fraction": {"1": 1, "-0.5": -0.5},
            "init_from": {"mlm": m.path("mlm/bert.safetensors"), "qa": m.path("qa/bert-span.safetensors"), "empty": ""}}
    f = m.write("mc/configs/base.json", json.dumps(base))
    for key, vals in keys.items():
        for label, v in vals.items():
            out = m.out("mc")
            m.add(f"mc/set/{key}={label}", ["{qkv}", "train", f, "-o", out, "-q", "--threads", "1", "--set",
                                            f"{key}={json.dumps(v)}"],
                  names=[key, key.split(".")[-1], str(v), json.dumps(v)], gone=[os.path.join(out, "model.safetensors")])


def make_cases(tmp, qkv, want_python=True):
    m = Maker(tmp, qkv)
    os.makedirs(os.path.join(tmp, "out"), exist_ok=True)
    cfgs = base_configs(m)
    pics = add_picture_cases(m)
    files = model_files(m, cfgs)
    add_model_cases(m, files, pics)
    add_train_cases(m, cfgs)
    add_flag_cases(m, files, pics)
    add_quantize_cases(m, files)
    add_pretrained_cases(m)
    add_export_cases(m)
    add_text_classification_cases(m)
    add_question_answering_cases(m)
    add_masked_lm_cases(m)
    add_multiple_choice_cases(m)
    add_plot_cases(m)
    add_bench_tokenizer_cases(m)
    if want_python:
        add_python_cases(m, files)
    return m.cases, m.skipped
