// Scores of predicted labels against true ones, as the fine-tuning tasks report them
// (train/text_classification_task.h) — the figures transformers' run_glue.py and run_ner.py print:
//
//   macro F1     (1/|K|) Σ_{k ∈ K} 2·tp_k / (2·tp_k + fp_k + fn_k),  K: the labels seen or predicted
//                (scikit-learn's f1_score(average="macro"))
//   entities     seqeval's: each sentence's tags cut into chunks (type, first, last) by its default,
//                conlleval-like rules (a chunk ends at E-/S-, at B-/I- followed by B-, S- or O, or at a
//                change of type; starts at B-/S-, at I-/E- after O, E- or S-, or at a change of type);
//                precision = correct / predicted, recall = correct / true, F1 their harmonic mean
//                (0 where a denominator is), a chunk correct when the same (type, first, last) is true
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace qkv::eval {

// Counts per label of one single-label classification, then its macro F1.
struct LabelCounts {
  explicit LabelCounts(size_t labels) : tp(labels, 0), fp(labels, 0), fn(labels, 0) {}
  void add(size_t predicted, size_t truth);  // both < the label count
  double macro_f1() const;                   // 0 when nothing was counted
  std::vector<int64_t> tp, fp, fn;
};

// seqeval's chunks of one sentence's tags ("B-PER", "I-PER", "O", …).
std::vector<std::tuple<std::string, size_t, size_t>> entities(const std::vector<std::string>& tags);

struct EntityScores {
  double precision = 0, recall = 0, f1 = 0;
  int64_t true_entities = 0, predicted = 0, correct = 0;
};
// seqeval's precision_score / recall_score / f1_score over sentences (truth[i] and predicted[i] of one
// length: the tagged tokens of sentence i).
EntityScores entity_scores(const std::vector<std::vector<std::string>>& truth,
                           const std::vector<std::vector<std::string>>& predicted);

}  // namespace qkv::eval
