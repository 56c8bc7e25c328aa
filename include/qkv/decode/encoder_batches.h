// What the encoder pipelines (classify.cpp, question_answering.cpp) and the text-classification
// training task (train/text_classification_task.h) share: encodings padded into
// batches, longest first, and the token types the model is given.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "qkv/models/model.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv::decode::batching {

// A batch of encoded texts padded to the longest: ids, token types and attention_mask, i32 [B, T].
struct Batch {
  Tensor ids, types, mask;
  std::vector<int64_t> lengths;
  int64_t T = 0;
};

// The texts order[from … to) padded into one batch (row r is text order[from + r]).
Batch pad(const std::vector<text::HfEncoding>& encs, const std::vector<size_t>& order, size_t from, size_t to,
          int32_t pad_id);

// The token types the model is given (uses_token_types: the tokenizer's, else zeros), each checked
// against the types the model knows; `what` names the task in errors.
void give_token_types(text::HfEncoding& e, const models::MaskedLanguageModel& model, bool types, const char* what);

// Runs `run` on batches of at most batch_size texts, the texts taken longest first so that each batch
// pads little (as SentenceTransformer.encode orders them): run(batch, rows) where row r of the batch
// is text rows[r]. Each text's result does not depend on its neighbours (padding gets no attention).
// Without gradients.
void batches(const std::vector<text::HfEncoding>& encs, int64_t batch_size, int32_t pad_id,
             const std::function<void(const Batch&, const std::vector<size_t>&)>& run);

// The tokenizer's padding id (0 where it has none: padding gets no attention).
int32_t pad_id_of(const text::HfTokenizer& tokenizer);

}  // namespace qkv::decode::batching
