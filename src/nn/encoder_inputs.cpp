#include "qkv/nn/encoder_inputs.h"

#include "qkv/core/error.h"

namespace qkv::nn {

std::vector<bool> tokens_kept(const Tensor& attention_mask, const Tensor& ids, const char* model) {
  if (!attention_mask.defined()) return {};
  QKV_CHECK(attention_mask.shape() == ids.shape() && attention_mask.dtype() == DType::i32, model,
            ": attention_mask must be i32 ", shape_str(ids.shape()), " as input_ids, got ",
            shape_str(attention_mask.shape()));
  const int64_t B = ids.size(0), T = ids.size(1);
  const std::vector<int32_t> m = attention_mask.to_ints();
  std::vector<bool> keep(m.size());
  for (int64_t b = 0; b < B; ++b) {
    bool any = false;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t v = m[static_cast<size_t>(b * T + t)];
      QKV_CHECK(v == 0 || v == 1, model, ": attention_mask holds ", v, " (row ", b, "); 1 marks a token, 0 padding");
      keep[static_cast<size_t>(b * T + t)] = v == 1;
      any = any || v == 1;
    }
    QKV_CHECK(any, model, ": row ", b, " of attention_mask has no token (all padding)");
  }
  return keep;
}

}  // namespace qkv::nn
