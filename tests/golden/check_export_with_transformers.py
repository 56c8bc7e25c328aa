"""`qkv export --to hf` checked by transformers itself (pyenv python3 with torch and transformers; not
in CI, which has neither — tests/models/hf_export_test.cpp checks the exports against the golden folders
that save_pretrained wrote there).

For every golden folder (tests/golden/hf/*): `qkv convert` then `qkv export --to hf`, and transformers'
from_pretrained of the export computes what from_pretrained of the folder computes (the same outputs,
bit for bit, on random ids), and its AutoTokenizer encodes as the folder's. Then the way a user takes it:
a new head on an encoder (`convert --head sequence`), its weights moved as training moves them, exported — and pipeline("text-classification") of the export gives the scores
`qkv classify-text` gives.

    USE_HUB_KERNELS=0 python3 tests/golden/check_export_with_transformers.py --qkv build/qkv
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


def model_class(arch):
    return getattr(transformers, arch)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qkv", default=str(ROOT / "build" / "qkv"))
    args = p.parse_args()
    transformers.logging.set_verbosity_error()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for folder in sorted(GOLDEN.iterdir()):
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
        for source in ["bert-uncased", "roberta-mlm", "deberta-mlm", "electra-mlm", "modernbert-mlm"]:
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
    print("all equal" if not failed else f"{failed} differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
