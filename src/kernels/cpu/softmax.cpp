#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "qkv/core/parallel.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

void softmax_row_inplace(float* x, int64_t n) {
  float m = max_of(x, n);
  if (m == -INFINITY) {  // every entry masked
    std::memset(x, 0, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  float s = exp_shift_sum(x, x, n, m);
  scale(x, n, 1.0f / s);
}

void softmax_forward(const float* x, float* y, int64_t rows, int64_t n) {
  parallel_for(rows, 1 + 16384 / (n + 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      if (x != y) std::memcpy(y + r * n, x + r * n, static_cast<size_t>(n) * sizeof(float));
      softmax_row_inplace(y + r * n, n);
    }
  });
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
  parallel_for(rows, 1 + 16384 / (n + 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* yr = y + r * n;
      const float* gr = dy + r * n;
      float* dr = dx + r * n;
      float s = dot(yr, gr, n);
      for (int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - s);
    }
  });
}

void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t n) {
  parallel_for(rows, 1 + 16384 / (n + 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      float m = max_of(xr, n);
      // yr is the scratch of the exponentials; in place (x = y) a buffer of the thread's own is
      thread_local std::vector<float> own;
      if (x == y && own.size() < static_cast<size_t>(n)) own.resize(static_cast<size_t>(n));
      float s = exp_shift_sum(xr, x == y ? own.data() : yr, n, m);
      // (x − m) − log s, not x − (m + log s): m + log s would round to the precision of |m|.
      const float log_s = std::log(s);
      for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) - log_s;
    }
  });
}

void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
  parallel_for(rows, 1 + 16384 / (n + 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* yr = y + r * n;
      const float* gr = dy + r * n;
      float* dr = dx + r * n;
      float s = 0.f;
      for (int64_t j = 0; j < n; ++j) s += gr[j];
      for (int64_t j = 0; j < n; ++j) dr[j] = gr[j] - std::exp(yr[j]) * s;
    }
  });
}

// y_j = m_j + (log Σ_i exp(x_ij − m_j) − log k),  m_j = max_i x_ij. Where every x_ij is −inf,
// x − m is NaN, simd::exp clamps it to 0 and y_j = −inf + log 0 = −inf; the scalar tail says so.
void log_mean_exp(const float* const* x, int64_t k, float* y, int64_t n) {
  const float log_k = std::log(static_cast<float>(k));
  parallel_for(n, 1 << 14, [x, k, y, log_k](int64_t b, int64_t e) {
    int64_t j = b;
#if QKV_SIMD
    alignas(64) float m[kLanes], s[kLanes];
    for (; j + kLanes <= e; j += kLanes) {
      simd::vf vm = simd::load(x[0] + j);
      for (int64_t i = 1; i < k; ++i) vm = simd::max(vm, simd::load(x[i] + j));
      simd::vf vs = simd::zero();
      for (int64_t i = 0; i < k; ++i) vs = simd::add(vs, simd::exp(simd::sub(simd::load(x[i] + j), vm)));
      simd::store(m, vm);
      simd::store(s, vs);
      for (int l = 0; l < kLanes; ++l) y[j + l] = m[l] + (std::log(s[l]) - log_k);
    }
#endif
    for (; j < e; ++j) {
      float m = x[0][j];
      for (int64_t i = 1; i < k; ++i) m = std::max(m, x[i][j]);
      if (m == -INFINITY) {
        y[j] = m;
        continue;
      }
      float s = 0;
      for (int64_t i = 0; i < k; ++i) s += std::exp(x[i][j] - m);
      y[j] = m + (std::log(s) - log_k);
    }
  });
}

}  // namespace qkv::kernels::cpu
