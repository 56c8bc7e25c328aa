#!/usr/bin/env python3
"""Exports a qkv translation Transformer to a CTranslate2 model directory (train with qkv, serve
with CTranslate2). `qkv export --to ctranslate2` runs this script; it also runs on its own:

    pip install ctranslate2 sentencepiece
    python3 tools/ctranslate2_export.py models/en-fr.safetensors en-fr-ct2 [--quantization int8] [--force]

OUT_DIR gets CTranslate2's model.bin, config.json and shared_vocabulary.json, plus spm.model (the
model's SentencePiece tokenizer), so the folder is usable on its own:

    import ctranslate2, sentencepiece as spm
    sp, tr = spm.SentencePieceProcessor(model_file="en-fr-ct2/spm.model"), ctranslate2.Translator("en-fr-ct2")
    print(sp.decode(tr.translate_batch([sp.encode("The cat sleeps.", out_type=str)])[0].hypotheses[0]))

The mapping, weight for weight (qkv's names are torch.nn.Transformer's; see src/nn/transformer.cpp):

  x = E[ids] · √d_model + PE[pos]     encoder/decoder `embeddings` (scale_embeddings) + `position_encodings`
                                      (qkv's own table, given to CTranslate2 as fixed encodings)
  PE[pos, 2i] = sin(pos · ω_i), PE[pos, 2i+1] = cos(pos · ω_i), ω_i = 10000^(−2i/d_model)
                                      qkv interleaves sin and cos; CTranslate2's built-in table puts all
                                      sines before all cosines, so the table must be given
  post-norm layer:  x = LN1(x + SelfAttn(x)); [x = LN2(x + CrossAttn(x, memory));] x = LN(x + FFN(x))
    self_attn.in_proj_weight [3d, d] (q; k; v stacked)  → self_attention.linear_0 (CT2's fused QKV, same order)
    self_attn.out_proj                                    → self_attention.linear_1
    multihead_attn.in_proj_weight rows [0, d)             → attention.linear_0 (queries from the decoder)
    multihead_attn.in_proj_weight rows [d, 3d)            → attention.linear_1 (fused K; V of the memory)
    multihead_attn.out_proj                               → attention.linear_2
    linear1, linear2 (FFN(x) = W₂ act(W₁x + b₁) + b₂)     → ffn.linear_0, ffn.linear_1
    encoder norm1, norm2                                  → self_attention.layer_norm, ffn.layer_norm
    decoder norm1, norm2, norm3                           → self_attention.layer_norm, attention.layer_norm,
                                                            ffn.layer_norm
  memory = LN_enc(encoder layers(x)), logits = LN_dec(decoder layers(y)) · Eᵀ
    encoder.norm, decoder.norm  → encoder/decoder `layer_norm`. torch.nn.Transformer (and so qkv) has these
                                  final LayerNorms in post-norm models too. CTranslate2's Python spec only
                                  declares them for pre-norm models, but its C++ applies them whenever
                                  they are in the file: the spec is built pre-norm (which declares them)
                                  and then switched to post-norm.
    one embedding E [V, d]      → encoder embeddings, decoder embeddings and the output projection
                                  (no bias); CTranslate2 stores it once (spec.optimize aliases copies)
  LayerNorm ε = 1e-5 (torch's default, qkv's); attention scores scaled by 1/√(d/h) (CTranslate2's default)

Tokens: CTranslate2 takes token strings. The vocabulary is the SentencePiece pieces in id order;
qkv's sources end with EOS (add_source_eos) and no BOS, its decoder starts from BOS.

Decoding the same way: qkv ranks finished hypotheses by log p / ((5+|Y|)/6)^α (GNMT's penalty),
CTranslate2 by log p / |Y|^length_penalty. With α = 0 both rank by log p: `qkv translate --alpha 0`
against translate_batch(…, length_penalty=1e-9, min_decoding_length=0) (length_penalty=0 is taken as
"unset"). The position table has max_len rows (256 for the shipped model), as qkv's: pass
max_input_length=256 (CTranslate2 counts the EOS in it; its default, 1024, runs past the table, an
error "No position encodings are defined for positions >= 256") and max_decoding_length <= 256.
"""
import argparse
import base64
import json
import math
import os
import shutil
import struct
import sys
import tempfile

PROG = "qkv export"


class ExportError(Exception):
    """A problem the user can fix: printed as one line, exit status 1."""


# ---- reading a qkv model file ------------------------------------------------------------------------


def read_header(path):
    """The safetensors header of `path`: ({name: {dtype, shape, data_offsets}}, metadata, data start)."""
    if not os.path.isfile(path):
        raise ExportError(f"model file '{path}' not found" if not os.path.exists(path) else f"'{path}' is not a file")
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ExportError(f"'{path}' is not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", head)
        size = os.path.getsize(path)
        if n > size - 8:
            raise ExportError(f"'{path}' is not a safetensors file (header of {n} bytes in a {size}-byte file)")
        def unique(pairs):  # json keeps the last of a key given twice; a tensor listed twice is refused
            seen = set()
            for k, _ in pairs:
                if k in seen:
                    raise ExportError(f"'{path}': its header names {k[:80]!r} twice")
                seen.add(k)
            return dict(pairs)

        try:
            header = json.loads(f.read(n), object_pairs_hook=unique)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ExportError(f"'{path}' is not a safetensors file (its header is not JSON qkv reads: "
                              f"{type(e).__name__}: {str(e)[:200]})")
    if not isinstance(header, dict):
        raise ExportError(f"'{path}' is not a safetensors file (its header is not a JSON object)")
    meta = header.pop("__metadata__", {}) or {}
    try:
        qkv = json.loads(meta["qkv"])
    except (KeyError, TypeError, ValueError, RecursionError):
        raise ExportError(f"'{path}' has no qkv metadata (not a model file written by qkv train)")
    if not isinstance(qkv, dict):
        raise ExportError(f"'{path}' has no qkv metadata (not a model file written by qkv train)")
    size = os.path.getsize(path) - 8 - n
    for name, t in header.items():  # (qkv's loader checks the same before `qkv export` runs this)
        try:
            begin, end = t["data_offsets"]
            shape = [int(d) for d in t["shape"]]
            item = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "BOOL": 1}[t["dtype"]]
            ok = 0 <= begin <= end <= size and all(d >= 0 for d in shape) and math.prod(shape) * item == end - begin
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise ExportError(f"'{path}': tensor {name[:80]!r} has a dtype, shape or data_offsets that do not fit "
                              f"the file ({size} data bytes)")
    return header, qkv, 8 + n


def read_tensors(path, header, start):
    """Every tensor of the file as float32 numpy arrays (F32, F16 and BF16 files)."""
    import numpy as np

    out = {}
    with open(path, "rb") as f:
        for name, t in header.items():
            begin, end = t["data_offsets"]
            f.seek(start + begin)
            raw = f.read(end - begin)
            if t["dtype"] == "F32":
                a = np.frombuffer(raw, dtype="<f4")
            elif t["dtype"] == "F16":
                a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
            elif t["dtype"] == "BF16":  # the upper half of a float32
                a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                continue  # (integer tensors: none in a Transformer)
            out[name] = a.reshape(t["shape"])
    return out


def sentencepiece_pieces(model_proto):
    """The pieces of a serialized SentencePiece ModelProto, in id order, and their types.

    ModelProto field 1 is `repeated SentencePiece pieces`, each {1: string piece, 2: float score,
    3: enum type (1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte)}: read with a minimal
    protobuf reader, so the export needs no sentencepiece package.
    """

    def varint(buf, i):
        v = shift = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v, i

    def fields(buf):
        i = 0
        while i < len(buf):
            key, i = varint(buf, i)
            number, wire = key >> 3, key & 7
            if wire == 0:
                v, i = varint(buf, i)
            elif wire == 1:
                v, i = buf[i:i + 8], i + 8
            elif wire == 2:
                n, i = varint(buf, i)
                v, i = buf[i:i + n], i + n
            elif wire == 5:
                v, i = buf[i:i + 4], i + 4
            else:
                raise ValueError(f"unsupported protobuf wire type {wire}")
            yield number, v

    pieces, types = [], []
    for number, v in fields(model_proto):
        if number == 1:
            piece, kind = None, 1
            for n2, v2 in fields(v):
                if n2 == 1:
                    piece = bytes(v2).decode("utf-8")
                elif n2 == 3:
                    kind = v2
            pieces.append(piece)
            types.append(kind)
    return pieces, types


# ---- the qkv Transformer as CTranslate2's TransformerSpec --------------------------------------------


def sinusoidal_table(max_len, d):
    """qkv's table (src/nn/positional_encoding.cpp), float32 arithmetic as there:
    PE[pos, 2i] = sin(pos · ω_i), PE[pos, 2i+1] = cos(pos · ω_i), ω_i = exp(2i · −ln(10000)/d)."""
    import numpy as np

    f32 = np.float32
    k = f32(-math.log(10000.0)) / f32(d)
    w = np.array([math.exp(float(f32(2 * i) * k)) for i in range(d // 2)], dtype=np.float64).astype(f32)
    a = (np.arange(max_len, dtype=f32)[:, None] * w[None, :]).astype(np.float64)  # pos · ω_i rounded to float
    pe = np.empty((max_len, d), dtype=f32)
    pe[:, 0::2] = np.sin(a)
    pe[:, 1::2] = np.cos(a)
    return pe


def build_spec(cfg, w, pieces):
    """The TransformerSpec of qkv's Seq2SeqTransformer with hyper-parameters `cfg` and weights `w`."""
    from ctranslate2.specs import common_spec, transformer_spec

    d, h = cfg["d_model"], cfg["nhead"]
    activations = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                   "gelu_tanh": common_spec.Activation.GELUTanh}
    if cfg.get("activation", "relu") not in activations:
        raise ExportError(f"activation {cfg['activation']!r} has no CTranslate2 equivalent")
    # Built pre-norm so that the spec declares the final encoder/decoder LayerNorms (see the top).
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg["num_encoder_layers"], cfg["num_decoder_layers"]), h, pre_norm=True,
        activation=activations[cfg.get("activation", "relu")])
    spec.encoder.pre_norm = spec.decoder.pre_norm = bool(cfg.get("norm_first", False))

    def linear(s, prefix, rows=None):
        s.weight = w[prefix + ".weight"] if rows is None else w[prefix + "_weight"][rows]
        s.bias = w[prefix + ".bias"] if rows is None else w[prefix + "_bias"][rows]

    def norm(s, prefix):
        s.gamma, s.beta = w[prefix + ".weight"], w[prefix + ".bias"]

    # x = E[ids] · √d_model + PE[pos]
    if cfg.get("positions", "sinusoidal") == "learned":
        pe = w["pos_embedding.weight"]
    else:
        pe = sinusoidal_table(cfg["max_len"], d)
    E = w["embedding.weight"]
    for side in (spec.encoder, spec.decoder):
        side.scale_embeddings = True
        side.position_encodings.encodings = pe
        (side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings).weight = E
    spec.decoder.projection.weight = E  # logits = h Eᵀ, no bias

    for i, layer in enumerate(spec.encoder.layer):
        p = f"transformer.encoder.layers.{i}."
        linear(layer.self_attention.linear[0], p + "self_attn.in_proj", rows=slice(0, 3 * d))
        linear(layer.self_attention.linear[1], p + "self_attn.out_proj")
        norm(layer.self_attention.layer_norm, p + "norm1")
        linear(layer.ffn.linear_0, p + "linear1")
        linear(layer.ffn.linear_1, p + "linear2")
        norm(layer.ffn.layer_norm, p + "norm2")
    norm(spec.encoder.layer_norm, "transformer.encoder.norm")

    for i, layer in enumerate(spec.decoder.layer):
        p = f"transformer.decoder.layers.{i}."
        linear(layer.self_attention.linear[0], p + "self_attn.in_proj", rows=slice(0, 3 * d))
        linear(layer.self_attention.linear[1], p + "self_attn.out_proj")
        norm(layer.self_attention.layer_norm, p + "norm1")
        linear(layer.attention.linear[0], p + "multihead_attn.in_proj", rows=slice(0, d))
        linear(layer.attention.linear[1], p + "multihead_attn.in_proj", rows=slice(d, 3 * d))
        linear(layer.attention.linear[2], p + "multihead_attn.out_proj")
        norm(layer.attention.layer_norm, p + "norm2")
        linear(layer.ffn.linear_0, p + "linear1")
        linear(layer.ffn.linear_1, p + "linear2")
        norm(layer.ffn.layer_norm, p + "norm3")
    norm(spec.decoder.layer_norm, "transformer.decoder.norm")

    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    c = spec.config
    c.unk_token = pieces[cfg["unk_id"]]
    c.bos_token = c.decoder_start_token = pieces[cfg["bos_id"]]
    c.eos_token = pieces[cfg["eos_id"]]
    c.add_source_bos, c.add_source_eos = False, True  # qkv's sources: ids … EOS
    c.layer_norm_epsilon = 1e-5
    return spec


# ---- the command ---------------------------------------------------------------------------------


def export(model_path, out_dir, quantization, force):
    header, meta, start = read_header(model_path)
    kind = meta.get("model_type")
    if kind != "transformer":
        raise ExportError(f"cannot export '{model_path}': CTranslate2's TransformerSpec needs a Transformer, and "
                          f"this is a {kind!r} model (qkv's encoder–decoder Transformer, model_type 'transformer', "
                          "is the one that maps onto it)")
    cfg = dict(meta.get("model", {}))
    tok = meta.get("tokenizer", {})
    if tok.get("type") != "sentencepiece" or "model_base64" not in tok:
        raise ExportError(f"'{model_path}' holds no SentencePiece tokenizer (tokenizer type {tok.get('type')!r})")
    sp_model = base64.b64decode(tok["model_base64"])
    pieces, types = sentencepiece_pieces(sp_model)
    if len(pieces) != cfg["vocab_size"]:
        raise ExportError(f"the tokenizer has {len(pieces)} pieces but the model's vocabulary has {cfg['vocab_size']}")
    if len(set(pieces)) != len(pieces):
        raise ExportError("the tokenizer's pieces are not unique, so they cannot name CTranslate2's tokens")
    cfg["unk_id"] = types.index(2) if 2 in types else 0  # the UNKNOWN piece
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError(f"'{out_dir}' exists and is not a directory")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not force:
        raise ExportError(f"'{out_dir}' exists and is not empty (--force writes over the files an export writes)")

    try:
        import numpy  # noqa: F401
        import ctranslate2
        import ctranslate2.specs  # noqa: F401
    except ImportError as e:
        raise ExportError(f"the Python package {e.name or 'ctranslate2'} is missing for {sys.executable} "
                          f"(pip install ctranslate2; QKV_PYTHON picks another interpreter): {e}")

    w = read_tensors(model_path, header, start)
    missing = [n for n in ("embedding.weight", "transformer.encoder.norm.weight", "transformer.decoder.norm.weight")
               if n not in w]
    if missing:
        raise ExportError(f"'{model_path}' lacks the tensors {', '.join(missing)}")
    try:
        spec = build_spec(cfg, w, pieces)
        spec.validate()
        spec.optimize(quantization=quantization)  # aliases the three copies of E; quantizes
    except KeyError as e:
        raise ExportError(f"'{model_path}' lacks the tensor {e.args[0]}")
    except (ValueError, RuntimeError, TypeError) as e:
        raise ExportError(f"CTranslate2 {ctranslate2.__version__} refused the model: {e}")

    # Written into a fresh folder beside OUT_DIR, then moved in: an export that fails halfway
    # leaves OUT_DIR as it was.
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".ct2-export-", dir=parent)
    try:
        spec.save(tmp)
        with open(os.path.join(tmp, "spm.model"), "wb") as f:
            f.write(sp_model)
        os.makedirs(out_dir, exist_ok=True)
        names = sorted(os.listdir(tmp))
        for name in names:
            os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = os.path.getsize(os.path.join(out_dir, "model.bin")) / 2**20
    print(f"{PROG}: {model_path} (Transformer {cfg['num_encoder_layers']}+{cfg['num_decoder_layers']} layers, "
          f"d_model {cfg['d_model']}, {cfg['nhead']} heads, vocab {cfg['vocab_size']}) -> {out_dir} "
          f"({quantization}, model.bin {size:.1f} MiB; {', '.join(names)}; CTranslate2 {ctranslate2.__version__})",
          file=sys.stderr)


QUANTIZATIONS = ("float32", "float16", "bfloat16", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16")


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG + " --to ctranslate2", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a qkv model file (model_type transformer), e.g. models/en-fr.safetensors")
    ap.add_argument("out_dir", help="the CTranslate2 model directory to write")
    ap.add_argument("--quantization", default="float32", choices=QUANTIZATIONS,
                    help="how model.bin stores the weights (default float32: the file's weights exactly)")
    ap.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR (over an earlier export)")
    a = ap.parse_args(argv)
    try:
        export(a.model, a.out_dir, a.quantization, a.force)
    except ExportError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
