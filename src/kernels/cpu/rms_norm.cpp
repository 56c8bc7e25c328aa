#include "kernels/cpu/rms_norm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vec.h"
#include "qkv/core/parallel.h"

// The row sums are vec.h's vector reductions (fixed order: the same results run to run), as in
// layer_norm.cpp.

namespace qkv::kernels::cpu {

namespace {

// One row: r = 1/√(Σx²/n + ε);  y = (x·r)·γ — in that order, as Hugging Face's LlamaRMSNorm.
inline void normalize_row(const float* xr, const float* gamma, float* yr, float* rstd, int64_t n, float eps) {
  const float inv_n = 1.0f / static_cast<float>(n);
  const float rs = 1.0f / std::sqrt(sum_sq_dev(xr, 0.f, n) * inv_n + eps);
  if (gamma) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] * rs) * gamma[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * rs;
  }
  if (rstd) *rstd = rs;
}

}  // namespace

void rms_norm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t n, float eps,
                      bf16* y16) {
  parallel_for(rows, 1 + 8192 / (n + 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      normalize_row(x + r * n, gamma, y + r * n, rstd ? rstd + r : nullptr, n, eps);
      if (y16) bf16_row(y + r * n, y16 + r * n, n);  // (the row still in L1)
    }
  });
}

// Each row's sum is normalized while it is in cache.
void add_rms_norm_forward(const float* x, const float* res, const DropoutMask& res_drop, const float* gamma, float* s,
                          float* y, float* rstd, int64_t rows, int64_t n, float eps, bf16* y16) {
  parallel_for(rows, 1 + 8192 / (n + 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      float* sr = s + r * n;
      add_dropped_row(xr, res + r * n, res_drop, r * n, sr, n);
      normalize_row(sr, gamma, y + r * n, rstd ? rstd + r : nullptr, n, eps);
      if (y16) bf16_row(y + r * n, y16 + r * n, n);
    }
  });
}

void rms_norm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                       float* dgamma, int64_t rows, int64_t n, const ResidualGradient& res) {
  const int nt = in_parallel_region() ? 1 : num_threads();
  const float inv_n = 1.0f / static_cast<float>(n);
  // Per-thread partial sums of dγ, reduced after the loop, and a scratch row for g = dy·γ.
  std::vector<float> part(static_cast<size_t>(nt) * 2 * n, 0.f);
  parallel_for(rows, 1 + 8192 / (n + 1), [&](int64_t b, int64_t e) {
    float* pg = part.data() + static_cast<size_t>(nt == 1 ? 0 : omp_get_thread_num()) * 2 * n;
    float* scratch = pg + n;
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      const float* gr = dy + r * n;
      const float rs = rstd[r];
      const float* g = gr;
      if (gamma) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) scratch[j] = gr[j] * gamma[j];
        g = scratch;
      }
      // mean(g·x̂) = r · Σ g·x / n
      const float mgx = rs * dot_centered(g, xr, 0.f, n) * inv_n;
      float* dr = dx + r * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        const float h = xr[j] * rs;
        dr[j] = rs * (g[j] - h * mgx);
        pg[j] += gr[j] * h;
      }
      residual_gradient_row(res, r * n, dr, n);
    }
  });
  if (!dgamma) return;
  std::memset(dgamma, 0, static_cast<size_t>(n) * sizeof(float));
  for (int t = 0; t < nt; ++t) {
    const float* pg = part.data() + static_cast<size_t>(t) * 2 * n;
    for (int64_t j = 0; j < n; ++j) dgamma[j] += pg[j];
  }
}

}  // namespace qkv::kernels::cpu
