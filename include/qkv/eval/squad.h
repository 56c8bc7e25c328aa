// SQuAD's scores of an extractive answer against the true ones, as the official evaluate-v2.0.py
// (and the `evaluate` library's squad and squad_v2 metrics) compute them — the figures transformers'
// run_qa.py prints:
//
//   normalize(s)   lower-cased (Python's str.lower), ASCII punctuation removed, the words a, an, the
//                  (between non-word characters: re's \b) removed, whitespace runs made one space
//   exact match    1 where normalize(prediction) = normalize(truth), else 0
//   F1             over the normalized texts' words (multisets): common = |P ∩ T|,
//                  precision = common / |P|, recall = common / |T|, F1 = 2 p r / (p + r)
//                  (0 where nothing is common; 1 or 0 where either side has no word: both or one)
//   an example     the best of each score over its true answers (those that normalize to nothing left
//                  out); none: the one truth "" (SQuAD 2.0's unanswerable question: right only if the
//                  prediction is "")
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qkv::eval {

// normalize(s) above; s valid UTF-8.
std::string normalize_answer(std::string_view s);

struct AnswerScores {
  double exact_match = 0, f1 = 0;  // each in [0, 1]
};

// One prediction against its example's true answers (empty: unanswerable).
AnswerScores answer_scores(std::string_view prediction, const std::vector<std::string>& truths);

}  // namespace qkv::eval
