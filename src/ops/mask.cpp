#include "qkv/ops/mask.h"

#include <cmath>

#include "dispatch.h"
#include "kernels/cpu/index.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/compare.h"

namespace qkv {

using ops_detail::device_of;

Tensor attention_mask_from_padding(const Tensor& kpm) {
  QKV_CHECK(kpm.dim() == 2 && kpm.dtype() == DType::boolean, "attention_mask_from_padding: the key padding mask "
            "must be boolean [B, S] (true = padding), got ", kpm.str());
  return logical_not(kpm).view({kpm.size(0), 1, 1, kpm.size(1)});
}

Tensor attention_mask_from_lengths(const std::vector<int64_t>& lengths, int64_t S, Device device) {
  const auto B = static_cast<int64_t>(lengths.size());
  std::vector<bool> m(static_cast<size_t>(B * S));
  for (int64_t b = 0; b < B; ++b) {
    QKV_CHECK(lengths[b] >= 0 && lengths[b] <= S, "attention_mask_from_lengths: length ", lengths[b], " of row ", b,
              " is outside [0, ", S, "]");
    for (int64_t j = 0; j < S; ++j) m[static_cast<size_t>(b * S + j)] = j < lengths[b];
  }
  return Tensor::from_bools(m, {B, 1, 1, S}).to(device);
}

Tensor attention_mask_from_mha(const Tensor& attn_mask) {
  if (!attn_mask.defined() || attn_mask.dtype() != DType::boolean) return attn_mask;
  return logical_not(attn_mask);
}

Tensor causal_mask(int64_t Lq, int64_t Lk, int64_t offset, Device device) {
  QKV_CHECK(Lq >= 0 && Lk >= 0, "causal_mask: sizes ", Lq, " x ", Lk, " must not be negative");
  Tensor m = Tensor::empty({Lq, Lk}, DType::boolean, device);
  QKV_DISPATCH("causal_mask", device, k::causal_mask(m.data<uint8_t>(), Lq, Lk, offset));
  return m;
}

// j ≤ i + offset and not j ≤ i + offset − W: the causal mask less the one W keys further back.
Tensor sliding_window_mask(int64_t Lq, int64_t Lk, int64_t window, int64_t offset, Device device) {
  QKV_CHECK(window >= 1, "sliding_window_mask: the window must hold at least one key, got ", window);
  return logical_and(causal_mask(Lq, Lk, offset, device), logical_not(causal_mask(Lq, Lk, offset - window, device)));
}

// j ≤ i + w and not j ≤ i − w − 1
Tensor bidirectional_window_mask(int64_t L, int64_t w, Device device) {
  QKV_CHECK(w >= 0, "bidirectional_window_mask: the half window must not be negative, got ", w);
  return logical_and(causal_mask(L, L, w, device), logical_not(causal_mask(L, L, -w - 1, device)));
}

namespace {
// true → 0, false → −∞; a float mask stays as it is.
Tensor additive(const Tensor& m) {
  if (m.dtype() != DType::boolean) return m;
  return masked_fill(Tensor::zeros(m.shape()).to(m.device()), logical_not(m), -INFINITY);
}
}  // namespace

Tensor merge_attention_masks(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  if (a.dtype() == DType::boolean && b.dtype() == DType::boolean) return logical_and(a, b);
  return add(additive(a), additive(b));
}

}  // namespace qkv
