#include "qkv/kernels/cpu/layer_norm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int64_t rows, int64_t n, float eps) {
  parallel_for(rows, 1 + 8192 / (n + 1), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      float s = 0.f;
      for (int64_t j = 0; j < n; ++j) s += xr[j];
      const float mu = s / static_cast<float>(n);
      float v = 0.f;
      for (int64_t j = 0; j < n; ++j) v += (xr[j] - mu) * (xr[j] - mu);
      const float rs = 1.0f / std::sqrt(v / static_cast<float>(n) + eps);
      for (int64_t j = 0; j < n; ++j) {
        float h = (xr[j] - mu) * rs;
        yr[j] = gamma ? h * gamma[j] + (beta ? beta[j] : 0.f) : h + (beta ? beta[j] : 0.f);
      }
      if (mean) mean[r] = mu;
      if (rstd) rstd[r] = rs;
    }
  });
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t n) {
  const int nt = in_parallel_region() ? 1 : num_threads();
  // Per-thread partial sums of dγ and dβ, reduced after the parallel loop.
  std::vector<float> part(static_cast<size_t>(nt) * 2 * n, 0.f);
  parallel_for(rows, 1 + 8192 / (n + 1), [&](int64_t b, int64_t e) {
    float* pg = part.data() + static_cast<size_t>(nt == 1 ? 0 : omp_get_thread_num()) * 2 * n;
    float* pb = pg + n;
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * n;
      const float* gr = dy + r * n;
      const float mu = mean[r], rs = rstd[r];
      float sg = 0.f, sgx = 0.f;
      for (int64_t j = 0; j < n; ++j) {
        float h = (xr[j] - mu) * rs;
        float g = gr[j] * (gamma ? gamma[j] : 1.f);
        sg += g;
        sgx += g * h;
        pg[j] += gr[j] * h;
        pb[j] += gr[j];
      }
      const float inv_n = 1.0f / static_cast<float>(n);
      float* dr = dx + r * n;
      for (int64_t j = 0; j < n; ++j) {
        float h = (xr[j] - mu) * rs;
        float g = gr[j] * (gamma ? gamma[j] : 1.f);
        dr[j] = rs * (g - sg * inv_n - h * sgx * inv_n);
      }
    }
  });
  if (dgamma) std::memset(dgamma, 0, static_cast<size_t>(n) * sizeof(float));
  if (dbeta) std::memset(dbeta, 0, static_cast<size_t>(n) * sizeof(float));
  for (int t = 0; t < nt; ++t) {
    const float* pg = part.data() + static_cast<size_t>(t) * 2 * n;
    for (int64_t j = 0; j < n; ++j) {
      if (dgamma) dgamma[j] += pg[j];
      if (dbeta) dbeta[j] += pg[n + j];
    }
  }
}

}  // namespace qkv::kernels::cpu
