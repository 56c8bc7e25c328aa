#include "qkv/text/batching.h"

#include <algorithm>

namespace qkv::text {

std::vector<std::vector<size_t>> token_batches(const std::vector<EncodedPair>& pairs, const std::vector<size_t>& order,
                                               int64_t max_tokens) {
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> cur;
  size_t longest = 0;
  for (size_t i : order) {
    const size_t len = std::max(pairs[i].src.size(), pairs[i].tgt.size() - 1);
    const size_t l = std::max(longest, len);
    if (!cur.empty() && static_cast<int64_t>(l * (cur.size() + 1)) > max_tokens) {
      out.push_back(std::move(cur));
      cur.clear();
      longest = 0;
    }
    cur.push_back(i);
    longest = std::max(longest, len);
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

Batch make_batch(const std::vector<EncodedPair>& pairs, const std::vector<size_t>& index, int32_t pad, size_t pad_src,
                 size_t pad_tgt) {
  size_t S = pad_src, T = pad_tgt;
  for (size_t i : index) S = std::max(S, pairs[i].src.size()), T = std::max(T, pairs[i].tgt.size() - 1);
  const auto B = static_cast<int64_t>(index.size());
  std::vector<int32_t> src(B * S, pad), tin(B * T, pad), tout(B * T, pad);
  Batch b;
  for (size_t r = 0; r < index.size(); ++r) {
    const EncodedPair& p = pairs[index[r]];
    std::copy(p.src.begin(), p.src.end(), src.begin() + static_cast<std::ptrdiff_t>(r * S));
    std::copy(p.tgt.begin(), p.tgt.end() - 1, tin.begin() + static_cast<std::ptrdiff_t>(r * T));   // BOS y₁ … y_n
    std::copy(p.tgt.begin() + 1, p.tgt.end(), tout.begin() + static_cast<std::ptrdiff_t>(r * T));  // y₁ … y_n EOS
    b.tgt_tokens += static_cast<int64_t>(p.tgt.size() - 1);
  }
  b.src = TensorBase::from_ints(src, {B, static_cast<int64_t>(S)});
  b.tgt_in = TensorBase::from_ints(tin, {B, static_cast<int64_t>(T)});
  b.tgt_out = TensorBase::from_ints(tout, {B, static_cast<int64_t>(T)});
  return b;
}

}  // namespace qkv::text
