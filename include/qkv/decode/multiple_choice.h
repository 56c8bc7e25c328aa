// Multiple choice: which of a few endings follows a context best, read from a …ForMultipleChoice model
// (SWAG's task) as transformers' run_swag.py reads it —
//
//   pair_c     tokenizer(context, f"{header} {ending_c}", truncation=True, max_length): each choice
//              beside the context (header: the start of the ending the choices share, SWAG's sent2;
//              "" where there is none — the f-string's space kept, as run_swag.py keeps it)
//   score_c    the model's one output for pair_c (its first token, pooled, through the classifier)
//   p          softmax_c(score_c)
//
// There is no transformers pipeline for it; its models are scored as model(**pairs).logits is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/models/model.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv::decode {

// The choices' pairs, each with the token types the model is given (batching::give_token_types), cut
// to max_length tokens (longest_first). `what` names the input in errors.
std::vector<text::HfEncoding> choice_pairs(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer,
                                           const std::string& context, const std::string& header,
                                           const std::vector<std::string>& endings, int64_t max_length,
                                           const char* what);

struct ChoiceScore {
  std::string ending;
  double score = 0;  // softmax over the choices
  double logit = 0;
};

// The endings' probabilities, in their order. max_length 0: the tokenizer's model_max_length, at most
// 1,024 and the model's positions (run_swag.py's). A model without a multiple-choice head, fewer than
// two endings, a pair that cannot be cut to max_length: qkv::Error naming it.
std::vector<ChoiceScore> multiple_choice(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer,
                                         const std::string& context, const std::vector<std::string>& endings,
                                         const std::string& header = "", int64_t max_length = 0);

// run_swag.py's max_seq_length where none is given: model_max_length, at most 1,024 and the positions.
int64_t default_choice_length(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer);

}  // namespace qkv::decode
