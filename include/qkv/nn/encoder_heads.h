// What an encoder (BERT and its kin) is for, besides its hidden states: the classifier it carries,
// how its scores become probabilities, and how a sentence embedding is pooled from it. Shared by
// the networks (nn/bert.h) and the models floor's MaskedLanguageModel.
#pragma once

#include <cstdint>

#include "qkv/core/names.h"

namespace qkv::nn {

// span: extractive question answering's head (…ForQuestionAnswering's qa_outputs): per token, the
// logits of an answer starting and ending there — a token classifier of the two labels start, end.
// choice: multiple choice's (…ForMultipleChoice): a sequence classifier of one output, the score of a
// (context, choice) pair; the choices of a question are scored side by side and softmax'd.
enum class BertClassifier : uint8_t { none, sequence, token, span, choice };
constexpr EnumTable<BertClassifier, 5> enum_table(BertClassifier) {
  return {"classifier",
          {{{BertClassifier::none, "none"},
            {BertClassifier::sequence, "sequence"},
            {BertClassifier::token, "token"},
            {BertClassifier::span, "span"},
            {BertClassifier::choice, "choice"}}}};
}
// A classifier of the whole sequence (its first token, pooled), not of each token.
constexpr bool pools_sequence(BertClassifier c) { return c == BertClassifier::sequence || c == BertClassifier::choice; }
// How the classifier's scores become probabilities: transformers' config.problem_type (auto: its
// None — sigmoid for one label, softmax for more).
enum class BertProblem : uint8_t { auto_, single_label, multi_label, regression };
constexpr EnumTable<BertProblem, 4> enum_table(BertProblem) {
  return {"problem_type",
          {{{BertProblem::auto_, "auto"},
            {BertProblem::single_label, "single_label_classification"},
            {BertProblem::multi_label, "multi_label_classification"},
            {BertProblem::regression, "regression"}}}};
}
enum class BertPooler : uint8_t { none, tanh, relu, gelu };
constexpr EnumTable<BertPooler, 4> enum_table(BertPooler) {
  return {"pooler",
          {{{BertPooler::none, "none"},
            {BertPooler::tanh, "tanh"},
            {BertPooler::relu, "relu"},
            {BertPooler::gelu, "gelu"}}}};
}
// A sentence embedding from the hidden states (sentence-transformers' Pooling module): the first
// token's, or the mean or the max over the tokens (padding left out); unset: the caller's choice.
enum class BertPooling : uint8_t { unset, cls, mean, max };
constexpr EnumTable<BertPooling, 4> enum_table(BertPooling) {
  return {"pooling",
          {{{BertPooling::unset, "unset"},
            {BertPooling::cls, "cls"},
            {BertPooling::mean, "mean"},
            {BertPooling::max, "max"}}}};
}
// A cross-encoder's score of a (query, document) pair from its one logit (sentence-transformers'
// CrossEncoder activation_fn: config.json's sentence_transformers.activation_fn); unset: its
// default, sigmoid for one label.
enum class ScoreActivation : uint8_t { unset, sigmoid, identity };
constexpr EnumTable<ScoreActivation, 3> enum_table(ScoreActivation) {
  return {"score_activation",
          {{{ScoreActivation::unset, "unset"},
            {ScoreActivation::sigmoid, "sigmoid"},
            {ScoreActivation::identity, "identity"}}}};
}

}  // namespace qkv::nn
