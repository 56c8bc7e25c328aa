#!/usr/bin/env python3
"""Writes tests/golden/bleu.json: sacreBLEU's corpus BLEU and chrF (default settings) and its 13a
tokenizer on a set of cases, for tests/text/bleu_test.cpp (which needs no Python).

    pip install sacrebleu   # written with sacreBLEU 2.6.0
    python3 tests/golden/make_bleu_golden.py

The cases are fixed strings plus two deterministic pseudo-random corpora (Python's `random` with a
fixed seed; the strings themselves are stored in the JSON, so the C++ side never regenerates them).
"""
import json
import os
import random

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

HERE = os.path.dirname(os.path.abspath(__file__))

TOKENIZE_CASES = [
    "Hello, world!",
    "U.S.A.",
    "The U.S.A. is big.",
    "3.5",
    "It costs 3.5 dollars.",
    "it's",
    "It's John's.",
    "-- a --",
    "&quot;",
    "&quot;quoted&quot; &amp; &lt;tag&gt;",
    "&amp;quot;",
    "1,000",
    "1,000,000 people.",
    "10.000,50 EUR",
    "5-6",
    "3-4-5",
    "a-b",
    "-9",
    "9-",
    "a..b",
    "...",
    "e.g., this",
    "$5.00.",
    "x.y",
    "1.a",
    "a.1",
    ",5",
    "5,",
    ".5",
    "«Bonjour», dit-il.",
    "L'été dernier, j'ai vu ça : « déjà vu » !",
    "C'est 3,5 % de plus.",
    "Où est-ce qu'il est allé ?",
    "Ça coûte 1 000 €.",
    "tab\there",
    "line-\nbreak",
    "two\nlines",
    "<skipped>gone",
    "a\u00a0b",
    "a\u202fb",
    "a\u2009b",
    "\u3000lead and trail\u3000",
    "(hi)",
    "[x]{y}",
    "~`^_|\\",
    "@user #tag 100%",
    "emoji \U0001F642.",
    "Ünïcödé.",
    "a,b,c",
    "Mr. Smith's e-mail: smith@example.com.",
    "  multiple   spaces  ",
    "",
    " ",
    "ÉCOLE,école.",
    "日本語、テスト。",
    "é.é",
    "2.é",
    "é.2",
]


def words_corpus(seed, n, vocab, punct):
    rng = random.Random(seed)
    refs, hyps = [], []
    for _ in range(n):
        length = rng.randint(1, 18)
        ref = [rng.choice(vocab) for _ in range(length)]
        hyp = list(ref)
        # perturb: drop, substitute, swap, insert
        for _ in range(rng.randint(0, 4)):
            op = rng.randint(0, 3)
            if op == 0 and len(hyp) > 1:
                del hyp[rng.randrange(len(hyp))]
            elif op == 1 and hyp:
                hyp[rng.randrange(len(hyp))] = rng.choice(vocab)
            elif op == 2 and len(hyp) > 1:
                i = rng.randrange(len(hyp) - 1)
                hyp[i], hyp[i + 1] = hyp[i + 1], hyp[i]
            else:
                hyp.insert(rng.randrange(len(hyp) + 1), rng.choice(vocab))
        end = rng.choice(punct)
        refs.append(" ".join(ref) + end)
        hyps.append(" ".join(hyp) + rng.choice([end, "", "."]))
    return hyps, refs


EN_VOCAB = ["the", "a", "cat", "dog", "sat", "on", "mat", "U.S.", "it's", "don't", "3.5",
            "1,000", "(big)", "\"quoted\"", "well-known", "e-mail", "man", "woman", "red", "blue"]
FR_VOCAB = ["le", "la", "chat", "chien", "été", "déjà", "«", "»", "l'homme", "c'est", "ça",
            "où", "Noël", "français", "2,5", "œuvre", "naïf", "à", "–", "ici"]


def bleu_cases():
    cases = []

    def add(name, hyps, refs):
        cases.append({"name": name, "hyps": hyps, "refs": refs})

    add("identical", ["The cat sat on the mat.", "It is raining today."],
        [["The cat sat on the mat.", "It is raining today."]])
    add("empty_hyp", ["", "The dog barked loudly at the mailman."],
        [["A cat.", "The dog barked loudly at the postman."]])
    add("all_empty_hyps", ["", ""], [["A cat sat.", "Dogs."]])
    add("one_word_hyps", ["cat", "dog", "bird"], [["The cat.", "A dog!", "bird"]])
    add("one_word_no_match", ["xyz"], [["The cat sat on the mat."]])
    add("hyp_shorter", ["the cat sat", "it is raining"],
        [["the cat sat on the mat", "it is raining again today"]])
    add("hyp_longer", ["the big black cat sat on the old mat today", "it is raining cats and dogs now"],
        [["the cat sat on the mat", "it is raining"]])
    add("no_4gram_match", ["the cat the mat sat on", "a b c d e"],
        [["the cat sat on the mat", "a b x c d y e"]])
    add("no_match_at_all", ["alpha beta gamma delta"], [["one two three four"]])
    add("multi_ref_2", ["the cat is on the mat", "there is a cat on the mat"],
        [["the cat is sitting on the mat", "a cat is on the mat"],
         ["there is a cat on the mat", "the cat sat on a mat"]])
    add("multi_ref_tie_shorter", ["a b c d e"],  # refs of length 4 and 6: both 1 away → 4
        [["a b c d"], ["a b c d e f"]])
    add("multi_ref_tie_other_order", ["a b c d e"], [["a b c d e f"], ["a b c d"]])
    add("multi_ref_3", ["Le chat est sur le tapis.", "Il pleut aujourd'hui."],
        [["Le chat est assis sur le tapis.", "Il pleut."],
         ["Un chat est sur le tapis.", "Aujourd'hui, il pleut."],
         ["Le chat se trouve sur le tapis.", "Il pleut aujourd'hui."]])
    add("multi_ref_empty_ref", ["a cat", "the dog runs"], [["", "the dog runs"], ["a cat", ""]])
    add("max_count_over_refs", ["the the the the the the the"],
        [["the cat is on the mat"], ["there is a cat on the the mat the"]])
    add("punctuation_13a", ["Hello, world! U.S.A. costs 3.5 -- it's 1,000 &quot;dollars&quot;."],
        [["Hello world! The U.S.A. costs 3.5 -- it is 1,000 \"dollars\"."]])
    add("french_accents", ["« Où est l'été ? » demanda-t-il, déjà fatigué.",
                           "Ça coûte 2,5 € à Noël !"],
        [["« Où est passé l'été ? » demanda-t-il, déjà las.", "Cela coûte 2,5 € à Noël."]])
    add("unicode_spaces", ["a\u00a0b c\u202fd", "x\u3000y z "],
        [["a b c d", "x y z"]])
    add("trailing_whitespace_and_newline", ["the cat sat-\n", "end of line-\nbreak here\n"],
        [["the cat sat-", "end of linebreak here"]])
    add("skipped_and_entities", ["<skipped>the &amp;quot; cat &lt;b&gt;"], [["the &quot; cat <b>"]])
    add("tokenized_hyp", ["The cat sat on the mat .", "It 's raining ."],
        [["The cat sat on the mat.", "It's raining."]])
    # A variable number of references per sentence: None marks a missing one (Tatoeba-style
    # grouping by source); qkv's corpus_bleu_by_sentence takes the per-sentence lists.
    add("variable_refs_none", ["the cat is on the mat", "it rains", "a dog runs in the park"],
        [["the cat sits on the mat", "it is raining", "a dog is running in the park"],
         [None, "it rains today", "the dog runs in a park"],
         [None, None, "a dog runs through the park"]])
    hyps, refs = words_corpus(1234, 150, EN_VOCAB, [".", "!", "?", ""])
    add("random_en_150", hyps, [refs])
    hyps, refs = words_corpus(99, 120, FR_VOCAB, [".", " !", " ?", "…"])
    _, refs2 = words_corpus(7, 120, FR_VOCAB, [".", " !"])
    add("random_fr_120_two_refs", hyps, [refs, refs2])
    _, refs3 = words_corpus(5, 120, FR_VOCAB, [".", " ?"])
    add("random_fr_120_holes", hyps, [refs, [r if i % 3 else None for i, r in enumerate(refs2)],
                                      [r if i % 4 == 1 else None for i, r in enumerate(refs3)]])
    return cases


def main():
    tok = Tokenizer13a()
    out = {
        "sacrebleu_version": sacrebleu.__version__,
        "note": "generated by tests/golden/make_bleu_golden.py; BLEU() and CHRF() with defaults; bleu_n: BLEU(max_ngram_order=n)",
        "tokenize_13a": [{"in": s, "out": tok(s)} for s in TOKENIZE_CASES],
        "cases": [],
    }
    for case in bleu_cases():
        b = BLEU().corpus_score(case["hyps"], case["refs"])
        c = CHRF().corpus_score(case["hyps"], case["refs"])
        case["bleu"] = {
            "score": b.score,
            "precisions": [float(p) for p in b.precisions],
            "bp": b.bp,
            "ratio": float(b.ratio),
            "hyp_len": b.sys_len,
            "ref_len": b.ref_len,
            "counts": [int(x) for x in b.counts],
            "totals": [int(x) for x in b.totals],
            "format": str(b),
        }
        # BLEU-1 … BLEU-4 (captioning's figures): the same statistics over the first n orders
        case["bleu"]["bleu_n"] = [BLEU(max_ngram_order=n).corpus_score(case["hyps"], case["refs"]).score
                                  for n in (1, 2, 3, 4)]
        case["chrf"] = {"score": c.score, "format": str(c)}
        out["cases"].append(case)
    path = os.path.join(HERE, "bleu.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}: {len(out['tokenize_13a'])} tokenizer cases, {len(out['cases'])} score cases")


if __name__ == "__main__":
    main()
