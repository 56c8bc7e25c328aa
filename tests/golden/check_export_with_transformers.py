"""`qkv export --to hf` checked by transformers itself (pyenv python3 with torch and transformers; not
in CI, which has neither — tests/models/hf_export_test.cpp checks the exports against the golden folders
that save_pretrained wrote there).

For every golden folder (tests/golden/hf/*): `qkv convert` then `qkv export --to hf`, and transformers'
from_pretrained of the export computes what from_pretrained of the folder computes (the same outputs,
bit for bit, on random ids), and its AutoTokenizer encodes as the folder's. Then the way a user takes it:
a new head on an encoder (`convert --head sequence`), its weights moved as training moves them, exported — and pipeline("text-classification") of the export gives the scores
`qkv classify-text` gives.

    USE_HUB_KERNELS=0 PYTHONPATH=build/python/stage python3 tests/golden/check_export_with_transformers.py --qkv build/qkv
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "hf"


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))}: {r.stderr}")
    return r.stdout


def outputs(model, config, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, min(config.get_text_config().vocab_size, 200), (2, 12), generator=g)
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    arch = config.architectures[0]
    if arch.startswith("Marian"):
        kwargs["decoder_input_ids"] = ids[:, :5]
    if "MultipleChoice" in arch:
        kwargs = {k: v.unsqueeze(0) for k, v in kwargs.items()}
    with torch.no_grad():
        out = model(**kwargs)
    return [t for t in out.values() if isinstance(t, torch.Tensor)]


# Language models qkv trains (`qkv train`, the lm task), a few steps each: exported, transformers'
# AutoModelForCausalLM computes qkv's loss on a Shakespeare passage, generates qkv's greedy text, and
# AutoTokenizer cuts and spells the passage as qkv's tokenizer does.
NATIVE = {
    "gpt-char": ({"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 64, "bias": False}, "char"),
    "gpt-unigram": ({"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 64, "bias": True,
                     "activation": "gelu_tanh"}, {"type": "sentencepiece", "vocab_size": 400}),
    "gpt-bpe": ({"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 64},
                {"type": "sentencepiece", "vocab_size": 400, "model_type": "bpe"}),
    "llama": ({"type": "llama", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}, "char"),
    "qwen3": ({"type": "llama", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
               "qk_norm": True, "tie_word_embeddings": True}, "char"),
    "qwen2-like": ({"type": "llama", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
               "num_attention_heads": 4, "max_position_embeddings": 64, "qkv_bias": True}, "char"),
    "mistral": ({"type": "llama", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "max_position_embeddings": 64, "sliding_window": 16}, "char"),
}


def check_native(qkv_cli, tmp):
    import qkv as qkv_module  # build/python/stage on PYTHONPATH
    shakespeare = (ROOT / "data" / "tinyshakespeare" / "input.txt").read_text()
    passage = shakespeare[1000:1200]
    failed = 0
    for name, (model, tokenizer) in NATIVE.items():
        name = f"native-{name}"  # (apart from the golden folders' exports in the same directory)
        config = {"task": "lm", "data": {"path": str(ROOT / "data" / "tinyshakespeare" / "input.txt"),
                                         "val_fraction": 0.1, "tokenizer": tokenizer},
                  "model": model,
                  "train": {"max_iters": 60, "batch_size": 8, "learning_rate": 3e-3, "eval_interval": 60,
                            "eval_iters": 2, "log_interval": 60}}
        (tmp / f"{name}.json").write_text(json.dumps(config))
        run(qkv_cli, "train", tmp / f"{name}.json", "-o", tmp / name)
        out = tmp / f"{name}-hf"
        run(qkv_cli, "export", "--to", "hf", tmp / name / "model.safetensors", out)
        lm = qkv_module.LanguageModel(str(tmp / name / "model.safetensors"))
        tok = transformers.AutoTokenizer.from_pretrained(out)
        hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        ids = tok(passage)["input_ids"]
        spelled = tok.decode(ids) == passage
        # qkv's perplexity over one window of 64 tokens (63 predicted), transformers' loss over the same
        window = tok.decode(ids[:64])
        block = lm.perplexity(window, block_size=63)
        with torch.no_grad():
            x = torch.tensor([ids[:64]])
            loss = hf(x, labels=x).loss.item()
        prompt = passage[:20]
        mine = lm.generate(prompt, max_new_tokens=30, temperature=0.0)
        with torch.no_grad():
            g = hf.generate(**tok(prompt, return_tensors="pt"), max_new_tokens=30, do_sample=False)
        theirs = tok.decode(g[0], skip_special_tokens=True)
        ok = spelled and block["tokens"] == 63 and abs(block["loss"] - loss) < 1e-5 * max(1.0, abs(loss))
        ok = ok and mine in (theirs, theirs[len(prompt):])
        failed += not ok
        print(f"{name:24s} {hf.config.architectures[0]:40s} loss qkv {block['loss']:.6f} transformers {loss:.6f}"
              f" ({block['tokens']} predicted); greedy {'equal' if mine in (theirs, theirs[len(prompt):]) else 'DIFFERS'};"
              f" spelled {'equal' if spelled else 'DIFFERS'}")
    return failed


def model_class(arch):
    return getattr(transformers, arch)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qkv", default=str(ROOT / "build" / "qkv"))
    p.add_argument("--native-only", action="store_true", help="only the language models qkv trained")
    args = p.parse_args()
    transformers.logging.set_verbosity_error()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for folder in [] if args.native_only else sorted(GOLDEN.iterdir()):
            if not (folder / "config.json").exists() or folder.name == "gemma3-multimodal":
                continue
            model_file, out = tmp / f"{folder.name}.safetensors", tmp / f"{folder.name}-hf"
            run(args.qkv, "convert", folder, "-o", model_file)
            run(args.qkv, "export", "--to", "hf", model_file, out)
            config = transformers.AutoConfig.from_pretrained(folder)
            cls = model_class(config.architectures[0])
            a = cls.from_pretrained(folder, dtype=torch.float32).eval()
            b = cls.from_pretrained(out, dtype=torch.float32).eval()
            xs, ys = outputs(a, a.config), outputs(b, b.config)
            # a bare encoder's pooler (BertModel's pooler.dense), which qkv does not read, is not written:
            # transformers draws it anew, so of a …Model's outputs the hidden states are compared
            bare = config.architectures[0].endswith("Model") and hasattr(a, "pooler") and a.pooler is not None
            same = all(torch.equal(x, y) for x, y in zip(xs[:1] if bare else xs, ys[:1] if bare else ys))
            text = "The cat sat on the mat because it was tired. Ça va? 😀"
            tok_same = None
            if (folder / "tokenizer.json").exists() or (folder / "vocab.json").exists():
                ta = transformers.AutoTokenizer.from_pretrained(folder)
                tb = transformers.AutoTokenizer.from_pretrained(out)
                tok_same = ta(text)["input_ids"] == tb(text)["input_ids"]
            ok = same and tok_same is not False
            failed += not ok
            print(f"{folder.name:24s} {config.architectures[0]:40s} "
                  f"{'hidden states' if bare else 'outputs'} {'equal' if same else 'DIFFER'}"
                  f"{'' if tok_same is None else ', tokenizer ' + ('equal' if tok_same else 'DIFFERS')}")

        # a new head, trained (its weights moved), exported: transformers' pipeline scores as qkv does
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file
        for source in [] if args.native_only else ["bert-uncased", "roberta-mlm", "deberta-mlm", "electra-mlm",
                                                    "modernbert-mlm"]:
            cls_file = tmp / f"{source}-cls.safetensors"
            trained, out = tmp / f"{source}-trained.safetensors", tmp / f"{source}-trained-hf"
            run(args.qkv, "convert", GOLDEN / source, "--head", "sequence", "--labels", "neg,pos,mixed", "-o", cls_file)
            g = torch.Generator().manual_seed(3)  # (as training moves them: every weight)
            state = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in load_file(str(cls_file)).items()}
            with safe_open(str(cls_file), "pt") as f:
                metadata = f.metadata()
            save_file(state, str(trained), metadata=metadata)
            run(args.qkv, "export", "--to", "hf", trained, out)
            texts = ["I loved it.", "Terrible, the worst evening.", "Well, parts of it were fine"]
            lines = run(args.qkv, "classify-text", "-m", trained, "--json", "--top-k", "0", *texts).splitlines()
            mine = [json.loads(line) for line in lines if line.strip()]
            pipe = transformers.pipeline("text-classification", model=str(out), top_k=None)
            theirs = pipe(texts)
            worst = 0.0
            for m, t in zip(mine, theirs):
                ms = {x["label"]: x["score"] for x in m}
                for x in t:
                    worst = max(worst, abs(ms[x["label"]] - x["score"]))
            ok = worst < 1e-5
            failed += not ok
            print(f"{source:24s} new head, moved, exported: pipeline vs qkv classify-text max |Δscore| {worst:.2e}"
                  f" {'ok' if ok else 'DIFFER'}")
        failed += check_native(args.qkv, tmp)
    print("all equal" if not failed else f"{failed} differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
