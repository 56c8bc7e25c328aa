#include "qkv/decode/fill_mask.h"

#include "qkv/decode/classify.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"

namespace qkv::decode {

std::vector<std::vector<FillMaskCandidate>> fill_mask(const models::MaskedLanguageModel& model,
                                                      const text::HfTokenizer& tokenizer, const std::string& text,
                                                      const FillMaskOptions& options) {
  QKV_CHECK(model.has_mlm_head(), "fill-mask: the model has no masked-language-model head (a BertModel: it gives "
                                  "hidden states only; convert a BertForMaskedLM folder)");
  QKV_CHECK(options.top_k >= 1, "fill-mask: top_k must be at least 1, got ", options.top_k);
  const int32_t mask_id = tokenizer.mask_token_id();
  QKV_CHECK(mask_id >= 0, "fill-mask: the model's tokenizer has no mask token");
  const std::string mask_str = tokenizer.id_to_token(mask_id);
  text::HfEncoding enc;
  if (options.text_pair.empty()) enc.ids = tokenizer.encode(text), enc.token_type_ids.assign(enc.ids.size(), 0);
  else enc = tokenizer.encode_pair(text, options.text_pair);
  if (!uses_token_types(model, tokenizer)) enc.token_type_ids.assign(enc.ids.size(), 0);  // as transformers hands them
  std::vector<int64_t> masked;
  for (size_t i = 0; i < enc.ids.size(); ++i)
    if (enc.ids[i] == mask_id) masked.push_back(static_cast<int64_t>(i));
  QKV_CHECK(!masked.empty(), "fill-mask: the text '", excerpt(text), "' has no ", mask_str, " token to fill");
  const int64_t T = static_cast<int64_t>(enc.ids.size());
  QKV_CHECK(T <= model.max_positions(), "fill-mask: the text '", excerpt(text), "' is ", T,
            " tokens long, more than the model's ", model.max_positions(), " positions (max_position_embeddings)");
  for (int32_t t : enc.token_type_ids)
    QKV_CHECK(t < model.type_vocab_size() || t == 0, "fill-mask: the tokenizer gives token type ", t,
              " but the model knows ", model.type_vocab_size(), " (type_vocab_size)");

  Tensor logits;
  {
    NoGradGuard no_grad;
    logits = model.forward(Tensor::from_ints(enc.ids, {1, T}), Tensor::from_ints(enc.token_type_ids, {1, T}));
  }
  const int64_t V = logits.size(2);
  const std::vector<float> all = logits.to_vector();
  const int32_t pad = tokenizer.pad_token_id();
  const int64_t k = std::min<int64_t>(options.top_k, V);
  std::vector<std::vector<FillMaskCandidate>> out;
  for (int64_t pos : masked) {
    // p = softmax(logits[pos])
    const float* row = all.data() + pos * V;
    const double mx = *std::max_element(row, row + V);
    std::vector<double> p(static_cast<size_t>(V));
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += p[static_cast<size_t>(v)] = std::exp(static_cast<double>(row[v]) - mx);
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] || (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
    });
    std::vector<FillMaskCandidate> best;
    for (int64_t i = 0; i < k; ++i) {
      FillMaskCandidate c;
      c.token = order[static_cast<size_t>(i)];
      c.score = p[static_cast<size_t>(c.token)] / sum;
      c.token_str = tokenizer.decode({c.token});
      std::vector<int32_t> filled;
      for (int64_t t = 0; t < T; ++t) {
        const int32_t id = t == pos ? c.token : enc.ids[static_cast<size_t>(t)];
        if (id != pad) filled.push_back(id);
      }
      c.sequence = tokenizer.decode(filled, /*skip_special_tokens=*/masked.size() == 1);
      best.push_back(std::move(c));
    }
    out.push_back(std::move(best));
  }
  return out;
}

}  // namespace qkv::decode
