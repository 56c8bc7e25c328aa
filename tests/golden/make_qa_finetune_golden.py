"""Golden file for fine-tuning extractive question answering (tests/train/question_answering_task_test.cpp):
transformers' run_qa.py's windows and answer positions, one step of …ForQuestionAnswering and
torch.optim.AdamW on them, run_qa.py's answers read from the logits, and SQuAD's scores — from the tiny
random question-answering folders tests/golden/make_hf_golden.py wrote.

    PYTHONPATH=<torch + transformers> python3 tests/golden/make_qa_finetune_golden.py

Windows (run_qa.py's prepare_train_features): tokenizer(question.lstrip(), context,
truncation="only_second", max_length=MAX_LENGTH, stride=DOC_STRIDE, return_overflowing_tokens=True,
return_offsets_mapping=True); a window's start and end positions are the first and last of its context
tokens that hold the first answer's characters, or the [CLS] token's place where the answer is not
wholly inside the window or the example has none. (run_qa.py's loop, which walks on past the context's
last token when the answer starts in it, is followed to the context's end: no example here starts an
answer in a window's last context token, where the two differ.)

Loss: the model's start and end logits [B, T] over all windows as one batch padded to the longest, the
padding left out of each softmax (transformers' loss counts the padded places too; run_qa.py pads every
window to max_seq_length, so its figure moves with that padding): ½ (CE(start) + CE(end)), each the mean
over the windows. Dropout off (eval mode); one AdamW step (lr 1e-3, betas 0.9 / 0.999, eps 1e-8, weight
decay 0.01 on the matrices only, as qkv's trainer groups them); the loss on the same batch after it.

Answers (run_qa.py's postprocess_qa_predictions, before the step): for each example, over its windows,
the N_BEST highest start and end logits; the pairs inside the context with start ≤ end and at most
MAX_ANSWER_LENGTH tokens, scored start + end logit; the best one's characters — or, SQuAD 2.0, "" where
the least [CLS] score of the windows beats it. Then SQuAD's exact match and F1 (the official
evaluate-v2.0.py: lower-cased, punctuation and a/an/the removed, the best over the true answers).
Writes tests/golden/hf_qa_finetune.json.
"""
import collections
import json
import os
import re
import string

import numpy as np
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_LENGTH, DOC_STRIDE, N_BEST, MAX_ANSWER_LENGTH = 40, 10, 20, 30
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01

CONTEXT_LONG = ("Romeo and Juliet met in fair Verona , where the Montagues and the Capulets quarrel . Tybalt "
                "is a Capulet and Mercutio is the friend of Romeo . Friar Laurence married them in his cell , and "
                "the Nurse did carry the news . Then Romeo was sent to Mantua , and Juliet did sleep in the tomb "
                "of her fathers , where the lovers die .")
# (id, question, context, answers) — one context in many windows, one with a character of two bytes
# (é) before its answer, an answer found twice, and (SQuAD 2.0) one without an answer
EXAMPLES = [
    ("q1", "Where did Romeo and Juliet meet?", CONTEXT_LONG, ["fair Verona"]),
    ("q2", "  Who married them?", CONTEXT_LONG, ["Friar Laurence"]),
    ("q3", "Where was Romeo sent?", CONTEXT_LONG, ["Mantua"]),
    ("q4", "Who is the friend of Romeo?", "Mercutio is the friend of Romeo , and Benvolio his cousin .",
     ["Mercutio", "Mercutio is the friend"]),
    ("q5", "What did the nurse carry?", "The café of Verona : the Nurse did carry the news to Juliet .", ["the news"]),
    ("q6", "Who is king?", "The Nurse did carry the news to Juliet .", []),
]
CASES = [("bert", "qa-bert"), ("roberta", "qa-roberta"), ("xlmr", "qa-xlmr"), ("deberta", "qa-deberta"),
         ("electra", "qa-electra"), ("distilbert", "qa-distilbert"), ("albert", "qa-albert"),
         ("modernbert", "qa-modernbert")]


# ---- SQuAD's scores (the official evaluate-v2.0.py) ----------------------------------------------

def normalize_answer(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", s)
    return " ".join(s.split())


def compute_exact(gold, pred):
    return int(normalize_answer(gold) == normalize_answer(pred))


def compute_f1(gold, pred):
    g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
    common = collections.Counter(g) & collections.Counter(p)
    same = sum(common.values())
    if len(g) == 0 or len(p) == 0:
        return int(g == p)
    if same == 0:
        return 0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def scores(pred, golds):
    golds = [a for a in golds if normalize_answer(a)] or [""]
    return max(compute_exact(a, pred) for a in golds), max(compute_f1(a, pred) for a in golds)


METRIC_CASES = [("The fair Verona!", ["fair verona"]), ("Verona", ["fair Verona", "in Verona"]),
                ("an apple a day", ["apple day"]), ("the the", ["a"]), ("", []), ("Romeo", []), ("", ["Romeo"]),
                ("Romeo and Juliet", ["Juliet and Romeo"]), ("Théâtre  ÉTÉ", ["théâtre été"]),
                ("Romeo Romeo Juliet", ["Romeo Juliet Juliet"]), ("don't", ["dont"]), ("x_the y", ["x_the y"]),
                ("Anthem", ["the anthem"]), ("l'an", ["l an"])]


# ---- run_qa.py's windows and positions -----------------------------------------------------------

def windows(tok, examples):
    enc = tok([q.lstrip() for _, q, _, _ in examples], [c for _, _, c, _ in examples], truncation="only_second",
              max_length=MAX_LENGTH, stride=DOC_STRIDE, return_overflowing_tokens=True, return_offsets_mapping=True)
    out = []
    for i, offsets in enumerate(enc["offset_mapping"]):
        ids = enc["input_ids"][i]
        cls = ids.index(tok.cls_token_id) if tok.cls_token_id in ids else 0
        seq = enc.sequence_ids(i)
        ex = examples[enc["overflow_to_sample_mapping"][i]]
        context, answers = ex[2], ex[3]
        start = end = cls
        if answers:
            start_char = context.index(answers[0])
            end_char = start_char + len(answers[0])
            first = seq.index(1)
            last = len(ids) - 1 - seq[::-1].index(1)
            if offsets[first][0] <= start_char and offsets[last][1] >= end_char:
                s = first
                while s <= last and offsets[s][0] <= start_char:
                    s += 1
                e = last
                while offsets[e][1] >= end_char:
                    e -= 1
                start, end = s - 1, e + 1
        out.append({"example": enc["overflow_to_sample_mapping"][i], "input_ids": ids,
                    "token_type_ids": enc["token_type_ids"][i] if "token_type_ids" in enc else None,
                    "offsets": [list(o) if seq[t] == 1 else None for t, o in enumerate(offsets)],
                    "start_position": start, "end_position": end})
    return out


def batch_of(tok, feats):
    T = max(len(f["input_ids"]) for f in feats)
    pad = tok.pad_token_id
    ids = torch.tensor([f["input_ids"] + [pad] * (T - len(f["input_ids"])) for f in feats])
    mask = torch.tensor([[1] * len(f["input_ids"]) + [0] * (T - len(f["input_ids"])) for f in feats])
    b = {"input_ids": ids, "attention_mask": mask}
    if feats[0]["token_type_ids"] is not None:
        b["token_type_ids"] = torch.tensor([f["token_type_ids"] + [0] * (T - len(f["token_type_ids"]))
                                            for f in feats])
    return b


def loss_of(m, b, feats):
    o = m(**b)
    pad = b["attention_mask"] == 0
    s = o.start_logits.masked_fill(pad, float("-inf"))
    e = o.end_logits.masked_fill(pad, float("-inf"))
    ys = torch.tensor([f["start_position"] for f in feats])
    ye = torch.tensor([f["end_position"] for f in feats])
    return (torch.nn.functional.cross_entropy(s, ys) + torch.nn.functional.cross_entropy(e, ye)) / 2, o


# ---- run_qa.py's postprocess_qa_predictions ------------------------------------------------------

def answers_of(feats, start_logits, end_logits, v2):
    out = {}
    for k, (qid, _, context, _) in enumerate(EXAMPLES):
        prelim, null = [], None
        for f, s_logits, e_logits in zip(feats, start_logits, end_logits):
            if f["example"] != k:
                continue
            n = len(f["input_ids"])
            s_logits, e_logits = s_logits[:n], e_logits[:n]
            offsets = f["offsets"]
            null_score = s_logits[0] + e_logits[0]
            if null is None or null["score"] > null_score:
                null = {"offsets": (0, 0), "score": null_score, "start_logit": s_logits[0], "end_logit": e_logits[0]}
            starts = np.argsort(s_logits)[-1:-N_BEST - 1:-1].tolist()
            ends = np.argsort(e_logits)[-1:-N_BEST - 1:-1].tolist()
            for si in starts:
                for ei in ends:
                    if offsets[si] is None or offsets[ei] is None:
                        continue
                    if ei < si or ei - si + 1 > MAX_ANSWER_LENGTH:
                        continue
                    prelim.append({"offsets": (offsets[si][0], offsets[ei][1]), "score": s_logits[si] + e_logits[ei],
                                   "start_logit": s_logits[si], "end_logit": e_logits[ei]})
        if v2:
            prelim.append(null)
        preds = sorted(prelim, key=lambda x: x["score"], reverse=True)[:N_BEST]
        if v2 and not any(p["offsets"] == (0, 0) for p in preds):
            preds.append(null)
        for p in preds:
            p["text"] = context[p["offsets"][0]:p["offsets"][1]]
        if len(preds) == 0 or (len(preds) == 1 and preds[0]["text"] == ""):
            preds.insert(0, {"text": "empty", "start_logit": 0.0, "end_logit": 0.0, "score": 0.0})
        if not v2:
            out[qid] = preds[0]["text"]
        else:
            i = 0
            while preds[i]["text"] == "":
                i += 1
            best = preds[i]
            diff = null["score"] - best["start_logit"] - best["end_logit"]
            out[qid] = "" if diff > 0.0 else best["text"]
    return out


def case(name, folder):
    path = os.path.join(HERE, "hf", folder)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    m = transformers.AutoModelForQuestionAnswering.from_pretrained(path).float()
    m.eval()
    feats = windows(tok, EXAMPLES)
    b = batch_of(tok, feats)
    loss0, o = loss_of(m, b, feats)
    s_logits, e_logits = o.start_logits.detach().numpy(), o.end_logits.detach().numpy()
    answers = {v2: answers_of(feats, s_logits, e_logits, v2) for v2 in (False, True)}
    golds = {qid: a for qid, _, _, a in EXAMPLES}
    metrics = {}
    for v2 in (False, True):
        rows = [(qid, a) for qid, a in answers[v2].items() if v2 or golds[qid]]
        em = [scores(a, golds[qid])[0] for qid, a in rows]
        f1 = [scores(a, golds[qid])[1] for qid, a in rows]
        metrics["v2" if v2 else "v1"] = {"exact_match": 100 * sum(em) / len(em), "f1": 100 * sum(f1) / len(f1)}
    loss0.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters() if p.grad is not None)).item()
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                      betas=BETAS, eps=EPS).step()
    with torch.no_grad():
        loss1 = loss_of(m, b, feats)[0].item()
    return {"case": name, "folder": folder,
            "windows": [{k: f[k] for k in ("example", "input_ids", "start_position", "end_position")} for f in feats],
            "loss": loss0.item(), "grad_norm": norm, "loss_after_step": loss1,
            "answers_v1": answers[False], "answers_v2": answers[True], "metrics": metrics}


def main():
    torch.manual_seed(0)
    examples = [{"id": qid, "question": q, "context": c,
                 "answers": {"text": a, "answer_start": [len(c[:c.index(t)]) for t in a]}}
                for qid, q, c, a in EXAMPLES]
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "max_length": MAX_LENGTH,
           "doc_stride": DOC_STRIDE, "n_best_size": N_BEST, "max_answer_length": MAX_ANSWER_LENGTH, "lr": LR,
           "betas": list(BETAS), "eps": EPS, "weight_decay": WD, "examples": examples,
           "metric_cases": [{"prediction": p, "answers": a, "exact_match": scores(p, a)[0], "f1": scores(p, a)[1]}
                            for p, a in METRIC_CASES],
           "cases": [case(*c) for c in CASES]}
    with open(os.path.join(HERE, "hf_qa_finetune.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
        f.write("\n")
    for c in out["cases"]:
        print(f"{c['case']:12s} windows {len(c['windows'])}  positions "
              f"{[(w['start_position'], w['end_position']) for w in c['windows']]}  loss {c['loss']:.6f} → "
              f"{c['loss_after_step']:.6f}  |g| {c['grad_norm']:.4g}  {c['metrics']}")


if __name__ == "__main__":
    main()
