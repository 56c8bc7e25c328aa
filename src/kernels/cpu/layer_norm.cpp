#include "kernels/cpu/layer_norm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "qkv/core/parallel.h"
#include "kernels/cpu/vec.h"

// The per-row sums are vector reductions (vec.h: 16 partial sums in the lanes of a register).
// Written as plain loops, strict IEEE order makes the compiler emit one serial chain of adds, and
// GCC 12 keeps that order even under `omp simd reduction`; a 128-wide row then costs hundreds of
// cycles instead of tens. The order of the additions is fixed, so results are the same from run
// to run.

namespace qkv::kernels::cpu {

namespace {

// y = x̂·γ + β for one row, with the missing affine parts left out of the loop.
inline void affine_row(const float* xr, float mu, float rs, const float* gamma, const float* beta, float* yr,
                       int64_t n) {
  if (gamma && beta) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
  } else if (gamma) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rs * gamma[j];
  } else if (beta) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rs + beta[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rs;
  }
}

// One row: μ = Σx / n;  σ² = Σ(x − μ)² / n  (two passes: no cancellation), then the affine map.
inline void normalize_row(const float* xr, const float* gamma, const float* beta, float* yr, float* mean, float* rstd,
                          int64_t n, float eps) {
  const float inv_n = 1.0f / static_cast<float>(n);
  const float mu = sum_of(xr, n) * inv_n;
  const float rs = 1.0f / std::sqrt(sum_sq_dev(xr, mu, n) * inv_n + eps);
  affine_row(xr, mu, rs, gamma, beta, yr, n);
  if (mean) *mean = mu;
  if (rstd) *rstd = rs;
}

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int64_t rows, int64_t n, float eps, bf16* y16) {
  parallel_for(rows, 1 + 8192 / (n + 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      normalize_row(x + r * n, gamma, beta, y + r * n, mean ? mean + r : nullptr, rstd ? rstd + r : nullptr, n, eps);
      if (y16) bf16_row(y + r * n, y16 + r * n, n);  // (the row still in L1)
    }
  });
}

// Each row's sum is normalized while it is in cache.
void add_layer_norm_forward(const float* x, const float* res, const DropoutMask& res_drop, const float* gamma,
                            const float* beta, float* s, float* y, float* mean, float* rstd, int64_t rows, int64_t n,
                            float eps, bf16* y16) {
  parallel_for(rows, 1 + 8192 / (n + 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      float* sr = s + r * n;
      add_dropped_row(xr, res + r * n, res_drop, r * n, sr, n);
      normalize_row(sr, gamma, beta, y + r * n, mean ? mean + r : nullptr, rstd ? rstd + r : nullptr, n, eps);
      if (y16) bf16_row(y + r * n, y16 + r * n, n);
    }
  });
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t n, const ResidualGradient& res) {
  const int nt = in_parallel_region() ? 1 : num_threads();
  const float inv_n = 1.0f / static_cast<float>(n);
  // Per-thread partial sums of dγ and dβ, reduced after the parallel loop, and a scratch row for
  // g = dy·γ (without affine, g is dy itself).
  std::vector<float> part(static_cast<size_t>(nt) * 3 * n, 0.f);
  parallel_for(rows, 1 + 8192 / (n + 1), [&](int64_t b, int64_t e) {
    float* pg = part.data() + static_cast<size_t>(nt == 1 ? 0 : omp_get_thread_num()) * 3 * n;
    float* pb = pg + n;
    float* scratch = pb + n;
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      const float* gr = dy + r * n;
      const float mu = mean[r], rs = rstd[r];
      const float* g = gr;
      if (gamma) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) scratch[j] = gr[j] * gamma[j];
        g = scratch;
      }
      // mean(g) and mean(g·x̂) = rs · Σ g·(x − μ) / n
      const float mg = sum_of(g, n) * inv_n, mgx = rs * dot_centered(g, xr, mu, n) * inv_n;
      // dx, and the dγ/dβ partials, in one pass
      float* dr = dx + r * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        const float h = (xr[j] - mu) * rs;
        dr[j] = rs * (g[j] - mg - h * mgx);
        pg[j] += gr[j] * h;
        pb[j] += gr[j];
      }
      residual_gradient_row(res, r * n, dr, n);
    }
  });
  if (dgamma) std::memset(dgamma, 0, static_cast<size_t>(n) * sizeof(float));
  if (dbeta) std::memset(dbeta, 0, static_cast<size_t>(n) * sizeof(float));
  for (int t = 0; t < nt; ++t) {
    const float* pg = part.data() + static_cast<size_t>(t) * 3 * n;
    for (int64_t j = 0; j < n; ++j) {
      if (dgamma) dgamma[j] += pg[j];
      if (dbeta) dbeta[j] += pg[n + j];
    }
  }
}

}  // namespace qkv::kernels::cpu
