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


@pytest.mark.parametrize("name", ["bert-seqcls", "distilbert-seqcls", "roberta-seqcls", "deberta-v2-seqcls",
                                  "electra-seqcls", "modernbert-seqcls", "albert-seqcls"])
def test_text_classification_as_the_pipeline(name):
    ref = reference(name)
    model = qkv.load(os.path.join(GOLDEN, name))
    texts = [c["text"] for c in ref["text_classification"]]
    # without top_k: the best label of each text, {'label', 'score'} (a list of one for a str)
    top1 = model.text_classification(texts)
    for got, case in zip(top1, ref["text_classification"]):
        assert got["label"] == case["top1"][0]["label"]
        assert got["score"] == pytest.approx(case["top1"][0]["score"], abs=1e-5)
    assert model.text_classification(texts[0])[0]["label"] == ref["text_classification"][0]["top1"][0]["label"]
    # top_k=None: every label, best first
    for text, case in zip(texts, ref["text_classification"]):
        got = model.text_classification(text, top_k=None)
        assert [g["label"] for g in got] == [w["label"] for w in case["all"]]
        assert [g["score"] for g in got] == pytest.approx([w["score"] for w in case["all"]], abs=1e-5)
    pair = ref["text_classification_pair"]
    got = model.text_classification(pair["text"], top_k=None, text_pair=pair["text_pair"])
    assert [g["score"] for g in got] == pytest.approx([w["score"] for w in pair["all"]], abs=1e-5)
    with open(os.path.join(GOLDEN, name, "config.json"), encoding="utf-8") as f:
        id2label = json.load(f)["id2label"]
    assert model.labels == [id2label[str(i)] for i in range(len(id2label))]
    with pytest.raises(ValueError, match="top_k"):
        model.text_classification("x", top_k=0)
    with pytest.raises(qkv.Error, match="no token classifier"):
        model.token_classification("x")


@pytest.mark.parametrize("name", ["bert-tokcls", "roberta-tokcls", "xlmr-tokcls", "deberta-tokcls", "electra-tokcls",
                                  "modernbert-tokcls", "albert-tokcls"])
def test_token_classification_as_the_pipeline(name):
    ref = reference(name)
    model = qkv.load(os.path.join(GOLDEN, name))
    for case in ref["token_classification"]:
        for strategy, key in (("none", "none"), ("simple", "simple"), ("first", "first"), ("average", "average"),
                              ("max", "max")):
            got = model.token_classification(case["text"], aggregation_strategy=strategy)
            want = case[key]
            name_key = "entity" if strategy == "none" else "entity_group"
            assert [g[name_key] for g in got] == [w[name_key] for w in want]
            assert [g["word"] for g in got] == [w["word"] for w in want]
            assert [(g["start"], g["end"]) for g in got] == [(w["start"], w["end"]) for w in want]
            assert [g["score"] for g in got] == pytest.approx([w["score"] for w in want], abs=1e-5)
        got = model.token_classification([case["text"]], ignore_labels=[])[0]
        assert [(g["entity"], g["index"]) for g in got] == [(w["entity"], w["index"]) for w in case["all"]]


def test_sentence_embeddings_as_sentence_transformers():
    ref = reference("st-bert")["sentence_embeddings"]
    model = qkv.load(os.path.join(GOLDEN, "st-bert"))
    got = model.encode(ref["texts"])
    assert got.shape == (len(ref["texts"]), 48) and got.dtype.name == "float32"
    assert got.tolist() == [pytest.approx(e, abs=1e-5) for e in ref["embeddings"]]
    one = model.encode(ref["texts"][0])
    assert one.shape == (48,)
    assert float((one * one).sum()) == pytest.approx(1.0, abs=1e-5)  # the folder's Normalize
    raw = model.encode(ref["texts"][0], normalize_embeddings=False)
    assert float((raw * raw).sum()) != pytest.approx(1.0, abs=1e-3)
    with pytest.raises(TypeError, match="sentences must be a str or a list of str"):
        model.encode(7)


def test_mpnet_embeddings_and_classification():
    # all-mpnet-base-v2's form (MPNet: a relative position bias in every layer; mean pooling, Normalize)
    ref = reference("st-mpnet")["sentence_embeddings"]
    model = qkv.load(os.path.join(GOLDEN, "st-mpnet"))
    got = model.encode(ref["texts"])
    assert got.tolist() == [pytest.approx(e, abs=1e-5) for e in ref["embeddings"]]
    cls = qkv.load(os.path.join(GOLDEN, "mpnet-seqcls"))
    case = reference("mpnet-seqcls")["text_classification"][0]
    got = cls.text_classification(case["text"], top_k=None)
    assert [g["label"] for g in got] == [w["label"] for w in case["all"]]
    assert [g["score"] for g in got] == pytest.approx([w["score"] for w in case["all"]], abs=1e-5)


def test_modernbert_embeddings_and_fill_mask():
    # gte-modernbert's form (ModernBERT: rotary positions, local and global layers; CLS pooling, Normalize)
    ref = reference("st-modernbert")["sentence_embeddings"]
    model = qkv.load(os.path.join(GOLDEN, "st-modernbert"))
    assert model.metadata["model_type"] == "modernbert"
    got = model.encode(ref["texts"])
    assert got.tolist() == [pytest.approx(e, abs=1e-5) for e in ref["embeddings"]]
    mlm = qkv.load(os.path.join(GOLDEN, "modernbert-mlm"))
    case = reference("modernbert-mlm")["fill_mask"][0]
    got = mlm.fill_mask(case["text"], top_k=5)
    assert [g["token"] for g in got] == [w["token"] for w in case["masks"][0]]
    assert [g["score"] for g in got] == pytest.approx([w["score"] for w in case["masks"][0]], rel=1e-4)


@pytest.mark.parametrize("name", ["ce-bert", "ce-roberta", "ce-bert-no-types", "ce-deberta"])
def test_rank_as_the_cross_encoder(name):
    # a reranker (one label) as sentence-transformers' CrossEncoder.rank: the order and the scores,
    # each (query, document) pair cut to the tokenizer's model_max_length the longer first
    model = qkv.load(os.path.join(GOLDEN, name))
    for case in reference(name)["cases"]:
        got = model.rank(case["query"], case["documents"])
        assert [g["corpus_id"] for g in got] == [w["corpus_id"] for w in case["rank"]]
        # (ce-roberta's scores are its logits, up to ~3, where f32's rounding reaches 1.5e-5)
        tol = 5e-5 if name == "ce-roberta" else 1e-5
        assert [g["score"] for g in got] == pytest.approx([w["score"] for w in case["rank"]], abs=tol)
        top = model.rank(case["query"], case["documents"], top_k=2, return_documents=True)
        assert [(g["corpus_id"], g["text"]) for g in top] == \
            [(w["corpus_id"], case["documents"][w["corpus_id"]]) for w in case["rank_top2"]]
    with pytest.raises(ValueError, match="top_k"):
        model.rank("q", ["d"], top_k=0)
    with pytest.raises(ValueError, match="activation"):
        model.rank("q", ["d"], activation="softmax")


@pytest.mark.parametrize("name", ["deberta-seqcls", "mpnet-seqcls"])
def test_zero_shot_classification_as_the_pipeline(name):
    # pipeline("zero-shot-classification") over an NLI classifier (DeBERTa-v3's network; MPNet's):
    # labels best first with their scores; multi_label; a template; labels as one comma-separated str
    model = qkv.load(os.path.join(GOLDEN, name))
    for case in reference(name)["zero_shot"]:
        kwargs = {"multi_label": case["multi_label"]}
        if case["template"]:
            kwargs["hypothesis_template"] = case["template"]
        got = model.zero_shot_classification(case["text"], case["labels"], **kwargs)
        assert got["sequence"] == case["text"]
        assert got["labels"] == case["result"]["labels"]
        assert got["scores"] == pytest.approx(case["result"]["scores"], abs=1e-5)
        both = model.zero_shot_classification([case["text"]] * 2, ", ".join(case["labels"]), batch_size=1, **kwargs)
        assert [b["labels"] for b in both] == [case["result"]["labels"]] * 2
    with pytest.raises(ValueError, match="names no label"):
        model.zero_shot_classification("x", " , ")
    with pytest.raises(TypeError, match="candidate_labels"):
        model.zero_shot_classification("x", ["a", 3])
    with pytest.raises(qkv.Error, match="has no {}"):
        model.zero_shot_classification("x", "a", hypothesis_template="About a thing.")


@pytest.mark.parametrize("name", ["qa-bert", "qa-roberta", "qa-deberta", "qa-modernbert"])
def test_question_answering_as_the_pipeline(name):
    # transformers 4.57's pipeline("question-answering") (tests/golden/hf/qa-*): the answers' text,
    # character offsets and scores, a dict where one is left, a list per pair for lists
    model = qkv.load(os.path.join(GOLDEN, name))

    def same(got, want):
        if isinstance(want, dict):
            assert isinstance(got, dict)
            got, want = [got], [want]
        assert [(g["answer"], g["start"], g["end"]) for g in got] == [(w["answer"], w["start"], w["end"]) for w in want]
        assert [g["score"] for g in got] == pytest.approx([w["score"] for w in want], rel=5e-4, abs=1e-12)

    for case in reference(name)["question_answering"]:
        got = model.question_answering(case["question"], case["context"], **case["args"])
        if isinstance(case["question"], list):
            assert len(got) == len(case["result"])
            for g, w in zip(got, case["result"]):
                same(g, w)
        else:
            same(got, case["result"])
            if not isinstance(case["result"], list):
                assert case["context"][got["start"]:got["end"]] == got["answer"]
    with pytest.raises(TypeError, match="both be a str or both a list"):
        model.question_answering("Who?", ["a", "b"])
    with pytest.raises(ValueError, match="top_k"):
        model.question_answering("Who?", "a text", top_k=0)
    with pytest.raises(qkv.Error, match="2 questions for 1 contexts"):
        model.question_answering(["Who?", "What?"], ["a text"])
    with pytest.raises(qkv.Error, match="no question-answering head"):
        qkv.load(os.path.join(GOLDEN, "bert-seqcls")).question_answering("Who?", "a text")


def test_multilingual_embeddings_through_a_sentencepiece_unigram():
    # paraphrase-multilingual's form: XLM-RoBERTa, its SentencePiece Unigram tokenizer, mean pooling
    # without Normalize
    ref = reference("st-xlmr")["sentence_embeddings"]
    model = qkv.load(os.path.join(GOLDEN, "st-xlmr"))
    got = model.encode(ref["texts"], batch_size=2)
    assert got.tolist() == [pytest.approx(e, rel=1e-5, abs=1e-5) for e in ref["embeddings"]]
    one = model.encode(ref["texts"][0])
    assert float((one * one).sum()) != pytest.approx(1.0, abs=1e-3)
    # text in any script, controls and a lone combining mark: embedded, not refused
    assert model.encode(["Привет, мир! 你好 \u0301\x07 ﬁne", ""]).shape == (2, 48)


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
        got = lm.apply_chat_template(c["messages"], tools=c["tools"], add_generation_prompt=c["add_generation_prompt"],
                                     continue_final_message=c.get("continue_final_message", False))
        assert got == c["text"], c["name"]
    # a final assistant message: chat() continues it by default (the pipeline's rule: None → True)
    cont = next(c for c in cases if c["name"] == "continue-final-message")
    assert lm.chat(cont["messages"], max_new_tokens=6, temperature=0) == \
        lm.chat(cont["messages"], max_new_tokens=6, temperature=0, continue_final_message=True)
    with pytest.raises(TypeError, match="continue_final_message"):
        lm.apply_chat_template(cont["messages"], continue_final_message=3)
    with pytest.raises(Exception, match="not compatible"):
        lm.apply_chat_template(cont["messages"], add_generation_prompt=True, continue_final_message=True)
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


def test_a_new_head_fine_tuned_from_python(tmp_path):
    # qkv.convert(head=, labels=) puts a new classifier on a BertForMaskedLM (as
    # AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2)), qkv.train fine-tunes it
    # on a JSONL of labelled texts (task text_classification), and the result classifies with its labels.
    head = str(tmp_path / "bert.safetensors")
    qkv.convert(os.path.join(GOLDEN, "bert-uncased"), head, head="sequence", labels=["neg", "pos"])
    model = qkv.load(head)
    assert model.labels == ["neg", "pos"]
    assert model.metadata["converted_from"]["new_head"]["checkpoint_architecture"] == "BertForMaskedLM"
    with open(os.path.join(ROOT, "data", "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        lines = [l.strip() for l in f if len(l.strip()) >= 12][:300]
    with open(tmp_path / "train.jsonl", "w", encoding="utf-8") as f:
        for i, line in enumerate(lines):
            yes = i % 3 == 1
            f.write(json.dumps({"text": ("yes, " if yes else "no, ") + line, "label": "pos" if yes else "neg"}) + "\n")
    cfg = {"task": "text_classification", "init_from": head,
           "data": {"train": str(tmp_path / "train.jsonl"), "max_length": 16},
           "train": {"max_iters": 150, "batch_size": 16, "learning_rate": 2e-3, "min_lr": 2e-4, "warmup_iters": 5,
                     "lr_decay_iters": 150, "eval_interval": 150, "log_interval": 50, "checkpoint_interval": 0,
                     "weight_decay": 0.01}}
    rows = []
    qkv.train(cfg, out_dir=str(tmp_path / "run"), callback=rows.append)
    assert rows[-1]["val_accuracy"] >= 0.95
    tuned = qkv.load(str(tmp_path / "run" / "model.safetensors"))
    got = tuned.text_classification(["yes, my good lord", "no, my good lord"])
    assert [g["label"] for g in got] == ["pos", "neg"]
    with pytest.raises(qkv.Error, match="needs its labels"):
        qkv.convert(os.path.join(GOLDEN, "bert-uncased"), str(tmp_path / "x.safetensors"), head="sequence")
    with pytest.raises(qkv.Error, match="labels and problem_type are a new head's"):
        qkv.convert(os.path.join(GOLDEN, "bert-uncased"), str(tmp_path / "x.safetensors"), labels=["a"])


def test_a_new_span_head_fine_tuned_from_python(tmp_path):
    # qkv.convert(head="span") puts a new question-answering head on a BertForMaskedLM (as
    # AutoModelForQuestionAnswering.from_pretrained(folder)), qkv.train fine-tunes it on SQuAD's JSON
    # (task question_answering: "who is king?", the name after "king"), and the result answers.
    model = str(tmp_path / "qa.safetensors")
    qkv.convert(os.path.join(GOLDEN, "bert-uncased"), model, head="span")
    names = ["romeo", "juliet", "tybalt", "richard", "henry", "edward"]
    words = ["good", "my", "lord", "sweet", "night", "the", "fair", "noble"]
    paragraphs = []
    for i in range(200):
        before = " ".join(words[(i + 3 * k) % len(words)] for k in range(1 + i % 5))
        name = names[(i * 5 + i // 6) % len(names)]
        context = f"{before} king {name} {words[(i * 7) % len(words)]}"
        qa = {"id": str(i), "question": "who is king?",
              "answers": [{"text": name, "answer_start": len(before) + 6}]}
        paragraphs.append({"context": context, "qas": [qa]})
    with open(tmp_path / "train.json", "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": [{"title": "kings", "paragraphs": paragraphs}]}, f)
    cfg = {"task": "question_answering", "init_from": model,
           "data": {"train": str(tmp_path / "train.json"), "max_length": 24, "doc_stride": 8},
           "train": {"max_iters": 300, "batch_size": 16, "learning_rate": 1e-2, "min_lr": 3e-4, "warmup_iters": 5,
                     "lr_decay_iters": 300, "eval_interval": 300, "log_interval": 100, "checkpoint_interval": 0,
                     "weight_decay": 0.01}}
    rows = []
    qkv.train(cfg, out_dir=str(tmp_path / "run"), callback=rows.append)
    assert rows[-1]["val_exact_match"] >= 90
    tuned = qkv.load(str(tmp_path / "run" / "model.safetensors"))
    got = tuned.question_answering(question="who is king?", context="sweet night and the king edward of the fair lord")
    assert got["answer"] == "edward"
    with pytest.raises(qkv.Error, match="takes no labels"):
        qkv.convert(os.path.join(GOLDEN, "bert-uncased"), str(tmp_path / "x.safetensors"), head="span", labels=["a"])


def test_masked_lm_pretraining_continued_from_python(tmp_path):
    # qkv.train of a "masked_lm" config (run_mlm.py's work) on a converted BertForMaskedLM: the masked
    # tokens' accuracy rises, and the written model fills a mask with what the text taught it.
    model = str(tmp_path / "bert.safetensors")
    qkv.convert(os.path.join(GOLDEN, "bert-uncased"), model)
    sentences = ["romeo loves juliet and juliet loves romeo", "the king of rome is old",
                 "sweet night is the lord of love", "my lord the king is dead"]
    with open(tmp_path / "text.jsonl", "w", encoding="utf-8") as f:
        for i in range(400):
            f.write(json.dumps({"text": sentences[(i * 3) % len(sentences)]}) + "\n")
    cfg = {"task": "masked_lm", "init_from": model, "model": {"dropout": 0.0},
           "data": {"train": str(tmp_path / "text.jsonl"), "max_length": 16, "line_by_line": True},
           "train": {"max_iters": 400, "batch_size": 16, "learning_rate": 3e-3, "min_lr": 3e-4, "warmup_iters": 5,
                     "lr_decay_iters": 400, "eval_interval": 400, "log_interval": 100, "checkpoint_interval": 0,
                     "weight_decay": 0.01}}
    rows = []
    qkv.train(cfg, out_dir=str(tmp_path / "run"), callback=rows.append)
    evals = [r for r in rows if "val_accuracy" in r]
    assert evals[0]["val_accuracy"] < 0.25 and evals[-1]["val_accuracy"] >= 0.6, evals
    assert evals[-1]["val_perplexity"] < 5, evals
    tuned = qkv.load(str(tmp_path / "run" / "model.safetensors"))
    assert tuned.fill_mask("the king of [MASK] is old", top_k=1)[0]["sequence"] == "the king of rome is old"
    # a classifier on the pre-trained encoder, as from_pretrained(run_mlm.py's output, num_labels=2)
    cls = str(tmp_path / "cls.safetensors")
    qkv.convert(str(tmp_path / "run" / "model.safetensors"), cls, head="sequence", labels=["old", "young"])
    got = qkv.load(cls).text_classification("the king is old", top_k=None)
    assert sorted(r["label"] for r in got) == ["old", "young"]


def test_multiple_choice_fine_tuned_from_python(tmp_path):
    # qkv.convert(head="choice") puts a new multiple-choice head on a BertForMaskedLM (as
    # AutoModelForMultipleChoice.from_pretrained(folder)), qkv.train fine-tunes it on SWAG-shaped rows
    # (task multiple_choice, the endings in one list column), and multiple_choice picks the ending.
    model = str(tmp_path / "mc.safetensors")
    qkv.convert(os.path.join(GOLDEN, "bert-uncased"), model, head="choice")
    names = ["romeo", "juliet", "richard", "henry", "edward", "gaunt"]
    with open(tmp_path / "swag.jsonl", "w", encoding="utf-8") as f:
        for i in range(240):
            king = names[(i * 5 + i // 6) % len(names)]
            endings = []
            for k in range(3):
                other = names[(i * 5 + i // 6 + k + 1) % len(names)]
                endings.append((king if k == i % 3 else "nobody" if other == king else other) + " rules")
            f.write(json.dumps({"sent1": f"good night the king is {king}", "sent2": "now", "choices": endings,
                                "label": i % 3}) + "\n")
    cfg = {"task": "multiple_choice", "init_from": model, "model": {"dropout": 0.0},
           "data": {"train": str(tmp_path / "swag.jsonl"), "max_length": 24, "endings": "choices"},
           "train": {"max_iters": 300, "batch_size": 8, "learning_rate": 3e-3, "min_lr": 3e-4, "warmup_iters": 5,
                     "lr_decay_iters": 300, "eval_interval": 300, "log_interval": 100, "checkpoint_interval": 0,
                     "weight_decay": 0.01}}
    rows = []
    qkv.train(cfg, out_dir=str(tmp_path / "run"), callback=rows.append)
    assert rows[-1]["val_accuracy"] >= 0.9, rows[-1]
    tuned = qkv.load(str(tmp_path / "run" / "model.safetensors"))
    got = tuned.multiple_choice("good night the king is henry", ["gaunt rules", "henry rules"], header="now")
    assert [g["ending"] for g in got] == ["gaunt rules", "henry rules"]
    assert got[1]["score"] > got[0]["score"] and abs(got[0]["score"] + got[1]["score"] - 1) < 1e-9
    with pytest.raises(qkv.Error, match="no multiple-choice head"):
        qkv.load(os.path.join(GOLDEN, "bert-uncased")).multiple_choice("a", ["b", "c"])
    with pytest.raises(qkv.Error, match="takes no labels"):
        qkv.convert(os.path.join(GOLDEN, "bert-uncased"), str(tmp_path / "x.safetensors"), head="choice", labels=["a"])


def test_export_hf_writes_the_folder_back(tmp_path):
    # a converted model (here GPT-2, its Conv1D weights transposed both ways) written back as the folder
    # save_pretrained would write: converting that folder again gives the same generations, and the
    # export refuses a folder with files in it unless force=True
    model = str(tmp_path / "gpt2.safetensors")
    qkv.convert(os.path.join(GOLDEN, "gpt2"), model)
    folder = str(tmp_path / "gpt2-hf")
    files = qkv.export_hf(model, folder)
    assert files[:2] == ["config.json", "model.safetensors"] and "tokenizer.json" in files
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["architectures"] == ["GPT2LMHeadModel"]
    again = str(tmp_path / "again.safetensors")
    qkv.convert(folder, again)
    ref = reference("gpt2")
    assert qkv.LanguageModel(again).generate(ref["text_prompt"], max_new_tokens=20, temperature=0) == ref["text_greedy"]
    with pytest.raises(qkv.Error, match="not empty"):
        qkv.export_hf(model, folder)
    sharded = qkv.export_hf(model, folder, dtype="bf16", max_shard_size="100KB", force=True)
    assert "model.safetensors" not in sharded and any(f.startswith("model-00001-of-") for f in sharded)
    assert os.path.exists(os.path.join(folder, "model.safetensors.index.json"))
    with pytest.raises(qkv.Error, match="max_shard_size"):
        qkv.export_hf(model, str(tmp_path / "x"), max_shard_size="lots")


def test_export_hf_takes_a_language_model_qkv_trained(tmp_path):
    # the shipped character GPT (qkv train's nanoGPT) as GPT2LMHeadModel with a character tokenizer.json:
    # qkv.load of the folder (converted back through GPT-2's conversion) continues a prompt as the file does
    model = os.path.join(ROOT, "models", "shakespeare-char.safetensors")
    folder = str(tmp_path / "shakespeare-gpt2")
    files = qkv.export_hf(model, folder)
    assert files == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["activation_function"] == "gelu"
    mine = qkv.LanguageModel(model).generate("ROMEO:", max_new_tokens=40, temperature=0)
    back = qkv.load(folder)
    assert back.generate("ROMEO:", max_new_tokens=40, temperature=0) == mine
    with pytest.raises(qkv.Error, match="no Hugging Face class qkv writes"):
        qkv.export_hf(os.path.join(ROOT, "models", "en-fr.safetensors"), str(tmp_path / "x"))
