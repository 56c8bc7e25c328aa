#!/usr/bin/env python3
"""qkv's chat templates (text/chat_template.h, its own Jinja interpreter in C++) beside transformers'
apply_chat_template (jinja2 compiled to Python), from Python, on the same template and conversations.

The template: tests/golden/hf-chat's ChatML-with-tools one (chat_template.jinja), the tokenizer: that
folder's; qkv reads them through a converted model (the golden Qwen2 folder with the template beside
it, converted with qkv.convert into a temporary folder). The conversations: hf-chat/reference.json's,
and the same conversation grown to 64 turns. Each side renders (tokenize=False) and renders then
encodes (tokenize=True) every conversation --calls times; the median of --rounds rounds, alternated
(qkv, transformers, qkv, …), is printed as µs a call and the ratio. The texts must be equal.

  pip install transformers jinja2
  PYTHONPATH=build/python/stage python3 bench/chat_template_vs_transformers.py [--calls 2000] [--rounds 5]
"""
import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHAT = os.path.join(ROOT, "tests", "golden", "hf-chat")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import qkv
    import transformers

    tmp = tempfile.mkdtemp(prefix="qkv-chat-bench-")
    try:
        folder = os.path.join(tmp, "qwen2-chat")
        shutil.copytree(os.path.join(ROOT, "tests", "golden", "hf", "qwen2"), folder)
        shutil.copy(os.path.join(CHAT, "chat_template.jinja"), folder)
        qkv.convert(folder, os.path.join(tmp, "m.safetensors"))
        lm = qkv.LanguageModel(os.path.join(tmp, "m.safetensors"))
        hf = transformers.AutoTokenizer.from_pretrained(CHAT)
        with open(os.path.join(CHAT, "reference.json"), encoding="utf-8") as f:
            cases = json.load(f)["cases"]
        long = dict(cases[1])  # system + user + assistant + user, grown to 64 turns
        long["messages"] = (cases[1]["messages"][:1] + cases[1]["messages"][1:3] * 32)[:64] + cases[1]["messages"][-1:]
        long["name"] = "64-turns"
        cases = cases + [long]
        print(f"transformers {transformers.__version__}; {args.calls} calls a round, median of {args.rounds} rounds")
        print(f"{'conversation':<28}{'mode':<10}{'qkv µs':>10}{'transformers µs':>17}{'ratio':>8}")
        for c in cases:
            kw = dict(tools=c["tools"], add_generation_prompt=c["add_generation_prompt"])
            want = hf.apply_chat_template(c["messages"], tokenize=False, **kw)
            assert lm.apply_chat_template(c["messages"], **kw) == want, c["name"]
            for tokenize in (False, True):
                def q():
                    for _ in range(args.calls):
                        lm.apply_chat_template(c["messages"], tokenize=tokenize, **kw)

                def t():
                    for _ in range(args.calls):
                        hf.apply_chat_template(c["messages"], tokenize=tokenize, **kw)
                times = {"qkv": [], "hf": []}
                for _ in range(args.rounds):
                    for name, fn in (("qkv", q), ("hf", t)):
                        t0 = time.perf_counter()
                        fn()
                        times[name].append((time.perf_counter() - t0) / args.calls * 1e6)
                a, b = statistics.median(times["qkv"]), statistics.median(times["hf"])
                print(f"{c['name']:<28}{'ids' if tokenize else 'text':<10}{a:>10.1f}{b:>17.1f}{b / a:>7.2f}×")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
