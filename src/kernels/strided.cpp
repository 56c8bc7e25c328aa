#include "kernels/strided.h"

namespace qkv::kernels {

StridedLoop coalesce(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& strides) {
  StridedLoop L;
  const size_t k = strides.size();
  L.strides.resize(k);
  // Drop size-1 dims (their strides never matter), then merge mergeable neighbours.
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!L.shape.empty()) {
      bool mergeable = true;
      for (size_t o = 0; o < k; ++o)
        if (L.strides[o].back() != strides[o][d] * shape[d]) mergeable = false;
      if (mergeable) {
        L.shape.back() *= shape[d];
        for (size_t o = 0; o < k; ++o) L.strides[o].back() = strides[o][d];
        continue;
      }
    }
    L.shape.push_back(shape[d]);
    for (size_t o = 0; o < k; ++o) L.strides[o].push_back(strides[o][d]);
  }
  if (L.shape.empty()) {
    L.shape.push_back(1);
    for (size_t o = 0; o < k; ++o) L.strides[o].push_back(0);
  }
  return L;
}

}  // namespace qkv::kernels
