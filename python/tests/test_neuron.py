"""The neuron view from Python (.neuron(text, layer, head, query) of a LanguageModel, a
MaskedLanguageModel and a Translator): /v1/attention's field names, and its numbers against an
independent computation — NumPy from the Hugging Face folders' own tensors (tests/golden/hf/, tiny
random models written by make_hf_golden.py with transformers): GPT-2's ln_1 and c_attn, Llama's
RMSNorm, q_proj/k_proj and transformers' rotate-half RoPE with grouped-query heads; a translator's
decoder rows against the cross-attention translate_batch(return_attention=True) records."""
import json
import math
import os
import struct

import numpy as np
import pytest

import qkv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "hf")
# /v1/attention's "neuron" object (tools/qkv/cmd_serve.cpp's neuron_json)
FIELDS = {"kind", "layer", "head", "kv_head", "query", "head_dim", "scale", "tokens", "words", "word", "key_tokens",
          "key_words", "key_word", "queries", "keys", "products", "scores", "weights"}


def reference(name):
    with open(os.path.join(GOLDEN, name, "reference.json"), encoding="utf-8") as f:
        return json.load(f)


def tensors(name):
    """A folder's model.safetensors as NumPy arrays (F32 only: the golden folders store f32)."""
    with open(os.path.join(GOLDEN, name, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(data[b:e], np.float32).reshape(v["shape"]).astype(np.float64)
    return out


def check_row(n, q, k, first, last):
    """q [d], k [Tk, d] computed here: the view's vectors, products, scores and softmax must be theirs."""
    np.testing.assert_allclose(n["queries"][n["query"]], q, rtol=1e-4, atol=1e-5)
    Tk, d = k.shape
    assert n["keys"].shape == (Tk, d) and n["products"].shape == (Tk, d)
    seen = np.zeros(Tk, bool)
    seen[first:last + 1] = True
    np.testing.assert_allclose(n["keys"][seen], k[seen], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(n["products"][seen], q * k[seen], rtol=1e-3, atol=1e-5)
    assert np.isnan(n["products"][~seen]).all()
    s = k[seen] @ q / math.sqrt(d)
    np.testing.assert_allclose(n["scores"][seen], s, rtol=1e-4, atol=1e-5)
    assert np.isneginf(n["scores"][~seen]).all()
    w = np.exp(s - s.max())
    np.testing.assert_allclose(n["weights"][seen], w / w.sum(), rtol=1e-4, atol=1e-6)
    assert (n["weights"][~seen] == 0).all()
    assert n["scale"] == pytest.approx(1 / math.sqrt(d))


def test_gpt2_layer0_neuron_is_numpys_from_the_folder():
    ref, t = reference("gpt2"), tensors("gpt2")
    lm = qkv.load(os.path.join(GOLDEN, "gpt2"))
    text, ids = ref["text_prompt"], ref["text_prompt_ids"]
    cfg = json.load(open(os.path.join(GOLDEN, "gpt2", "config.json")))
    E, H = cfg["n_embd"], cfg["n_head"]
    d, T = E // H, len(ids)
    # x = wte[ids] + wpe[:T]; LN₁; [q k v] = x W + b (Conv1D: W [E, 3E])
    x = t["transformer.wte.weight"][ids] + t["transformer.wpe.weight"][:T]
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    ln = (x - mu) / np.sqrt(var + cfg["layer_norm_epsilon"]) * t["transformer.h.0.ln_1.weight"] + t["transformer.h.0.ln_1.bias"]
    qkv_ = ln @ t["transformer.h.0.attn.c_attn.weight"] + t["transformer.h.0.attn.c_attn.bias"]
    for head, query in ((0, 0), (H - 1, T - 1), (1, 7)):
        n = lm.neuron(text, 0, head, query)
        assert set(n) == FIELDS
        assert (n["kind"], n["layer"], n["head"], n["kv_head"], n["query"], n["head_dim"]) == ("decoder_self", 0, head, head, query, d)
        assert len(n["tokens"]) == T and n["key_tokens"] == n["tokens"]
        q = qkv_[query, head * d:(head + 1) * d]
        k = qkv_[:, E + head * d:E + (head + 1) * d]
        check_row(n, q, k, 0, query)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


@pytest.mark.parametrize("name", ["llama-gqa", "mistral-window"])
def test_llama_layer0_neuron_is_numpys_rope_and_grouped_heads(name):
    ref, t = reference(name), tensors(name)
    cfg = json.load(open(os.path.join(GOLDEN, name, "config.json")))
    lm = qkv.load(os.path.join(GOLDEN, name))
    text, ids = ref["text_prompt"], ref["text_prompt_ids"]
    H, Hkv, D, T = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], len(ids)
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    W = cfg.get("sliding_window") or 0
    # n = RMSNorm₁(embed[ids]); q, k = q_proj(n), k_proj(n) per head, rotated (transformers' rotate_half, f32 angles)
    x = t["model.embed_tokens.weight"][ids]
    n_ = x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg["rms_norm_eps"]) * t["model.layers.0.input_layernorm.weight"]
    q = (n_ @ t["model.layers.0.self_attn.q_proj.weight"].T).reshape(T, H, D)
    k = (n_ @ t["model.layers.0.self_attn.k_proj.weight"].T).reshape(T, Hkv, D)
    inv = (1.0 / theta ** (np.arange(0, D, 2, dtype=np.int64).astype(np.float32) / D)).astype(np.float32)
    ang = np.outer(np.arange(T, dtype=np.float32), inv).astype(np.float32)
    ang = np.concatenate([ang, ang], -1).astype(np.float64)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    for head, query in ((0, 0), (H - 1, T - 1), (1, 11), (2, 20)):
        n = lm.neuron(text, 0, head, query)
        assert set(n) == FIELDS
        assert n["kv_head"] == head // (H // Hkv) and n["head_dim"] == D
        first = max(0, query - W + 1) if W else 0
        check_row(n, q[query, head], k[:, n["kv_head"]], first, query)
    with pytest.raises(qkv.Error, match="head 4 is out of range"):
        lm.neuron(text, 0, H, 0)


def test_bert_neuron_has_the_api_fields_and_a_softmax_row():
    bert = qkv.load(os.path.join(GOLDEN, "bert-uncased"))
    n = bert.neuron("The cat sat on the mat because it was tired.", 1, 1, 3)
    assert set(n) == FIELDS and n["kind"] == "encoder_self" and n["tokens"][0] == "[CLS]"
    d = n["head_dim"]
    check_row(n, n["queries"][3], n["keys"], 0, len(n["tokens"]) - 1)
    assert n["queries"].shape == n["keys"].shape == (len(n["tokens"]), d)


def test_marian_decoder_neuron_is_the_recorded_cross_attention():
    ref = reference("marian")
    tr = qkv.load(os.path.join(GOLDEN, "marian"))
    text = ref["sentences"][0]
    got = tr.translate_batch([text], beam_size=1, return_attention=True)[0]
    cross = got.cross_attention  # per layer [heads, target tokens, source tokens]
    L, H, Tq, S = len(cross), cross[0].shape[0], cross[0].shape[1], cross[0].shape[2]
    for layer, head, query in ((0, 0, 0), (L - 1, H - 1, Tq - 1), (1, 2, 3)):
        n = tr.neuron(text, layer, head, query, kind="cross", beam_size=1)
        assert set(n) == FIELDS and n["kind"] == "cross"
        assert len(n["tokens"]) == Tq and len(n["key_tokens"]) == S and n["key_tokens"][-1] == "</s>"
        check_row(n, n["queries"][query], n["keys"], 0, S - 1)
        np.testing.assert_allclose(n["weights"], cross[layer][head, query], atol=2e-5)
        s = tr.neuron(text, layer, head, query, kind="decoder_self", beam_size=1)
        # queries: the translation (and </s> if it finished); keys: <s> and the translation before each
        assert s["tokens"] == n["tokens"] and s["key_tokens"][0] == "<s>" and s["key_tokens"][1:] == s["tokens"][:-1]
        check_row(s, s["queries"][query], s["keys"], 0, query)
    with pytest.raises(qkv.Error, match="encoder_self, decoder_self or cross"):
        tr.neuron(text, 0, 0, 0, kind="self")
    e = tr.neuron(text, 0, 0, 0)
    assert e["kind"] == "encoder_self" and e["tokens"] == e["key_tokens"] and e["tokens"][-1] == "</s>"
