#include "qkv/decode/multiple_choice.h"

#include <algorithm>
#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/decode/classify.h"
#include "qkv/decode/encoder_batches.h"
#include "qkv/decode/sampling.h"
#include "qkv/ops.h"

namespace qkv::decode {

int64_t default_choice_length(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer) {
  return std::min<int64_t>({tokenizer.model_max_length().value_or(1024), 1024, model.max_positions()});
}

std::vector<text::HfEncoding> choice_pairs(const models::MaskedLanguageModel& model, const text::HfTokenizer& tok,
                                           const std::string& context, const std::string& header,
                                           const std::vector<std::string>& endings, int64_t max_length,
                                           const char* what) {
  const bool types = uses_token_types(model, tok);
  std::vector<text::HfEncoding> out;
  out.reserve(endings.size());
  for (const std::string& ending : endings) {
    // run_swag.py's second sentence: f"{header} {ending}"
    text::HfEncoding e = tok.encode_pair_truncated(context, header + " " + ending, max_length);
    QKV_CHECK(static_cast<int64_t>(e.ids.size()) <= max_length, what, ": the choice \"", excerpt(ending),
              "\" and its context cannot be cut to ", max_length, " tokens");
    batching::give_token_types(e, model, types, what);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<ChoiceScore> multiple_choice(const models::MaskedLanguageModel& model, const text::HfTokenizer& tok,
                                         const std::string& context, const std::vector<std::string>& endings,
                                         const std::string& header, int64_t max_length) {
  QKV_CHECK(model.task().classifier == nn::BertClassifier::choice,
            "multiple choice: the model has no multiple-choice head (convert a …ForMultipleChoice folder, or put a "
            "new one on an encoder with qkv convert --head choice and train it: \"task\": \"multiple_choice\")");
  QKV_CHECK(endings.size() >= 2, "multiple choice: give two choices at least, got ", endings.size());
  if (max_length <= 0) max_length = default_choice_length(model, tok);
  QKV_CHECK(max_length <= model.max_positions(), "multiple choice: max_length ", max_length,
            " is more than the model's ", model.max_positions(), " positions");
  const std::vector<text::HfEncoding> pairs =
      choice_pairs(model, tok, context, header, endings, max_length, "multiple choice");
  std::vector<size_t> rows(pairs.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  const NoGradGuard no_grad;
  const batching::Batch b = batching::pad(pairs, rows, 0, rows.size(), batching::pad_id_of(tok));
  const std::vector<float> z = model.classify(b.ids, b.types, b.mask).to_vector();  // [C, 1]
  const std::vector<double> p = softmax_probs(z);
  std::vector<ChoiceScore> out;
  for (size_t c = 0; c < endings.size(); ++c) out.push_back({endings[c], p[c], static_cast<double>(z[c])});
  return out;
}

}  // namespace qkv::decode
