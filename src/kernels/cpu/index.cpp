#include "kernels/cpu/index.h"

#include <algorithm>
#include <cstring>

#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

// out[o, i, :] = src[o, index[i], :]
void index_select(const uint8_t* src, int64_t outer, int64_t n, int64_t inner_bytes, const int64_t* index,
                  int64_t n_index, uint8_t* out) {
  const auto row = static_cast<size_t>(inner_bytes);
  parallel_for(outer * n_index, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(inner_bytes, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   const int64_t o = r / n_index, i = r % n_index;
                   std::memcpy(out + static_cast<size_t>(r) * row, src + static_cast<size_t>(o * n + index[i]) * row, row);
                 }
               });
}

// dst[o, index[i], :] += src[o, i, :]   (serial over i: repeated indices add up in order)
void index_add(float* dst, int64_t outer, int64_t n, int64_t inner, const int64_t* index, int64_t n_index,
               const float* src) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < n_index; ++i) {
      float* d = dst + (o * n + index[i]) * inner;
      const float* s = src + (o * n_index + i) * inner;
      for (int64_t j = 0; j < inner; ++j) d[j] += s[j];
    }
}

// m[i, j] = j ≤ i + offset
void causal_mask(uint8_t* out, int64_t Lq, int64_t Lk, int64_t offset) {
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t j = 0; j < Lk; ++j) out[i * Lk + j] = j <= i + offset;
}

}  // namespace qkv::kernels::cpu
