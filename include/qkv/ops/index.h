// Picking rows, as torch.index_select:
//
//   index_select(t, dim, index):  out[…, i, …] = t[…, index[i], …]   (any dtype; repeats allowed)
//   backward (f32):               dt[…, index[i], …] += dout[…, i, …]
//
// Decoding regroups its per-hypothesis tensors with it (beam search keeps, repeats and drops rows).
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor index_select(const Tensor& t, int64_t dim, const std::vector<int64_t>& index);

}  // namespace qkv
