#include "kernels/cpu/batch_norm.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

// Runs f(c) for every channel, in parallel when there is enough work.
template <typename F>
void for_channels(int64_t C, int64_t per_channel, F&& f) {
  parallel_for(C, std::max<int64_t>(1, 32768 / std::max<int64_t>(per_channel, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) f(c);
  });
}

// Sums over one row of S values, vectorized in float (a row is at most a feature map); the rows'
// sums are added in double by the caller, so a channel's total over N·S values stays exact enough.
float row_sum(const float* p, int64_t S) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < S; ++i) s += p[i];
  return s;
}
float row_sq_dev(const float* p, int64_t S, float m) {  // Σ (p − m)²
  float q = 0;
#pragma omp simd reduction(+ : q)
  for (int64_t i = 0; i < S; ++i) q += (p[i] - m) * (p[i] - m);
  return q;
}
void row_sums_backward(const float* x, const float* g, int64_t S, float mu, float& sg, float& sgx) {  // Σ g, Σ g·(x − μ)
  float a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (int64_t i = 0; i < S; ++i) a += g[i], b += g[i] * (x[i] - mu);
  sg = a, sgx = b;
}

}  // namespace

void batch_norm_forward(const float* x, const float* weight, const float* bias, float* running_mean,
                        float* running_var, bool training, float momentum, float eps, int64_t N, int64_t C, int64_t S,
                        float* y, float* mean, float* rstd) {
  const int64_t M = N * S;
  for_channels(C, M, [&](int64_t c) {
    float mu, var;
    if (training) {
      // two passes: the mean, then the mean squared deviation (rows in float, their sum in double)
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += row_sum(x + (n * C + c) * S, S);
      const double m = M ? s / static_cast<double>(M) : 0.0;
      double q = 0;
      for (int64_t n = 0; n < N; ++n) q += row_sq_dev(x + (n * C + c) * S, S, static_cast<float>(m));
      mu = static_cast<float>(m), var = static_cast<float>(M ? q / static_cast<double>(M) : 0.0);
      if (running_mean) running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * mu;
      if (running_var && M > 1)
        running_var[c] = (1.f - momentum) * running_var[c] +
                         momentum * static_cast<float>(q / static_cast<double>(M - 1));  // unbiased
    } else {
      mu = running_mean[c], var = running_var[c];
    }
    const float r = 1.f / std::sqrt(var + eps);
    mean[c] = mu, rstd[c] = r;
    const float g = weight ? weight[c] : 1.f, b = bias ? bias[c] : 0.f;
    const float scale = g * r, shift = b - mu * scale;  // y = x·scale + shift
    for (int64_t n = 0; n < N; ++n) {
      const float* xp = x + (n * C + c) * S;
      float* yp = y + (n * C + c) * S;
#pragma omp simd
      for (int64_t s = 0; s < S; ++s) yp[s] = xp[s] * scale + shift;
    }
  });
}

void batch_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         bool training, int64_t N, int64_t C, int64_t S, float* dx, float* dweight, float* dbias) {
  const auto M = static_cast<double>(N * S);
  for_channels(C, N * S, [&](int64_t c) {
    const float mu = mean[c], r = rstd[c], g = weight ? weight[c] : 1.f;
    double sdy = 0, sdyx = 0;  // Σ dy, Σ dy·x̂ = r·Σ dy·(x − μ)
    for (int64_t n = 0; n < N; ++n) {
      float a, b;
      row_sums_backward(x + (n * C + c) * S, dy + (n * C + c) * S, S, mu, a, b);
      sdy += a, sdyx += b;
    }
    sdyx *= r;
    if (dbias) dbias[c] = static_cast<float>(sdy);
    if (dweight) dweight[c] = static_cast<float>(sdyx);
    if (!dx) return;
    const float k = g * r;
    const float a = training && M > 0 ? static_cast<float>(sdy / M) : 0.f;
    const float b = training && M > 0 ? static_cast<float>(sdyx / M) : 0.f;
    for (int64_t n = 0; n < N; ++n) {
      const float *xp = x + (n * C + c) * S, *gp = dy + (n * C + c) * S;
      float* dp = dx + (n * C + c) * S;
      const float rb = r * b;
#pragma omp simd
      for (int64_t s = 0; s < S; ++s) dp[s] = k * (gp[s] - a - (xp[s] - mu) * rb);
    }
  });
}

}  // namespace qkv::kernels::cpu
