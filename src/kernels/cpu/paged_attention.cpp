// Attention over a paged KV cache on the CPU (formulas: kernels/paged_attention.inc). One task per
// (query token, key/value head): the scores of the G query heads that share the head into a row each
// (four keys at a time), their softmax, then the values summed with those weights (a page's rows into
// registers) — a page's keys of the head in one run of memory. A bf16 cache's rows are widened as
// they are read.
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vec.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

// a cache element as f32 (a bf16 one widened: its bits the top half)
inline float widen(float x) { return x; }
inline float widen(bf16 x) { return bf16_to_f32(x); }

#if QKV_SIMD
// a cache row's lanes as f32
inline simd::vf load_row(const float* p) { return simd::load(p); }
inline simd::vf load_row(const bf16* p) { return simd::load_bf16(p); }
#endif

// out[r] = scale · q · k[r] for the `run` rows of a page (k [run, D]): four keys at a time, q's
// registers loaded once for the four and their four sums reduced together
template <typename C>
void score_rows(const float* q, const C* k, int64_t run, int64_t D, float scale, float* out) {
  int64_t r = 0;
#if QKV_SIMD
  const int64_t Dvec = D - D % kLanes;  // the vector part; the rest one by one
  for (; r + 4 <= run; r += 4) {
    const C* k0 = k + r * D;
    simd::vf a0 = simd::zero(), a1 = simd::zero(), a2 = simd::zero(), a3 = simd::zero();
    for (int64_t d = 0; d < Dvec; d += kLanes) {
      const simd::vf x = simd::load(q + d);
      a0 = simd::fmadd(x, load_row(k0 + d), a0);
      a1 = simd::fmadd(x, load_row(k0 + D + d), a1);
      a2 = simd::fmadd(x, load_row(k0 + 2 * D + d), a2);
      a3 = simd::fmadd(x, load_row(k0 + 3 * D + d), a3);
    }
    float sums[4];
    simd::reduce_add4(a0, a1, a2, a3, sums);
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t d = Dvec; d < D; ++d) sums[i] += q[d] * widen(k0[i * D + d]);
      out[r + i] = scale * sums[i];
    }
  }
#endif
  for (; r < run; ++r) out[r] = scale * dot(q, k + r * D, D);
}

// o[d] += Σ_r w[r] · v[r, d] over the `run` rows of a page (v [run, Dv]): each column block of o kept in
// registers across the rows — one load and one store of o per page, not per key
template <typename C>
void add_weighted_rows(float* o, const float* w, const C* v, int64_t run, int64_t Dv) {
  int64_t d = 0;
#if QKV_SIMD
  constexpr int64_t B = 4 * kLanes;  // four registers of o at a time
  for (; d + B <= Dv; d += B) {
    simd::vf a0 = simd::load(o + d), a1 = simd::load(o + d + kLanes), a2 = simd::load(o + d + 2 * kLanes),
             a3 = simd::load(o + d + 3 * kLanes);
    for (int64_t r = 0; r < run; ++r) {
      const simd::vf x = simd::set1(w[r]);
      const C* vr = v + r * Dv + d;
      a0 = simd::fmadd(x, load_row(vr), a0);
      a1 = simd::fmadd(x, load_row(vr + kLanes), a1);
      a2 = simd::fmadd(x, load_row(vr + 2 * kLanes), a2);
      a3 = simd::fmadd(x, load_row(vr + 3 * kLanes), a3);
    }
    simd::store(o + d, a0), simd::store(o + d + kLanes, a1), simd::store(o + d + 2 * kLanes, a2),
        simd::store(o + d + 3 * kLanes, a3);
  }
  for (; d + kLanes <= Dv; d += kLanes) {
    simd::vf a = simd::load(o + d);
    for (int64_t r = 0; r < run; ++r) a = simd::fmadd(simd::set1(w[r]), load_row(v + r * Dv + d), a);
    simd::store(o + d, a);
  }
#endif
  for (; d < Dv; ++d) {
    float a = o[d];
    for (int64_t r = 0; r < run; ++r) a += w[r] * widen(v[r * Dv + d]);
    o[d] = a;
  }
}

template <typename C>
void forward(const float* q, const C* k_cache, const C* v_cache, const int32_t* table, const int32_t* seq,
             const int32_t* len, float* out, const PagedShape& s) {
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
      // page by page: keys j … j + run − 1 lie together, k[page, kvh, o … o + run − 1]
      auto each_run = [&](auto&& f) {
        for (int64_t j = lo; j < n;) {
          const int64_t off = j % s.page_size, run = std::min(s.page_size - off, n - j);
          const int64_t at = (static_cast<int64_t>(pages[j / s.page_size]) * s.Hkv + kvh) * s.page_size + off;
          f(j - lo, at, run);
          j += run;
        }
      };
      // scores[g, j − lo] = scale · q[t, kvh·G + g] · k_j
      scores.resize(static_cast<size_t>(G * keys));
      const float* qt = q + (t * s.H + kvh * G) * s.D;
      each_run([&](int64_t i0, int64_t at, int64_t run) {
        for (int64_t g = 0; g < G; ++g)
          score_rows(qt + g * s.D, k_cache + at * s.D, run, s.D, s.scale, scores.data() + g * keys + i0);
      });
      // p = softmax(scores) per head; o[g] = Σ_j p[g, j] · v_j
      for (int64_t g = 0; g < G; ++g) {
        float* p = scores.data() + g * keys;
        const float m = max_of(p, keys);
        scale(p, keys, 1.f / exp_shift_sum(p, p, keys, m));
      }
      each_run([&](int64_t i0, int64_t at, int64_t run) {
        for (int64_t g = 0; g < G; ++g)
          add_weighted_rows(o + g * s.Dv, scores.data() + g * keys + i0, v_cache + at * s.Dv, run, s.Dv);
      });
    }
  });
}

// a row of new keys or values into the cache: copied, or rounded to bf16
inline void store_row(float* dst, const float* src, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); }
inline void store_row(bf16* dst, const float* src, int64_t n) { bf16_row(src, dst, n); }

// k[slot / page_size, h, slot mod page_size] = k_new[t, h] (and v)
template <typename C>
void write(C* k_cache, C* v_cache, const float* k, const float* v, const int32_t* slots, const PagedShape& s) {
  parallel_for(s.T, 1 + 4096 / (s.Hkv * (s.D + s.Dv) + 1), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t page = slots[t] / s.page_size, off = slots[t] % s.page_size;
      for (int64_t h = 0; h < s.Hkv; ++h) {
        const int64_t at = (page * s.Hkv + h) * s.page_size + off;
        store_row(k_cache + at * s.D, k + (t * s.Hkv + h) * s.D, s.D);
        store_row(v_cache + at * s.Dv, v + (t * s.Hkv + h) * s.Dv, s.Dv);
      }
    }
  });
}

}  // namespace

void paged_attention_forward(const float* q, const float* k_cache, const float* v_cache, const int32_t* table,
                             const int32_t* seq, const int32_t* len, float* out, const PagedShape& s) {
  forward(q, k_cache, v_cache, table, seq, len, out, s);
}
void paged_attention_forward(const float* q, const bf16* k_cache, const bf16* v_cache, const int32_t* table,
                             const int32_t* seq, const int32_t* len, float* out, const PagedShape& s) {
  forward(q, k_cache, v_cache, table, seq, len, out, s);
}
void paged_kv_write(float* k_cache, float* v_cache, const float* k, const float* v, const int32_t* slots,
                    const PagedShape& s) {
  write(k_cache, v_cache, k, v, slots, s);
}
void paged_kv_write(bf16* k_cache, bf16* v_cache, const float* k, const float* v, const int32_t* slots,
                    const PagedShape& s) {
  write(k_cache, v_cache, k, v, slots, s);
}

}  // namespace qkv::kernels::cpu
