// Extractive question answering: the span of a context that answers a question, read from a
// …ForQuestionAnswering model's start and end logits as transformers' pipeline("question-answering")
// reads them (transformers 4.x; 5 dropped the pipeline, the checkpoints stayed):
//
//   windows    (question, context) cut as tokenizer(question, context, truncation="only_second",
//              max_length=max_seq_len, stride=doc_stride, return_overflowing_tokens=True): the context
//              in windows of the room the question leaves, each doc_stride tokens into the one before
//   allowed    the window's context tokens and [CLS]: m_t = 1, the others (question, special, padding) 0
//   per window p_s = softmax_t(m_t ? start_t : −10000),  p_e = softmax_t(m_t ? end_t : −10000)
//              null = p_s[0] · p_e[0] (the "no answer" score, with handle_impossible_answer);
//              p_s[0] = p_e[0] = 0
//              score(s, e) = p_s[s] · p_e[e]   for s ≤ e < s + max_answer_len, m_s = m_e = 1
//              the best top_k (align_to_words: 2·top_k + 10) spans of the window, each to characters:
//              its first token's word's start to its last token's word's end (align_to_words; that
//              word's tokens in this window), or its tokens' own offsets
//   answers    spans of the same text (compared lower-cased) from any window: their scores summed,
//              the first one's place kept; with handle_impossible_answer one answer "" at 0 scored by
//              the least null of the windows; the best top_k, equal scores in the order found
//
// A score is a probability product (one span) or a sum of them (a text found in several windows),
// as the pipeline's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/models/model.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv::decode {

struct QuestionAnsweringOptions {
  int64_t top_k = 1;            // answers per question, best first (fewer where fewer are found)
  int64_t max_seq_len = 0;      // window length in tokens; 0: min(model_max_length, 384), at most the positions
  int64_t doc_stride = -1;      // tokens a window reaches into the one before; -1: min(max_seq_len / 2, 128)
  int64_t max_answer_len = 15;  // tokens
  bool handle_impossible_answer = false;
  bool align_to_words = true;
  int64_t batch_size = 32;  // windows a forward
};

struct Answer {
  double score = 0;
  size_t start = 0, end = 0;  // bytes of the context (made valid UTF-8): answer = context[start, end)
  std::string answer;
};

// The window max_seq_len 0 stands for: the pipeline's min(model_max_length, 384), at most the model's
// positions.
int64_t default_window(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer);

// Each (questions[i], contexts[i])'s answers. A model without a question-answering head, lists of
// different lengths, an empty question or context, a question that leaves no room in max_seq_len, a
// doc_stride past max_seq_len, top_k or max_answer_len < 1: qkv::Error naming it.
std::vector<std::vector<Answer>> question_answering(const models::MaskedLanguageModel& model,
                                                    const text::HfTokenizer& tokenizer,
                                                    const std::vector<std::string>& questions,
                                                    const std::vector<std::string>& contexts,
                                                    const QuestionAnsweringOptions& options = {});

}  // namespace qkv::decode
