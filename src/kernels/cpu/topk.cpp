#include "kernels/cpu/topk.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/topk.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

// A row's k best keys by a min-heap of k (O(n log k)), then sorted best first.
void topk(const float* x, int64_t rows, int64_t n, int64_t k, float* values, int32_t* indices) {
  parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<uint64_t> heap;
    heap.reserve(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = x + r * n;
      heap.clear();
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t key = topk_key(row[i], i);
        if (static_cast<int64_t>(heap.size()) < k) {
          heap.push_back(key);
          std::push_heap(heap.begin(), heap.end(), std::greater<>());
        } else if (key > heap.front()) {
          std::pop_heap(heap.begin(), heap.end(), std::greater<>());
          heap.back() = key;
          std::push_heap(heap.begin(), heap.end(), std::greater<>());
        }
      }
      std::sort(heap.begin(), heap.end(), std::greater<>());
      for (int64_t j = 0; j < k; ++j) {
        const auto i = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(heap[static_cast<size_t>(j)]));
        values[r * k + j] = row[i];
        indices[r * k + j] = i;
      }
    }
  });
}

}  // namespace qkv::kernels::cpu
