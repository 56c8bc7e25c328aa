"""Golden file for fine-tuning multiple choice (tests/train/multiple_choice_task_test.cpp): transformers'
run_swag.py's encodings, and one step of …ForMultipleChoice and torch.optim.AdamW on them — and the
tiny random …ForMultipleChoice folders it is read from, made here from the masked-language-model folders
tests/golden/make_hf_golden.py wrote (AutoModelForMultipleChoice.from_pretrained(folder): the encoder's
weights, a new pooler and classifier drawn with torch.manual_seed(0); saved as tests/golden/hf/mc-*).

    PYTHONPATH=<torch + transformers> python3 tests/golden/make_mc_golden.py

Encodings (run_swag.py's preprocess_function): each example's context (sent1) four times, beside its
question header (sent2) and each ending ("{sent2} {ending_i}"), as tokenizer(first, second,
truncation=True, max_length=MAX_LENGTH) encodes the pairs. A batch: every example at once, its choices
padded to the longest of all (DataCollatorForMultipleChoice), [B, C, T].

Loss: model(**batch, labels=label).loss — the cross-entropy of each example's choice scores [B, C] —
dropout off (eval mode); the gradients' L2 norm; one AdamW step (lr 1e-3, betas 0.9 / 0.999, eps 1e-8,
weight decay 0.01 on the matrices only, as qkv's trainer groups them); the loss after it; the accuracy
before (run_swag.py's compute_metrics: argmax = label). Writes tests/golden/hf_mc.json.
"""
import json
import os
import shutil

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_LENGTH = 24
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01
ENDINGS = ["ending0", "ending1", "ending2", "ending3"]

# SWAG's rows: sent1 the context, sent2 the ending's start; one long enough to be cut (longest_first)
EXAMPLES = [
    {"sent1": "Romeo climbs the wall of the garden.", "sent2": "Juliet", "ending0": "comes out onto the balcony.",
     "ending1": "eats the wall.", "ending2": "sings to the moon of Verona tonight.", "ending3": "is a king.",
     "label": 0},
    {"sent1": "The nurse carries the news to Juliet.", "sent2": "She", "ending0": "drops it.",
     "ending1": "tells her that Romeo will marry her.", "ending2": "sleeps.", "ending3": "runs to Mantua at once.",
     "label": 1},
    {"sent1": "Tybalt draws his sword in the street of the town at noon, and the Montagues and the Capulets "
              "gather round to watch the fight begin.", "sent2": "Mercutio",
     "ending0": "laughs at him and draws his own sword to fight him in the heat of the day.",
     "ending1": "goes home.", "ending2": "is a café.", "ending3": "writes a letter.", "label": 0},
    {"sent1": "The friar gives Juliet a potion.", "sent2": "She", "ending0": "sells it.",
     "ending1": "pours it away.", "ending2": "drinks it and sleeps as if dead.", "ending3": "thanks him.",
     "label": 2},
    {"sent1": "Romeo hears that Juliet is dead.", "sent2": "He", "ending0": "is glad.", "ending1": "buys a horse.",
     "ending2": "forgets her.", "ending3": "goes back to Verona to see her.", "label": 3},
    {"sent1": "naïve lovers", "sent2": "", "ending0": "die.", "ending1": "live.", "ending2": "été.",
     "ending3": "sing.", "label": 0},
]
CASES = [("bert", "bert-uncased"), ("roberta", "roberta-mlm"), ("xlmr", "xlmr-mlm"), ("deberta", "deberta-mlm"),
         ("electra", "electra-mlm"), ("distilbert", "distilbert-mlm"), ("albert", "albert-mlm"),
         ("mpnet", "mpnet-mlm"), ("modernbert", "modernbert-mlm")]


def encode(tok, examples):
    first = [e["sent1"] for e in examples for _ in ENDINGS]
    second = [f"{e['sent2']} {e[k]}" for e in examples for k in ENDINGS]
    enc = tok(first, second, truncation=True, max_length=MAX_LENGTH)
    C = len(ENDINGS)
    return [{k: enc[k][i * C:(i + 1) * C] for k in enc} for i in range(len(examples))]


def batch_of(tok, feats):
    flat = [{k: f[k][c] for k in f} for f in feats for c in range(len(ENDINGS))]
    b = tok.pad(flat, return_tensors="pt")
    B, C = len(feats), len(ENDINGS)
    return {k: v.view(B, C, -1) for k, v in b.items()}


def case(name, mlm_folder):
    torch.manual_seed(0)
    src = os.path.join(HERE, "hf", mlm_folder)
    out = os.path.join(HERE, "hf", "mc-" + name)
    tok = transformers.AutoTokenizer.from_pretrained(src)
    m = transformers.AutoModelForMultipleChoice.from_pretrained(src).float()
    shutil.rmtree(out, ignore_errors=True)
    m.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    m.eval()
    feats = encode(tok, EXAMPLES)
    b = batch_of(tok, feats)
    labels = torch.tensor([e["label"] for e in EXAMPLES])
    o = m(**b, labels=labels)
    accuracy = int((o.logits.argmax(-1) == labels).sum()) / len(EXAMPLES)
    o.loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters() if p.grad is not None)).item()
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                      betas=BETAS, eps=EPS).step()
    with torch.no_grad():
        after = m(**b, labels=labels).loss.item()
    result = {"case": name, "folder": "mc-" + name, "architecture": type(m).__name__,
              "input_ids": [f["input_ids"] for f in feats], "logits": o.logits.detach().tolist(),
              "loss": o.loss.item(), "grad_norm": norm, "loss_after_step": after, "accuracy": accuracy}
    with open(os.path.join(out, "reference.json"), "w", encoding="utf-8") as f:  # (every golden folder has one)
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "multiple_choice": "tests/golden/hf_mc.json", "architecture": result["architecture"]}, f)
        f.write("\n")
    return result


def main():
    transformers.logging.set_verbosity_error()
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "max_length": MAX_LENGTH,
           "lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD, "endings": ENDINGS, "examples": EXAMPLES,
           "cases": [case(*c) for c in CASES]}
    with open(os.path.join(HERE, "hf_mc.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
        f.write("\n")
    for c in out["cases"]:
        print(f"{c['case']:11s} {c['architecture']:28s} T {[len(x) for x in c['input_ids'][2]]} loss {c['loss']:.6f} "
              f"→ {c['loss_after_step']:.6f}  |g| {c['grad_norm']:.4g}  accuracy {c['accuracy']:.3f}")


if __name__ == "__main__":
    main()
