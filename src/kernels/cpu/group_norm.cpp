#include "kernels/cpu/group_norm.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

void group_norm_forward(const float* x, const float* weight, const float* bias, float eps, int64_t N, int64_t C,
                        int64_t S, int64_t G, float* y, float* mean, float* rstd) {
  const int64_t Cg = C / G, K = Cg * S;
  parallel_for(N * G, std::max<int64_t>(1, 32768 / std::max<int64_t>(K, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t ng = lo; ng < hi; ++ng) {
      const float* xp = x + ng * K;  // the group's channels are contiguous in [N, C, S]
      double s = 0, q = 0;
      for (int64_t i = 0; i < K; ++i) s += xp[i];
      const double m = K ? s / static_cast<double>(K) : 0.0;
      for (int64_t i = 0; i < K; ++i) q += (xp[i] - m) * (xp[i] - m);
      const float mu = static_cast<float>(m), r = 1.f / std::sqrt(static_cast<float>(K ? q / K : 0.0) + eps);
      mean[ng] = mu, rstd[ng] = r;
      const int64_t c0 = (ng % G) * Cg;
      for (int64_t c = 0; c < Cg; ++c) {
        const float scale = (weight ? weight[c0 + c] : 1.f) * r, shift = (bias ? bias[c0 + c] : 0.f) - mu * scale;
        const float* xc = xp + c * S;
        float* yc = y + ng * K + c * S;
        for (int64_t i = 0; i < S; ++i) yc[i] = xc[i] * scale + shift;
      }
    }
  });
}

void group_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         int64_t N, int64_t C, int64_t S, int64_t G, float* dx, float* dweight, float* dbias) {
  const int64_t Cg = C / G, K = Cg * S;
  if (dx)
    parallel_for(N * G, std::max<int64_t>(1, 32768 / std::max<int64_t>(K, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t ng = lo; ng < hi; ++ng) {
        const float mu = mean[ng], r = rstd[ng];
        const int64_t c0 = (ng % G) * Cg;
        double sg = 0, sgx = 0;  // Σ ĝ, Σ ĝ·x̂ with ĝ = γ dy
        for (int64_t c = 0; c < Cg; ++c) {
          const float w = weight ? weight[c0 + c] : 1.f;
          const float *xc = x + ng * K + c * S, *gc = dy + ng * K + c * S;
          for (int64_t i = 0; i < S; ++i) sg += w * gc[i], sgx += w * gc[i] * (xc[i] - mu) * r;
        }
        const float a = K ? static_cast<float>(sg / K) : 0.f, b = K ? static_cast<float>(sgx / K) : 0.f;
        for (int64_t c = 0; c < Cg; ++c) {
          const float w = weight ? weight[c0 + c] : 1.f;
          const float *xc = x + ng * K + c * S, *gc = dy + ng * K + c * S;
          float* dc = dx + ng * K + c * S;
          for (int64_t i = 0; i < S; ++i) dc[i] = r * (w * gc[i] - a - (xc[i] - mu) * r * b);
        }
      }
    });
  if (dweight || dbias)
    parallel_for(C, std::max<int64_t>(1, 32768 / std::max<int64_t>(N * S, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        double sw = 0, sb = 0;
        for (int64_t n = 0; n < N; ++n) {
          const int64_t ng = n * G + c / Cg;
          const float mu = mean[ng], r = rstd[ng];
          const float *xc = x + (n * C + c) * S, *gc = dy + (n * C + c) * S;
          for (int64_t i = 0; i < S; ++i) sb += gc[i], sw += gc[i] * (xc[i] - mu) * r;
        }
        if (dweight) dweight[c] = static_cast<float>(sw);
        if (dbias) dbias[c] = static_cast<float>(sb);
      }
    });
}

}  // namespace qkv::kernels::cpu
