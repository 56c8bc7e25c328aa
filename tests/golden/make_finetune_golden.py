"""Golden file for fine-tuning encoders' sequence and token classifiers (tests/train/text_classification_task_test.cpp):
one step of transformers' …ForSequenceClassification and torch.optim.AdamW on a fixed batch, from the tiny
random classifier folders tests/golden/make_hf_golden.py wrote.

    python3 tests/golden/make_finetune_golden.py     # pyenv python3: pip install torch transformers seqeval

Token classification (run_ner.py's way): sentences split into words with a tag each, encoded with
is_split_into_words=True (add_prefix_space=True for a ByteLevel tokenizer, as transformers requires), the
first token of each word tagged, the others and the special tokens -100 (label_all_tokens: the word's
tag, B-X as I-X); the input ids and word ids of each sentence are kept too.

For each case: the examples (text, optional pair, label), the batch's mean loss as the model's forward
computes it with labels (dropout off: eval mode), the gradients' global L2 norm, and the loss on the same
batch after one AdamW step (lr 1e-3, betas 0.9 / 0.999, eps 1e-8, weight decay 0.01 on the matrices only,
as qkv's trainer groups them). Writes tests/golden/hf_finetune.json.
"""
import json
import os

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = ["The cat sat on the mat.", "I love thee, my lord!", "Come hither, good Romeo; what news?", "no",
         "To be, or not to be: that is the question. Whether 'tis nobler in the mind to suffer the slings and "
         "arrows of outrageous fortune", "Good night, good night! Parting is such sweet sorrow."]
PAIRS = ["What news?", "yes", "My lord, the king.", "To be.", "Sweet sorrow.", "Thou art a villain."]
MAX_LENGTH = 24  # (the long text is cut to it)
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01

# (case, folder, problem_type — None: the folder's, regression for its one label —, with pairs)
CASES = [
    ("bert-pairs", "bert-seqcls", "single_label_classification", True),
    ("bert-multi-label", "bert-seqcls", "multi_label_classification", False),
    ("distilbert", "distilbert-seqcls", "single_label_classification", False),
    ("roberta-regression", "roberta-seqcls", None, False),  # (one label: transformers' default, MSE)
    ("mpnet", "mpnet-seqcls", "single_label_classification", True),
    ("deberta", "deberta-seqcls", "single_label_classification", False),
    ("deberta-v2-pairs-regression", "deberta-v2-seqcls", None, True),
    ("electra", "electra-seqcls", "single_label_classification", False),
    ("albert", "albert-seqcls", "single_label_classification", False),
    ("modernbert", "modernbert-seqcls", "single_label_classification", False),
]


def backward_and_step(m, loss):
    """loss.backward() and one torch.optim.AdamW step, weight decay on the matrices only (qkv's
    grouping); returns the gradients' global L2 norm before the step."""
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters() if p.grad is not None)).item()
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                            betas=BETAS, eps=EPS)
    opt.step()
    return norm


def labels_for(problem, L):
    g = torch.Generator().manual_seed(5)
    if problem == "regression":
        return [round(v, 3) for v in torch.rand(len(TEXTS), generator=g).tolist()]
    if problem == "multi_label_classification":
        return [[l for l in range(L) if torch.rand(1, generator=g).item() < 0.5] for _ in TEXTS]
    return [i % L for i in range(len(TEXTS))]


def case(name, folder, problem, pairs):
    path = os.path.join(HERE, "hf", folder)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    m = transformers.AutoModelForSequenceClassification.from_pretrained(
        path, **({"problem_type": problem} if problem else {})).float()
    m.eval()  # (dropout off; the gradients as in training)
    L = m.config.num_labels
    given, problem = problem, problem or ("regression" if L == 1 else "single_label_classification")
    labels = labels_for(problem, L)
    enc = tok(TEXTS, PAIRS if pairs else None, padding=True, truncation=True, max_length=MAX_LENGTH,
              return_tensors="pt")
    if problem == "multi_label_classification":
        y = torch.zeros(len(TEXTS), L)
        for i, ls in enumerate(labels):
            y[i, ls] = 1
    elif problem == "regression":
        y = torch.tensor(labels)
    else:
        y = torch.tensor(labels)
    loss0 = m(**enc, labels=y).loss
    norm = backward_and_step(m, loss0)
    with torch.no_grad():
        loss1 = m(**enc, labels=y).loss.item()
    examples = [{"text": t, "label": l, **({"pair": p} if pairs else {})} for t, p, l in zip(TEXTS, PAIRS, labels)]
    return {"case": name, "folder": folder, "problem_type": problem, "from_folder": given is None,
            "labels": [m.config.id2label[i] for i in range(L)],
            "examples": examples, "tokens": [int(n) for n in enc["attention_mask"].sum(1)],
            "loss": loss0.item(), "grad_norm": norm, "loss_after_step": loss1}


SENTENCES = [("Romeo and Juliet went to Verona .".split(), ["B-PER", "O", "B-PER", "O", "O", "B-LOC", "O"]),
             ("My lord Hamlet is in Denmark , said Horatio".split(),
              ["O", "O", "B-PER", "O", "O", "B-LOC", "O", "O", "B-PER"]),
             (["yes"], ["O"]),
             ("Good Mercutio , thou art in Mantua and fair Verona , where we lay our scene and the Montagues "
              "quarrel with the Capulets".split(),
              ["O", "B-PER", "O", "O", "O", "O", "B-LOC", "O", "O", "B-LOC", "O", "O", "O", "O", "O", "O", "O", "O",
               "B-PER", "O", "O", "O", "B-PER"]),
             ("Sir John Falstaff drinks in Eastcheap".split(), ["B-PER", "I-PER", "I-PER", "O", "O", "B-LOC"])]
TOKEN_CASES = [("bert", "bert-tokcls", False), ("bert-all-tokens", "bert-tokcls", True),
               ("roberta", "roberta-tokcls", False), ("xlmr", "xlmr-tokcls", False),
               ("deberta", "deberta-tokcls", False), ("electra", "electra-tokcls", False),
               ("modernbert", "modernbert-tokcls", False), ("albert", "albert-tokcls", False)]


def token_case(name, folder, label_all_tokens):
    path = os.path.join(HERE, "hf", folder)
    with open(os.path.join(path, "tokenizer.json"), encoding="utf-8") as f:
        byte_level = "ByteLevel" in json.dumps(json.load(f).get("pre_tokenizer"))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    if byte_level:
        # add_prefix_space=True, as run_ner.py loads a RoBERTa's or ModernBERT's tokenizer: what
        # RobertaTokenizer(add_prefix_space=True) and transformers 4's PreTrainedTokenizerFast do to the
        # pre-tokenizer (checked against 4.57) — transformers 5's generic TokenizersBackend, which these
        # folders name, ignores the argument
        from tokenizers import pre_tokenizers
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    m = transformers.AutoModelForTokenClassification.from_pretrained(path).float()
    m.eval()
    label2id = {l: i for i, l in m.config.id2label.items()}
    b_to_i = {i: label2id.get("I-" + l[2:], i) if l.startswith("B-") else i for i, l in m.config.id2label.items()}
    words = [w for w, _ in SENTENCES]
    enc = tok(words, is_split_into_words=True, padding=True, truncation=True, max_length=MAX_LENGTH,
              return_tensors="pt")
    labels, word_ids = [], []
    for i, (_, tags) in enumerate(SENTENCES):
        ids = enc.word_ids(i)
        row, prev = [], None
        for w in ids:
            if w is None:
                row.append(-100)
            elif w != prev:
                row.append(label2id[tags[w]])
            else:
                row.append(b_to_i[label2id[tags[w]]] if label_all_tokens else -100)
            prev = w
        labels.append(row)
        word_ids.append([-1 if w is None else w for w, a in zip(ids, enc["attention_mask"][i]) if a])
    y = torch.tensor(labels)
    loss0 = m(**enc, labels=y).loss
    norm = backward_and_step(m, loss0)
    with torch.no_grad():
        o = m(**enc, labels=y)
    loss1 = o.loss.item()
    # run_ner.py's compute_metrics after the step: seqeval over the tagged tokens' predictions
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
    pred = o.logits.argmax(-1)
    truth = [[m.config.id2label[int(l)] for l in row if l != -100] for row in y]
    guess = [[m.config.id2label[int(p)] for p, l in zip(prow, row) if l != -100] for prow, row in zip(pred, y)]
    metrics = {"accuracy": accuracy_score(truth, guess), "precision": precision_score(truth, guess),
               "recall": recall_score(truth, guess), "f1": f1_score(truth, guess)}
    ids = [[int(t) for t, a in zip(row, mask) if a] for row, mask in zip(enc["input_ids"], enc["attention_mask"])]
    return {"case": name, "folder": folder, "label_all_tokens": label_all_tokens,
            "labels": [m.config.id2label[i] for i in range(m.config.num_labels)],
            "examples": [{"tokens": w, "ner_tags": t} for w, t in SENTENCES], "input_ids": ids, "word_ids": word_ids,
            "loss": loss0.item(), "grad_norm": norm, "loss_after_step": loss1, "metrics_after_step": metrics}


def main():
    torch.manual_seed(0)
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "max_length": MAX_LENGTH,
           "lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD,
           "cases": [case(*c) for c in CASES], "token_cases": [token_case(*c) for c in TOKEN_CASES]}
    with open(os.path.join(HERE, "hf_finetune.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for c in out["cases"]:
        print(f"{c['case']:28s} loss {c['loss']:.6f} → {c['loss_after_step']:.6f}  |g| {c['grad_norm']:.4g}  "
              f"tokens {c['tokens']}")
    for c in out["token_cases"]:
        print(f"tokens {c['case']:21s} loss {c['loss']:.6f} → {c['loss_after_step']:.6f}  |g| {c['grad_norm']:.4g}  "
              f"tokens {[len(i) for i in c['input_ids']]}")


if __name__ == "__main__":
    main()
