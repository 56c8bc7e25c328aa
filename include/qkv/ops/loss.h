// cross_entropy(logits [N, C], target i32 [N]) as torch.nn.functional.cross_entropy:
//   ℓ_n = −(1 − ε) log p_{n, y_n} − (ε / C) Σ_c log p_{n, c},   p = softmax(logits)
//   loss = mean over n with y_n ≠ ignore_index (reduction "mean"), or the sum ("sum"),
//   or per-row ℓ ("none", ignored rows 0).
// Backward: dlogits_n = (p_n − (1 − ε) onehot(y_n) − ε/C) · (dloss / count).
#pragma once

#include <string>

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     float label_smoothing = 0.f, const std::string& reduction = "mean");

}  // namespace qkv
