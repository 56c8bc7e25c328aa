#!/usr/bin/env python3
"""Extractive question answering with a BERT-base-sized …ForQuestionAnswering: qkv's
MaskedLanguageModel.question_answering against transformers' pipeline("question-answering") on the
same folder — questions answered a second, with each engine's peak RSS.

    pip install torch transformers                                        # transformers 5 builds the model
    python3 -m venv --system-site-packages /tmp/tf4venv && /tmp/tf4venv/bin/pip install transformers==4.57.6
                                                        # the peer: transformers 5 dropped the pipeline
    PYTHONPATH=build/python/stage python3 bench/encoders_vs_peers.py --rounds 1     # the BERT-base folder, once
    PYTHONPATH=build/python/stage python3 bench/qa_vs_pipeline.py [--peer-python /tmp/tf4venv/bin/python]
                                                                   [--threads 2] [--rounds 3] [--questions 32]

The model is encoders_vs_peers.py's random BERT-base (12 layers, d 768, 12 heads, FFN 3072, its
30,522-entry WordPiece vocabulary trained on Tatoeba) with a random qa_outputs head
(BertForQuestionAnswering, saved by transformers 5). Each question is a Tatoeba sentence; its
context --sentences Tatoeba sentences after it (default 12: ~150 words, one 384-token window; --sentences
60 makes ~750 words, 3–4 windows of stride 128). Tokenization included; each engine in a fresh process,
rounds alternating engines, medians reported. Engines:
  qkv, qkv-int8      question_answering(questions, contexts, batch_size=32): the windows of all the
                     questions, 32 a forward, longest first
  pipeline           transformers 4.57's pipeline("question-answering")(question=…, context=…), its
                     default: one window a forward
  pipeline-batch32   the same with batch_size=32
The answers are checked against the pipeline's (the same text and start; the largest score difference).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from encoders_vs_peers import texts  # noqa: E402 (the same Tatoeba sentences)


def build(src, out):
    """The question-answering folder (BERT-base's weights, a random qa_outputs) and its qkv files, once."""
    if os.path.exists(os.path.join(out, "done")):
        return
    if not os.path.exists(os.path.join(src, "bert-model", "config.json")):
        sys.exit(f"{src}/bert-model is missing: run bench/encoders_vs_peers.py first")
    import torch
    import transformers
    torch.manual_seed(0)
    folder = os.path.join(out, "qa")
    shutil.rmtree(folder, ignore_errors=True)
    config = transformers.BertConfig.from_pretrained(os.path.join(src, "bert-model"))
    config.id2label, config.label2id = {0: "LABEL_0", 1: "LABEL_1"}, {"LABEL_0": 0, "LABEL_1": 1}  # (start, end)
    model = transformers.BertForQuestionAnswering.from_pretrained(os.path.join(src, "bert-model"), config=config).eval()
    with torch.no_grad():
        model.qa_outputs.weight.normal_(0, 0.2)
    model.save_pretrained(folder, safe_serialization=True)
    shutil.copy(os.path.join(src, "bert-model", "tokenizer.json"), folder)
    # a BERT checkpoint's tokenizer_config (its class hands the model token types, as SQuAD BERTs')
    c = json.load(open(os.path.join(src, "bert-model", "tokenizer_config.json")))
    c["tokenizer_class"] = "BertTokenizer"
    json.dump(c, open(os.path.join(folder, "tokenizer_config.json"), "w"), indent=2)
    import qkv
    qkv.convert(folder, os.path.join(out, "qa.safetensors"))
    open(os.path.join(out, "done"), "w").close()


def pairs(n, sentences):
    lines = texts(n * (sentences + 1))
    step = sentences + 1
    return [lines[i * step] for i in range(n)], [" ".join(lines[i * step + 1:(i + 1) * step]) for i in range(n)]


def run_one(engine, out, n, sentences, threads):
    """One engine in this process: (questions / s, [[answer, start, score] per question])."""
    questions, contexts = pairs(n, sentences)
    if engine.startswith("pipeline"):
        import torch
        import transformers
        assert transformers.__version__.startswith("4."), "the peer needs transformers 4.x (--peer-python)"
        torch.set_num_threads(threads)
        folder = os.path.join(out, "qa")
        # (the folder's tokenizer.json as it is: BertTokenizerFast would impose its do_lower_case)
        tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"), model_max_length=512,
                                                   cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                                                   unk_token="[UNK]", mask_token="[MASK]")
        model = transformers.BertForQuestionAnswering.from_pretrained(folder).eval()
        pipe = transformers.pipeline("question-answering", model=model, tokenizer=tok, device="cpu")
        kwargs = {"batch_size": 32} if engine.endswith("batch32") else {}

        def work():
            with torch.inference_mode():
                return pipe(question=questions, context=contexts, **kwargs)
    else:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import qkv
        model = qkv.MaskedLanguageModel(os.path.join(out, "qa.safetensors"),
                                        weights="int8" if engine.endswith("int8") else "f32")
        qkv.set_num_threads(threads)

        def work():
            return model.question_answering(questions, contexts, batch_size=32)
    work()  # warm-up (one pass)
    t0 = time.perf_counter()
    res = work()
    rate = len(questions) / (time.perf_counter() - t0)
    return rate, [[r["answer"], r["start"], r["score"]] for r in res]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default="/tmp/qkv-encoder-bench", help="encoders_vs_peers.py's --out")
    ap.add_argument("--out", default="/tmp/qkv-qa-bench")
    ap.add_argument("--peer-python", default="/tmp/tf4venv/bin/python", help="a Python with transformers 4.x")
    ap.add_argument("--questions", type=int, default=32)
    ap.add_argument("--sentences", type=int, default=12, help="Tatoeba sentences a context")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # ENGINE: a child process
    args = ap.parse_args()
    if args.one:
        import resource
        rate, answers = run_one(args.one, args.out, args.questions, args.sentences, args.threads)
        json.dump(answers, open(os.path.join(args.out, f"out-{args.one}.json"), "w"))
        print(json.dumps({"rate": rate, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    os.makedirs(args.out, exist_ok=True)
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                    f"import qa_vs_pipeline as q; q.build({args.src!r}, {args.out!r})"], check=True)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(args.threads))
    engines = ["qkv", "qkv-int8", "pipeline", "pipeline-batch32"]
    got = {e: [] for e in engines}
    print(f"{args.questions} questions, contexts of {args.sentences} sentences, {args.threads} threads, "
          f"{args.rounds} rounds (medians)")
    for _ in range(args.rounds):
        for e in engines:
            python = args.peer_python if e.startswith("pipeline") else sys.executable
            p = subprocess.run([python, __file__, "--out", args.out, "--questions", str(args.questions), "--sentences",
                                str(args.sentences), "--threads", str(args.threads), "--one", e],
                               capture_output=True, text=True, env=env)
            if p.returncode != 0:
                sys.exit(f"{e} failed:\n{p.stderr[-2000:]}")
            got[e].append(json.loads(p.stdout.strip().splitlines()[-1]))
    ref = json.load(open(os.path.join(args.out, "out-pipeline.json")))
    base = statistics.median(r["rate"] for r in got["pipeline"])
    for e in engines:
        rate = statistics.median(r["rate"] for r in got[e])
        rss = statistics.median(r["rss_mib"] for r in got[e])
        o = json.load(open(os.path.join(args.out, f"out-{e}.json")))
        same = sum(a[0] == b[0] and a[1] == b[1] for a, b in zip(o, ref))
        diff = max(abs(a[2] - b[2]) / max(b[2], 1e-12) for a, b in zip(o, ref))
        print(f"{e:17s} {rate:7.2f} questions/s  ×{rate / base:6.2f} pipeline  peak RSS {rss:6.0f} MiB  "
              f"same answer {same}/{len(ref)}  max relative |Δ score| {diff:.1e}")


if __name__ == "__main__":
    main()
