// Fill-mask: a masked language model's guesses for each [MASK] of a text, as transformers'
// pipeline("fill-mask") gives them —
//
//   p(token | text) = softmax(logits[position of the mask])       one forward pass for every mask
//
// the top_k tokens of each mask (all of the vocabulary, special tokens included), each with its
// probability, its text (tokenizer.decode([token])) and the text with that mask filled in (the other
// masks kept; padding dropped; special tokens dropped when the text has one mask — the pipeline's
// rule).
#pragma once

#include <string>
#include <vector>

#include "qkv/models/model.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv::decode {

struct FillMaskCandidate {
  int32_t token = 0;
  std::string token_str;
  double score = 0;
  std::string sequence;
};

struct FillMaskOptions {
  int64_t top_k = 5;
  std::string text_pair;  // a second segment (token type 1), when not empty
};

// One list of top_k candidates per [MASK] of `text`, in the text's order. A text without the mask
// token, longer than the model's positions, a model without an MLM head or a tokenizer without a
// mask token: a qkv::Error naming the input.
std::vector<std::vector<FillMaskCandidate>> fill_mask(const models::MaskedLanguageModel& model,
                                                      const text::HfTokenizer& tokenizer, const std::string& text,
                                                      const FillMaskOptions& options = {});

}  // namespace qkv::decode
