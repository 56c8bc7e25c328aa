// Embedding lookup: out[i, :] = weight[ids[i], :], and its backward, a scatter-add:
//   dweight[ids[i], :] += dout[i, :]   (rows equal to padding_idx get no gradient)
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// Throws qkv::Error naming the bad id when an id is outside [0, vocab).
void embedding_forward(const float* weight, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n, float* out);
void embedding_backward(const float* dout, const int32_t* ids, int64_t n, int64_t dim, int64_t padding_idx,
                        float* dweight);

}  // namespace qkv::kernels::cpu
