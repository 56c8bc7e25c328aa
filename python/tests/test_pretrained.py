"""Hugging Face folders from Python: qkv.convert and qkv.load(folder), against what transformers
computed with the same tiny random models (tests/golden/hf/, written by make_hf_golden.py)."""
import json
import os

import pytest

import qkv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "hf")


def reference(name):
    with open(os.path.join(GOLDEN, name, "reference.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("name", ["gpt2", "llama-gqa", "qwen2"])
def test_convert_then_generate_equals_transformers(name, tmp_path):
    out = str(tmp_path / (name + ".safetensors"))
    qkv.convert(os.path.join(GOLDEN, name), out)
    ref = reference(name)
    lm = qkv.LanguageModel(out)
    text = lm.generate(ref["text_prompt"], max_new_tokens=20, temperature=0)
    assert text == ref["text_greedy"]
    assert "".join(lm.generate(ref["text_prompt"], max_new_tokens=20, temperature=0, stream=True)) == text
    assert lm.metadata["converted_from"]["architecture"]


def test_load_a_folder_and_translate_as_transformers():
    ref = reference("marian")
    tr = qkv.load(os.path.join(GOLDEN, "marian"))
    assert isinstance(tr, qkv.Translator)
    got = tr.translate_batch(ref["sentences"], beam_size=1, max_extra_length=30)
    for g, want in zip(got, ref["translations"]):
        n = min(len(g.hypotheses[0]), len(want))
        assert n >= 10 and g.hypotheses[0][:n] == want[:n]


def test_a_bad_folder_is_a_clear_error(tmp_path):
    with pytest.raises(qkv.Error, match="has no config.json"):
        qkv.convert(str(tmp_path), str(tmp_path / "x.safetensors"))
    with pytest.raises(qkv.Error, match="nowhere"):
        qkv.load(str(tmp_path / "nowhere"))
    assert not (tmp_path / "x.safetensors").exists()
