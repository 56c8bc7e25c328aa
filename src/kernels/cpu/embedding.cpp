#include "kernels/cpu/embedding.h"

#include <cstring>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

void embedding_forward(const float* weight, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i)
    QKV_CHECK(ids[i] >= 0 && ids[i] < vocab, "embedding: id ", ids[i], " at position ", i,
              " is outside the vocabulary [0, ", vocab, ")");
  parallel_for(n, 1 + 8192 / (dim + 1), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memcpy(out + i * dim, weight + static_cast<int64_t>(ids[i]) * dim, static_cast<size_t>(dim) * sizeof(float));
  });
}

void embedding_backward(const float* dout, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab,
                        int64_t padding_idx, float* dweight) {
  // Parallel over feature columns: each thread owns a slice of every row, so no two threads
  // ever add into the same element.
  parallel_for(dim, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] == padding_idx || ids[i] < 0 || ids[i] >= vocab) continue;
      float* dst = dweight + static_cast<int64_t>(ids[i]) * dim;
      const float* src = dout + i * dim;
      for (int64_t j = b; j < e; ++j) dst[j] += src[j];
    }
  });
}

}  // namespace qkv::kernels::cpu
