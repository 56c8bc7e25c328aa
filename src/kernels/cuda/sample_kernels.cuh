// sample_rows's kernel (sample.cu launches it; tests/kernels/sample_emulation_test.cpp runs it on the
// host through tests/kernels/cuda_emulation.h). Formula and contract: kernels/sample.inc.
//
// A block of kSampleThreads a row; thread k takes the k-th contiguous chunk of the row, and every pass
// recomputes t_j = f32(x_j / T) from the logits (no scratch: the row stays in L2).
// - Greedy: the block's largest topk key (value, then the lower index; NaN below every number).
// - Sampled: the tempered maximum (and any NaN); then the filters as thresholds on the order key of
//   t (kernels/topk.h's float_order), each found by a radix select — four passes over the row, one a
//   byte of the key from the top, a 256-bin histogram in shared memory (integer atomics: the same
//   result every run), thread 0 walking the bins from the largest:
//     top-k: κ_k = the largest key with count(key ≥ κ_k) ≥ k — the k-th largest t, ties with it kept;
//     top-p: over the keys ≥ κ_k, weights q_j = ⌊exp(t_j − m) / S_k · 2⁶²⌋ (S_k: Σ exp over them, a
//            block sum in f64) — κ_p = the largest key with mass(key ≥ κ_p) ≥ ⌈p · 2⁶²⌉; of the
//            tokens at κ_p (equal t, equal q) the first c in index order stay, c the fewest that reach
//            p; a total short of it (truncation) keeps every token ≥ κ_k.
//   Then the draw over the survivors: Σ exp in f64 (a block sum), each chunk's Σ p_j in index order,
//   and thread 0's walk over the chunks' sums and, in the chunk where u falls, its p_j one by one —
//   the CPU's sequential cumulative sum, but for where the chunks begin (a rounding apart).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/penalties.h"
#include "kernels/topk.h"  // topk_key: the greedy rows' order; float_order: the filters' keys

namespace qkv::kernels::cuda {
namespace {

constexpr int kSampleThreads = 256;  // = the radix's 256 bins: thread k clears bin k

struct MaxKey64 {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};
struct MaxF {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};
struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct OrI {
  __device__ int operator()(int a, int b) const { return a | b; }
};

__device__ inline float tempered(const float* x, int64_t j, double T) {
  return static_cast<float>(static_cast<double>(x[j]) / T);
}
__device__ inline double weight_of(float t, float m) { return exp(static_cast<double>(t) - static_cast<double>(m)); }

// A radix select's answer (shared memory): the largest key whose weight at or above it reaches the
// need, the weight above it, and the count and weight at it; found = 0: the total is short of the need.
struct Selected {
  uint32_t key;
  int found;
  unsigned long long above, count, at;
};

// The largest key κ with Σ_{key_j ≥ κ} w_j ≥ need, over the row's chunk [lo, hi) in every thread;
// weight(j, t, key) → w_j (0: not counted). Four passes, a byte each from the top. Every thread calls it.
template <class Weight>
__device__ void radix_select(const float* row, int64_t lo, int64_t hi, double T, Weight weight, unsigned long long need,
                             unsigned long long* bin_count, unsigned long long* bin_weight, Selected* s) {
  const int k = threadIdx.x;
  if (k == 0) s->key = 0, s->found = 1, s->above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    bin_count[k] = 0, bin_weight[k] = 0;
    __syncthreads();
    const uint32_t high = shift == 24 ? 0u : ~0u << (shift + 8), prefix = s->key;  // the digits chosen so far
    for (int64_t j = lo; j < hi; ++j) {
      const float t = tempered(row, j, T);
      const uint32_t key = float_order(t);
      if ((key & high) != prefix) continue;
      const unsigned long long w = weight(j, t, key);
      if (w == 0) continue;
      atomicAdd(&bin_count[(key >> shift) & 255u], 1ull);
      atomicAdd(&bin_weight[(key >> shift) & 255u], w);
    }
    __syncthreads();
    if (k == 0) {
      unsigned long long above = s->above;
      int b = 255;
      for (; b >= 0 && above + bin_weight[b] < need; --b) above += bin_weight[b];
      if (b < 0) s->found = 0;
      else s->key = prefix | (static_cast<uint32_t>(b) << shift), s->above = above, s->count = bin_count[b], s->at = bin_weight[b];
    }
    __syncthreads();
    if (!s->found) return;
  }
}

__global__ void sample_rows_kernel(const float* x, int64_t n, const double* params, int32_t* out) {
  QKV_SHARED double chunk_sum[kSampleThreads];
  QKV_SHARED int64_t chunk_last[kSampleThreads];
  QKV_SHARED unsigned long long bin_count[kSampleThreads], bin_weight[kSampleThreads];
  QKV_SHARED Selected sel;
  QKV_SHARED int64_t cut_shared;
  const int64_t r = blockIdx.x, k = threadIdx.x;
  const float* row = x + r * n;
  const double T = params[4 * r], top_p = params[4 * r + 2], draw = params[4 * r + 3];
  const auto top_k = static_cast<int64_t>(params[4 * r + 1]);
  const int64_t per = (n + kSampleThreads - 1) / kSampleThreads, lo = k * per < n ? k * per : n,
                hi = lo + per < n ? lo + per : n;
  if (T <= 0) {  // the first of the largest: topk's key (value, then the lower index), NaN below all (0)
    uint64_t best = 0;
    for (int64_t j = lo; j < hi; ++j) {
      const uint64_t key = row[j] == row[j] ? topk_key(row[j], j) : 0;
      if (key > best) best = key;
    }
    best = block_reduce(best, MaxKey64{}, uint64_t{0});
    if (k == 0) out[r] = best == 0 ? 0 : static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best));
    return;
  }
  float m = -INFINITY;
  int nan = 0;
  for (int64_t j = lo; j < hi; ++j) {
    const float t = tempered(row, j, T);
    nan |= t != t;
    m = MaxF{}(m, t);
  }
  m = block_reduce(m, MaxF{}, -INFINITY);
  nan = block_reduce(nan, OrI{}, 0);
  if (nan || !isfinite(m)) {  // no distribution: the caller's error
    if (k == 0) out[r] = -1;
    return;
  }
  // top-k: survivors have key ≥ keep_k
  uint32_t keep_k = 0;
  if (top_k > 0) {
    radix_select(row, lo, hi, T, [](int64_t, float, uint32_t) { return 1ull; }, static_cast<unsigned long long>(top_k),
                 bin_count, bin_weight, &sel);
    keep_k = sel.key;  // (k < n: always found)
  }
  // top-p: survivors have key > keep_p, or key = keep_p and j < cut
  uint32_t keep_p = keep_k;
  int64_t cut = n;
  if (top_p < 1) {
    double s = 0;
    for (int64_t j = lo; j < hi; ++j) {
      const float t = tempered(row, j, T);
      if (float_order(t) >= keep_k) s += weight_of(t, m);
    }
    const double sum = block_reduce(s, SumD{}, 0.0);
    const auto need = static_cast<unsigned long long>(ceil(top_p * 0x1.0p62));
    radix_select(
        row, lo, hi, T,
        [&](int64_t, float t, uint32_t key) {
          return key >= keep_k ? static_cast<unsigned long long>(weight_of(t, m) / sum * 0x1.0p62) : 0ull;
        },
        need, bin_count, bin_weight, &sel);
    if (sel.found) {
      keep_p = sel.key;
      // the fewest tokens at κ_p (each weighing at / count) that reach the need, in index order: the
      // c-th's index + 1 is the cut
      const unsigned long long each = sel.at / sel.count, short_by = need - sel.above;
      const unsigned long long c = (short_by + each - 1) / each;
      int64_t equal = 0;
      for (int64_t j = lo; j < hi; ++j) equal += float_order(tempered(row, j, T)) == keep_p;
      chunk_last[k] = equal;
      __syncthreads();
      if (k == 0) {
        unsigned long long seen = 0;
        int64_t at = n;
        for (int q = 0; q < kSampleThreads && at == n; ++q) {
          if (seen + static_cast<unsigned long long>(chunk_last[q]) < c) {
            seen += static_cast<unsigned long long>(chunk_last[q]);
            continue;
          }
          const int64_t a = q * per, e = a + per < n ? a + per : n;
          for (int64_t j = a; j < e && at == n; ++j)
            if (float_order(tempered(row, j, T)) == keep_p && ++seen == c) at = j + 1;
        }
        cut_shared = at;
      }
      __syncthreads();
      cut = cut_shared;
    }
  }
  const auto survives = [&](int64_t j, float t) {
    const uint32_t key = float_order(t);
    return key > keep_p || (key == keep_p && j < cut);
  };
  double s = 0;
  for (int64_t j = lo; j < hi; ++j) {
    const float t = tempered(row, j, T);
    if (survives(j, t)) s += weight_of(t, m);
  }
  const double sum = block_reduce(s, SumD{}, 0.0);
  // this chunk's Σ p_j in index order, and its last j with p_j > 0
  double c = 0;
  int64_t last = -1;
  for (int64_t j = lo; j < hi; ++j) {
    const float t = tempered(row, j, T);
    const double p = survives(j, t) ? weight_of(t, m) / sum : 0.0;
    if (p > 0) c += p, last = j;
  }
  __syncthreads();  // (chunk_last may still be read by top-p's cut)
  chunk_sum[k] = c, chunk_last[k] = last;
  __syncthreads();
  if (k != 0) return;
  double cum = 0;
  int64_t final_last = -1;
  for (int q = 0; q < kSampleThreads; ++q) {
    if (chunk_last[q] >= 0) final_last = chunk_last[q];
    if (!(draw < cum + chunk_sum[q])) {
      cum += chunk_sum[q];
      continue;
    }
    // u falls in chunk q: its p_j one by one (rounding may carry it past the chunk: then on)
    const int64_t a = q * per, e = a + per < n ? a + per : n;
    for (int64_t j = a; j < e; ++j) {
      const float t = tempered(row, j, T);
      const double p = survives(j, t) ? weight_of(t, m) / sum : 0.0;
      if (p <= 0) continue;
      cum += p;
      if (draw < cum) {
        out[r] = static_cast<int32_t>(j);
        return;
      }
    }
  }
  out[r] = static_cast<int32_t>(final_last);
}

// apply_penalties: a thread an entry (a row's entries name distinct tokens: no two threads write one logit)
__global__ void apply_penalties_kernel(float* x, int64_t n, const int32_t* seen, int64_t m, const float* penalties) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m) return;
  const int32_t* s = seen + 4 * e;  // (row, token, count, in prompt)
  const float* r = penalties + 3 * s[0];
  float& v = x[s[0] * n + s[1]];
  v = penalized(v, s[2], s[3] != 0, r[0], r[1], r[2]);
}

#undef QKV_SHARED

}  // namespace
}  // namespace qkv::kernels::cuda
