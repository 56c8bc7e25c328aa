// embedding(ids, weight): rows of weight [V, E] picked by i32 ids of any shape → [..., E].
// Backward scatter-adds into dweight; the padding_idx row (if ≥ 0) gets no gradient.
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor embedding(const Tensor& ids, const Tensor& weight, int64_t padding_idx = -1);

}  // namespace qkv
