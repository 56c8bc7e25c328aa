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


@pytest.mark.parametrize("name", ["gpt2", "llama-gqa", "qwen2", "qwen3", "phi3", "phi3-longrope", "gemma3", "gemma2",
                                  "gemma3-multimodal"])
def test_convert_then_generate_equals_transformers(name, tmp_path):
    out = str(tmp_path / (name + ".safetensors"))
    qkv.convert(os.path.join(GOLDEN, name), out)
    ref = reference(name)
    lm = qkv.LanguageModel(out)
    text = lm.generate(ref["text_prompt"], max_new_tokens=20, temperature=0)
    assert text == ref["text_greedy"]
    assert "".join(lm.generate(ref["text_prompt"], max_new_tokens=20, temperature=0, stream=True)) == text
    assert lm.metadata["converted_from"]["architecture"]


@pytest.mark.parametrize("name", ["gpt2", "llama-gqa", "qwen2"])
def test_the_repetition_penalty_is_transformers(name, tmp_path):
    # greedy generations under repetition_penalty 1.3, 0.7 and 2.0, as transformers made them
    # (tests/golden/make_penalty_golden.py): the penalty applied where the logits are
    out = str(tmp_path / (name + ".safetensors"))
    qkv.convert(os.path.join(GOLDEN, name), out)
    ref = reference(name)
    with open(os.path.join(GOLDEN, name, "penalties.json"), encoding="utf-8") as f:
        gens = json.load(f)["generations"]
    lm = qkv.LanguageModel(out)
    for g in gens:
        got = lm.generate(ref["text_prompt"], max_new_tokens=20, temperature=0, repetition_penalty=g["repetition_penalty"])
        assert got == g["text"], g["repetition_penalty"]
    assert any(g["text"] != ref["text_greedy"] for g in gens)
    batch = lm.generate_batch([ref["text_prompt"]] * 2, max_new_tokens=20, temperature=0,
                              repetition_penalty=gens[0]["repetition_penalty"])
    assert batch == [gens[0]["text"]] * 2


def test_load_a_folder_and_translate_as_transformers():
    ref = reference("marian")
    tr = qkv.load(os.path.join(GOLDEN, "marian"))
    assert isinstance(tr, qkv.Translator)
    # transformers' max_new_tokens=30 is CTranslate2's max_decoding_length=30: the same 30 steps (where
    # no EOS came, transformers forces one at the 30th, qkv's greedy search writes a 30th token)
    got = tr.translate_batch(ref["sentences"], beam_size=1, max_decoding_length=30)
    for g, want in zip(got, ref["translations"]):
        assert len(want) >= 10 and g.hypotheses[0][:len(want)] == want
    capped = tr.translate_batch(ref["sentences"], beam_size=1, max_decoding_length=5)
    assert all(len(c.hypotheses[0]) < len(g.hypotheses[0]) for c, g in zip(capped, got))


def test_a_bad_folder_is_a_clear_error(tmp_path):
    with pytest.raises(qkv.Error, match="has no config.json"):
        qkv.convert(str(tmp_path), str(tmp_path / "x.safetensors"))
    with pytest.raises(qkv.Error, match="nowhere"):
        qkv.load(str(tmp_path / "nowhere"))
    assert not (tmp_path / "x.safetensors").exists()


def test_load_a_bert_folder_and_fill_mask_as_the_pipeline():
    ref = reference("bert-uncased")
    bert = qkv.load(os.path.join(GOLDEN, "bert-uncased"))
    assert isinstance(bert, qkv.MaskedLanguageModel)
    for case in ref["fill_mask"]:
        got = bert.fill_mask(case["text"], top_k=5)
        want = case["masks"]
        if len(want) == 1:  # one mask: a list of candidates, as pipeline("fill-mask") returns
            got = [got]
        assert [[c["token"] for c in m] for m in got] == [[c["token"] for c in m] for m in want]
        assert [[c["sequence"] for c in m] for m in got] == [[c["sequence"] for c in m] for m in want]
        for gm, wm in zip(got, want):
            for g, w in zip(gm, wm):
                assert g["score"] == pytest.approx(w["score"], rel=1e-4)
    with pytest.raises(qkv.Error, match="has no \\[MASK\\] token"):
        bert.fill_mask("The cat sat.")


def test_chat_template_as_transformers(tmp_path):
    # a converted Qwen2 with chat_template.jinja beside its tokenizer (hf-chat's ChatML template):
    # apply_chat_template renders transformers' text (hf-chat/reference.json, the same template and
    # messages), chat() answers with the rendered prompt, and the template's failures are errors
    import shutil
    folder = tmp_path / "qwen2-chat"
    shutil.copytree(os.path.join(GOLDEN, "qwen2"), folder)
    shutil.copy(os.path.join(ROOT, "tests", "golden", "hf-chat", "chat_template.jinja"), folder)
    out = str(tmp_path / "chat.safetensors")
    qkv.convert(str(folder), out)
    lm = qkv.LanguageModel(out)
    with open(os.path.join(ROOT, "tests", "golden", "hf-chat", "reference.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    for c in cases:
        got = lm.apply_chat_template(c["messages"], tools=c["tools"], add_generation_prompt=c["add_generation_prompt"])
        assert got == c["text"], c["name"]
    messages = cases[0]["messages"]
    ids = lm.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids) and ids
    answer = lm.chat(messages, max_new_tokens=8, temperature=0)
    assert answer == "".join(lm.chat(messages, max_new_tokens=8, temperature=0, stream=True))
    with pytest.raises(Exception, match="not JSON data"):
        lm.apply_chat_template([{"role": "user", "content": float("nan")}])
    with pytest.raises(Exception, match="expected a list"):
        lm.apply_chat_template("Hi")
    qkv.convert(os.path.join(GOLDEN, "qwen2"), str(tmp_path / "plain.safetensors"))
    with pytest.raises(Exception, match="no chat template"):
        qkv.LanguageModel(str(tmp_path / "plain.safetensors")).chat(messages)
