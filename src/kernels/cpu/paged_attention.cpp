// Attention over a paged KV cache on the CPU (formulas: kernels/paged_attention.inc). One task per
// (query token, key/value head): the G query heads that share the head read each of its keys once —
// the scores of all G into a row each, their softmax, then the values summed with those weights.
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vec.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

void paged_attention_forward(const float* q, const float* k_cache, const float* v_cache, const int32_t* table,
                             const int32_t* seq, const int32_t* len, float* out, const PagedShape& s) {
  const int64_t G = s.H / s.Hkv, tasks = s.T * s.Hkv;
  parallel_for(tasks, 1, [&](int64_t b, int64_t e) {
    std::vector<float> scores;  // [G, keys]
    for (int64_t task = b; task < e; ++task) {
      const int64_t t = task / s.Hkv, kvh = task % s.Hkv;
      const int64_t n = len[t], lo = s.window > 0 ? std::max<int64_t>(0, n - s.window) : 0, keys = n - lo;
      const int32_t* pages = table + static_cast<int64_t>(seq[t]) * s.max_pages;
      float* o = out + (t * s.H + kvh * G) * s.Dv;  // the G heads' outputs, [G, Dv]
      std::memset(o, 0, static_cast<size_t>(G * s.Dv) * sizeof(float));
      if (keys <= 0) continue;
      auto slot = [&](int64_t j) { return static_cast<int64_t>(pages[j / s.page_size]) * s.page_size + j % s.page_size; };
      // scores[g, j − lo] = scale · q[t, kvh·G + g] · k[slot(j), kvh]
      scores.resize(static_cast<size_t>(G * keys));
      const float* qt = q + (t * s.H + kvh * G) * s.D;
      for (int64_t j = lo; j < n; ++j) {
        const float* kj = k_cache + (slot(j) * s.Hkv + kvh) * s.D;
        for (int64_t g = 0; g < G; ++g) scores[static_cast<size_t>(g * keys + j - lo)] = s.scale * dot(qt + g * s.D, kj, s.D);
      }
      // p = softmax(scores) per head; o[g] = Σ_j p[g, j] · v[slot(j), kvh]
      for (int64_t g = 0; g < G; ++g) {
        float* p = scores.data() + g * keys;
        const float m = max_of(p, keys);
        scale(p, keys, 1.f / exp_shift_sum(p, p, keys, m));
      }
      for (int64_t j = lo; j < n; ++j) {
        const float* vj = v_cache + (slot(j) * s.Hkv + kvh) * s.Dv;
        for (int64_t g = 0; g < G; ++g) {
          const float w = scores[static_cast<size_t>(g * keys + j - lo)];
          float* og = o + g * s.Dv;
          for (int64_t d = 0; d < s.Dv; ++d) og[d] += w * vj[d];
        }
      }
    }
  });
}

void paged_kv_write(float* k_cache, float* v_cache, const float* k, const float* v, const int32_t* slots, int64_t T,
                    int64_t k_row, int64_t v_row, int64_t /*cache_slots: checked by the op*/) {
  parallel_for(T, 1 + 4096 / (k_row + v_row + 1), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      std::memcpy(k_cache + slots[t] * k_row, k + t * k_row, static_cast<size_t>(k_row) * sizeof(float));
      std::memcpy(v_cache + slots[t] * v_row, v + t * v_row, static_cast<size_t>(v_row) * sizeof(float));
    }
  });
}

}  // namespace qkv::kernels::cpu
