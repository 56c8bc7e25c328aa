"""qkv.evaluate_translations: `qkv eval`'s scores from Python, against sacreBLEU 2.6.0's figures for
the same lines (computed once with sacrebleu.corpus_bleu / corpus_chrf and written here)."""
import pytest

import qkv

SOURCES = ["I like tea .", "I like tea .", "The cat sat on the mat and looked around .", "Go !"]
REFS = ["J'aime le thé .", "J'adore le thé .", "Le chat s'est assis sur le tapis et a regardé autour .", "Va !"]
HYPS = ["J'aime le thé .", "J'aime le thé .", "Le chat est assis sur le tapis .", "Vas-y !"]


def test_plain_scores_are_sacrebleus():
    s = qkv.evaluate_translations(HYPS, [REFS])
    # sacrebleu.corpus_bleu(HYPS, [REFS]), corpus_chrf(HYPS, [REFS])
    assert s["bleu"] == pytest.approx(42.11617407586524, abs=1e-9)
    assert s["chrf"] == pytest.approx(59.10835102783919, abs=1e-9)
    assert (s["sentences"], s["hyp_len"], s["ref_len"]) == (4, 18, 22)
    assert s["bp"] == pytest.approx(0.800737402916808, abs=1e-12)
    assert "by_length" not in s


def test_grouped_scores_each_source_once_with_all_its_references():
    s = qkv.evaluate_translations(HYPS, [REFS], sources=SOURCES, group=True)
    # sacreBLEU with a variable number of references: the first sentence has two, the others one
    assert s["sentences"] == 3
    assert s["bleu"] == pytest.approx(41.26365474288348, abs=1e-9)
    assert s["chrf"] == pytest.approx(60.85830424251709, abs=1e-9)


def test_by_length_buckets():
    s = qkv.evaluate_translations(HYPS, [REFS], sources=SOURCES, bucket_width=5)
    assert [(b["from"], b["to"], b["sentences"]) for b in s["by_length"]] == [(0, 5, 3), (6, 10, 1)]
    alone = qkv.evaluate_translations(HYPS[2:3], [REFS[2:3]])
    assert s["by_length"][1]["bleu"] == pytest.approx(alone["bleu"])


def test_bad_arguments_are_clear_errors():
    with pytest.raises(qkv.Error, match="need the sources"):
        qkv.evaluate_translations(HYPS, [REFS], group=True)
    with pytest.raises(qkv.Error, match="4 hypotheses but 1 sources"):
        qkv.evaluate_translations(HYPS, [REFS], sources=["x"])
    with pytest.raises(qkv.Error, match="reference stream 1 has 1 lines"):
        qkv.evaluate_translations(HYPS, [["x"]])
    with pytest.raises(qkv.Error, match="no references"):
        qkv.evaluate_translations(HYPS, [])
    with pytest.raises(TypeError):
        qkv.evaluate_translations(HYPS, REFS)  # one stream must be a list of streams, as in sacreBLEU
