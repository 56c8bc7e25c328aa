"""Model files and jobs from Python give what the command line gives: translation (with attention),
generation (streamed too), classification, loading any kind, and training from a config."""
import gzip
import json
import struct
import os
import subprocess
import sys

import numpy as np
import pytest

import qkv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "build", "qkv")
MODELS = os.path.join(ROOT, "models")
FASHION = "/usr/share/datasets/fashion-mnist"


def cli(*args):
    if not os.path.exists(CLI):
        pytest.fail(f"{CLI} is missing: build qkv first (scripts/build.sh)")
    return subprocess.run([CLI, *args], check=True, capture_output=True, text=True, cwd=ROOT).stdout


SENTENCES = ["I think it is going to rain tomorrow.", "The cat sat on the mat.", "", "Where is the station?"]


@pytest.mark.parametrize("model", ["en-fr.safetensors", "en-fr-gru.safetensors"])
def test_translator_equals_the_cli(model, tmp_path):
    path = os.path.join(MODELS, model)
    t = qkv.Translator(path)
    mine = [r.hypotheses[0] for r in t.translate_batch(SENTENCES, beam_size=4)]
    src = tmp_path / "src.txt"
    src.write_text("\n".join(SENTENCES) + "\n")
    theirs = cli("translate", "-m", path, "-i", str(src), "--beam", "4").splitlines()
    assert mine == theirs
    assert t.translate(SENTENCES[0]) == theirs[0] and t.translate(SENTENCES[:2]) == theirs[:2]


def test_int8_file_translates_as_the_f32_file_with_int8_weights(tmp_path):
    """qkv quantize's file, loaded with weights="int8", gives what the f32 file gives with int8
    weights (its rows are those); its f32 values are not there, and asking for them says so."""
    path = os.path.join(MODELS, "en-fr.safetensors")
    int8 = str(tmp_path / "en-fr.int8.safetensors")
    cli("quantize", path, "-o", int8, "--dtype", "f16")
    a = qkv.Translator(path, weights="int8").translate_batch(SENTENCES, beam_size=4)
    b = qkv.Translator(int8, weights="int8").translate_batch(SENTENCES, beam_size=4)
    if qkv._qkv._int8_activation_bits() == 8:  # VNNI or AMX: the encoder on the int8 rows in both
        assert [r.hypotheses[0] for r in b] == [r.hypotheses[0] for r in a]
        assert [r.scores[0] for r in b] == [r.scores[0] for r in a]
    else:
        # 7-bit activations: the f32 file's encoder keeps its f32 products (Seq2SeqTransformer::
        # set_inference_weights), the int8 file's has its rows' values s[n]·W8[n, k] alone — other
        # numbers (on a Zen 3, "Où se trouve la gare ?" for "Où est la gare ?"), as close as the rows
        assert all(abs(x.scores[0] - y.scores[0]) < 0.1 for x, y in zip(a, b))
        assert [bool(r.hypotheses[0]) for r in b] == [bool(r.hypotheses[0]) for r in a]
    assert qkv.Translator(int8, weights="f32").translate(SENTENCES[1])  # f32 weights: s[n]·W8[n, k]
    # the other branch too, whichever this CPU takes: 7-bit activations asked for in a fresh process
    script = f"""
import qkv
assert qkv._qkv._int8_activation_bits() == 7
a = qkv.Translator({path!r}, weights="int8").translate_batch({SENTENCES!r}, beam_size=4)
b = qkv.Translator({int8!r}, weights="int8").translate_batch({SENTENCES!r}, beam_size=4)
assert all(abs(x.scores[0] - y.scores[0]) < 0.1 for x, y in zip(a, b)), [(x.scores[0], y.scores[0]) for x, y in zip(a, b)]
assert [bool(r.hypotheses[0]) for r in b] == [bool(r.hypotheses[0]) for r in a]
"""
    env = dict(os.environ, QKV_INT8_ACTIVATION_BITS="7")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    # without weights= ("auto"), the file's own: int8 for a quantized file
    assert qkv.Translator(int8).translate(SENTENCES) == [r.hypotheses[0] for r in b]


def test_translator_n_best_scores_and_attention():
    t = qkv.Translator(os.path.join(MODELS, "en-fr.safetensors"))
    (r,) = t.translate_batch(["The cat sat on the mat."], beam_size=4, num_hypotheses=3, return_attention=True)
    assert len(r.hypotheses) == 3 and r.scores == sorted(r.scores, reverse=True)
    assert r.attention.shape == (len(r.target_tokens), len(r.source_tokens))
    np.testing.assert_allclose(r.attention.sum(axis=1), 1.0, rtol=1e-5)
    assert r.source_tokens[-1] == "</s>" and r.target_tokens[-1] == "</s>"
    heads = r.cross_attention[-1]
    np.testing.assert_allclose(heads.mean(axis=0), r.attention, rtol=1e-5, atol=1e-7)
    with pytest.raises(qkv.Error, match="num_hypotheses"):
        t.translate_batch(["x"], beam_size=2, num_hypotheses=3)


def test_models_load_onto_the_device_named_as_ctranslate2_names_it():
    path = os.path.join(MODELS, "en-fr.safetensors")
    lm_path = os.path.join(MODELS, "shakespeare-char.safetensors")
    on_cpu = qkv.Translator(path, device="cpu").translate(SENTENCES[:2])
    assert on_cpu == qkv.Translator(path).translate(SENTENCES[:2])
    with pytest.raises(qkv.Error, match="tpu"):
        qkv.Translator(path, device="tpu")
    if not qkv.cuda.is_available():
        for make in (lambda: qkv.Translator(path, device="cuda"),
                     lambda: qkv.LanguageModel(lm_path, weights="bf16", device="cuda:0")):
            with pytest.raises(qkv.Error, match="cannot decode on cuda:0"):
                make()
        return
    # on a GPU, bf16 weights (the linears on the tensor cores): the CPU's f32 translations, but for
    # a near tie that bf16 may tip
    on_gpu = qkv.Translator(path, weights="bf16", device="cuda")
    lines = SENTENCES + ["The cat didn't cross the street because it was too tired.", "I like tea."]
    same = sum(a == b for a, b in zip(on_gpu.translate(lines), qkv.Translator(path).translate(lines)))
    assert same >= len(lines) - 1
    (r,) = on_gpu.translate_batch(SENTENCES[:1], return_attention=True)
    np.testing.assert_allclose(r.attention.sum(axis=1), 1.0, rtol=1e-5)
    with pytest.raises(qkv.Error, match="int8 weights are read by the CPU's kernels only"):
        qkv.LanguageModel(lm_path, weights="int8", device="cuda")


def test_generate_equals_the_cli_and_streams_the_same_text():
    path = os.path.join(MODELS, "shakespeare-char.safetensors")
    lm = qkv.LanguageModel(path)
    text = lm.generate("ROMEO:", max_new_tokens=60, seed=7)
    assert cli("generate", "-m", path, "-p", "ROMEO:", "-n", "60", "-s", "7") == "ROMEO:" + text + "\n"
    pieces = list(lm.generate("ROMEO:", max_new_tokens=60, seed=7, stream=True))
    assert len(pieces) == 60 and "".join(pieces) == text
    stream = lm.generate("ROMEO:", max_new_tokens=10_000, stream=True)
    next(stream)
    del stream  # dropping a stream stops its worker
    with pytest.raises(qkv.Error, match="prompt is empty"):
        lm.generate("")
    # the history's penalties, as the CLI has them
    args = dict(top_k=20, top_p=0.9, repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.5)
    penalized = lm.generate("ROMEO:", max_new_tokens=60, seed=7, **args)
    assert penalized != text
    assert cli("generate", "-m", path, "-p", "ROMEO:", "-n", "60", "-s", "7", "--top-k", "20", "--top-p", "0.9",
               "--repetition-penalty", "1.3", "--frequency-penalty", "0.4", "--presence-penalty", "0.5") == \
        "ROMEO:" + penalized + "\n"
    assert lm.generate_batch(["ROMEO:"], max_new_tokens=60, seed=7, **args) == [penalized]
    with pytest.raises(qkv.Error, match="repetition_penalty must be in"):
        lm.generate("ROMEO:", repetition_penalty=0)


def test_generations_together_give_each_its_text_alone():
    # generate_batch and generate from several threads at once run together (continuous batching);
    # each text is the one generate gives alone
    import threading
    path = os.path.join(MODELS, "shakespeare-char.safetensors")
    lm = qkv.LanguageModel(path)
    prompts = ["ROMEO:", "JULIET:", "KING:", "O", "First Citizen:"]
    alone = [qkv.LanguageModel(path).generate(p, max_new_tokens=90, seed=3, use_cache=False) for p in prompts]
    assert lm.generate_batch(prompts, max_new_tokens=90, seed=3) == alone
    got = [None] * len(prompts)

    def run(i):
        got[i] = lm.generate(prompts[i], max_new_tokens=90, seed=3)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == alone
    assert lm.generate_batch([], max_new_tokens=5) == []
    with pytest.raises(qkv.Error, match=r"prompts\[1\]: .*prompt is empty"):
        lm.generate_batch(["ROMEO:", ""])


def fashion_test_images(n):
    with gzip.open(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")) as f:
        data = f.read()
    return np.frombuffer(data, dtype=np.uint8, offset=16)[: n * 784].reshape(n, 28, 28)


def test_classifier_equals_the_cli():
    path = os.path.join(MODELS, "fashion-mnist-nonlocal.safetensors")
    c = qkv.load(path)
    assert isinstance(c, qkv.ImageClassifier) and len(c.classes) == 10
    names, probs = c.classify(fashion_test_images(4))
    rows = [json.loads(line) for line in cli("classify", "-m", path, "--test-images", "0,1,2,3", "--json").splitlines()]
    assert names == [r["top"][0]["class"] for r in rows]
    np.testing.assert_allclose(probs.max(axis=1), [r["top"][0]["probability"] for r in rows], rtol=1e-5)
    with pytest.raises(qkv.Error, match="28×28"):
        c.classify(np.zeros((2, 32, 32), dtype=np.uint8))


def test_classifier_scores_equal_qkv_eval(tmp_path):
    path = os.path.join(MODELS, "fashion-mnist-nonlocal.safetensors")
    c = qkv.ImageClassifier(path)
    with gzip.open(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)[:300]
    images = fashion_test_images(300)
    s = c.evaluate(images, [int(v) for v in labels], batch_size=128)
    confusion = np.array(s["confusion"])
    assert confusion.shape == (10, 10) and confusion.sum() == 300 == s["images"]
    assert s["accuracy"] == pytest.approx(np.trace(confusion) / 300)
    assert s["predictions"] == [c.classes.index(n) for n in c.classify(images)[0]]
    # the same 300 pictures and labels through `qkv eval`, as IDX files
    (tmp_path / "images").write_bytes(struct.pack(">IIII", 0x803, 300, 28, 28) + images.tobytes())
    (tmp_path / "labels").write_bytes(struct.pack(">II", 0x801, 300) + labels.tobytes())
    want = json.loads(cli("eval", "-m", path, "--images", str(tmp_path / "images"), "--labels", str(tmp_path / "labels"),
                          "--json"))
    assert want["confusion"] == confusion.reshape(-1).tolist()
    assert s["accuracy"] == want["accuracy"] and s["loss"] == pytest.approx(want["loss"], rel=1e-6)
    assert s["per_class_accuracy"] == [k["accuracy"] for k in want["per_class"]]
    with pytest.raises(qkv.Error, match="300 images but 2 labels"):
        c.evaluate(fashion_test_images(300), [0, 1])
    with pytest.raises(qkv.Error, match="labelled 10"):
        c.evaluate(fashion_test_images(1), [10])


def test_perplexity_equals_qkv_eval(tmp_path):
    path = os.path.join(MODELS, "shakespeare-char.safetensors")
    lm = qkv.LanguageModel(path)
    text = "ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n" * 3
    (tmp_path / "t.txt").write_text(text)
    want = json.loads(cli("eval", "-m", path, "--text", str(tmp_path / "t.txt"), "--block-size", "64", "--json"))
    got = lm.perplexity(text, block_size=64)
    assert got["tokens"] == want["tokens"] == len(text) - 1 and got["block_size"] == 64
    assert got["perplexity"] == pytest.approx(want["perplexity"], rel=1e-6)
    with pytest.raises(qkv.Error, match="at least 2"):
        lm.perplexity("a")
    with pytest.raises(qkv.Error, match="block_size"):
        lm.perplexity(text, block_size=10**6)


def test_load_knows_every_kind_and_names_bad_files(tmp_path):
    assert isinstance(qkv.load(os.path.join(MODELS, "en-fr.safetensors")), qkv.Translator)
    assert isinstance(qkv.load(os.path.join(MODELS, "shakespeare-char.safetensors")), qkv.LanguageModel)
    assert isinstance(qkv.load(os.path.join(MODELS, "captioner.safetensors")), qkv.ImageCaptioner)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(qkv.Error, match="bad.safetensors"):
        qkv.load(str(bad))
    with pytest.raises(qkv.Error, match="missing.safetensors"):
        qkv.Translator(str(tmp_path / "missing.safetensors"))
    with pytest.raises(qkv.Error):
        qkv.Translator(os.path.join(MODELS, "shakespeare-char.safetensors"))  # a language model is no translator


def test_captioner_returns_words_and_attention():
    cap = qkv.ImageCaptioner(os.path.join(MODELS, "captioner.safetensors"))
    c, h, w = cap.image_shape
    pictures = np.random.default_rng(0).random((2, c, h, w), dtype=np.float32)
    texts = cap.caption(pictures)
    out = cap.caption(pictures, return_attention=True)
    assert [d["caption"] for d in out] == texts
    for d in out:
        steps = d["attention"].shape[0]
        assert steps in (len(d["words"]), len(d["words"]) + 1)  # + the </s> step when it ended with one
        np.testing.assert_allclose(d["attention"].reshape(steps, -1).sum(axis=1), 1.0, rtol=1e-4)
    with pytest.raises(qkv.Error, match="ImageCaptioner.caption"):
        cap.caption(np.zeros((1, c, h + 1, w), dtype=np.float32))


def tiny_lm_config():
    with open(os.path.join(ROOT, "configs", "shakespeare-char.json")) as f:
        cfg = json.load(f)
    cfg["model"].update(n_layer=1, n_head=2, n_embd=32, block_size=32)
    cfg["train"].update(max_iters=12, batch_size=4, warmup_iters=2, lr_decay_iters=12, eval_interval=6, eval_iters=2,
                        log_interval=3, checkpoint_interval=0)
    return cfg


def test_train_from_python_reproduces_the_cli(tmp_path):
    cfg = tiny_lm_config()
    config_file = tmp_path / "tiny.json"
    config_file.write_text(json.dumps(cfg))
    rows = []
    result = qkv.train(cfg, out_dir=str(tmp_path / "py"), base_dir=os.path.join(ROOT, "configs"), callback=rows.append)
    assert result["steps"] == 12 and not result["interrupted"] and os.path.exists(result["model"])
    # the CLI reads the same config from a file next to nothing: its data path is made absolute
    cfg_cli = dict(cfg, data=dict(cfg["data"], path=os.path.join(ROOT, "data", "tinyshakespeare", "input.txt")))
    config_file.write_text(json.dumps(cfg_cli))
    cli("train", str(config_file), "-q", "-o", str(tmp_path / "cli"))
    with open(tmp_path / "cli" / "metrics.jsonl") as f:
        cli_rows = [json.loads(line) for line in f]
    losses = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    cli_losses = [(r["step"], r["loss"]) for r in cli_rows if "loss" in r]
    assert losses == cli_losses and len(losses) >= 4
    assert [r["val_loss"] for r in rows if "val_loss" in r] == [r["val_loss"] for r in cli_rows if "val_loss" in r]


def test_train_callback_stops_and_raises(tmp_path):
    cfg = tiny_lm_config()
    result = qkv.train(cfg, out_dir=str(tmp_path / "stop"), base_dir=os.path.join(ROOT, "configs"),
                       callback=lambda row: row["step"] < 3)
    assert result["interrupted"] and result["steps"] <= 6

    def boom(row):
        raise ValueError("from the callback")
    with pytest.raises(ValueError, match="from the callback"):
        qkv.train(cfg, out_dir=str(tmp_path / "boom"), base_dir=os.path.join(ROOT, "configs"), callback=boom)
    with pytest.raises(qkv.Error, match="unknown \"task\""):
        qkv.train(dict(cfg, task="poetry"), out_dir=str(tmp_path / "x"))


def test_translate_names_a_wrong_argument_instead_of_bad_cast():
    t = qkv.Translator(os.path.join(MODELS, "en-fr.safetensors"))
    with pytest.raises(TypeError, match="translate: text must be a str or a list of str, not int"):
        t.translate(5)
    with pytest.raises(TypeError, match="each sentence of text must be a str, not int"):
        t.translate(["fine", 5])
    with pytest.raises(ValueError, match=r"translate: text is not valid Unicode: .*surrogate"):
        t.translate("\ud800")
