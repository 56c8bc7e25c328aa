// Batch and group normalization on the GPU (formulas: kernels/cpu/batch_norm.h, group_norm.h).
// Batch norm: a block per channel over its N·S values; group norm: a block per (sample, group) over
// its (C/G)·S values, and a block per channel for dγ, dβ. Sums in double, two passes for the
// variance (no E[x²] − E[x]² cancellation), as the CPU's; no atomics, so the results do not depend
// on the order blocks run in.
#include <cmath>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

constexpr int kThreads = 256;

// Element e of channel c's N·S values in [N, C, S]
__device__ inline int64_t channel_at(int64_t c, int64_t e, int64_t C, int64_t S) { return (e / S * C + c) * S + e % S; }

__global__ void batch_norm_forward_kernel(const float* x, const float* weight, const float* bias, float* running_mean,
                                          float* running_var, bool training, float momentum, float eps, int64_t N,
                                          int64_t C, int64_t S, float* y, float* mean, float* rstd) {
  const int64_t c = blockIdx.x, M = N * S;
  float mu, var;
  if (training) {
    double s = 0;
    for (int64_t e = threadIdx.x; e < M; e += blockDim.x) s += x[channel_at(c, e, C, S)];
    s = block_reduce(s, SumOp{}, 0.0);
    const double m = M ? s / static_cast<double>(M) : 0.0;
    const float mf = static_cast<float>(m);
    double q = 0;
    for (int64_t e = threadIdx.x; e < M; e += blockDim.x) {
      const float d = x[channel_at(c, e, C, S)] - mf;
      q += d * d;
    }
    q = block_reduce(q, SumOp{}, 0.0);
    mu = mf, var = static_cast<float>(M ? q / static_cast<double>(M) : 0.0);
    if (threadIdx.x == 0) {
      if (running_mean) running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * mu;
      if (running_var && M > 1)
        running_var[c] = (1.f - momentum) * running_var[c] + momentum * static_cast<float>(q / static_cast<double>(M - 1));
    }
  } else {
    mu = running_mean[c], var = running_var[c];
  }
  const float r = 1.f / sqrtf(var + eps);
  if (threadIdx.x == 0) mean[c] = mu, rstd[c] = r;
  const float scale = (weight ? weight[c] : 1.f) * r, shift = (bias ? bias[c] : 0.f) - mu * scale;
  for (int64_t e = threadIdx.x; e < M; e += blockDim.x) {
    const int64_t at = channel_at(c, e, C, S);
    y[at] = x[at] * scale + shift;
  }
}

__global__ void batch_norm_backward_kernel(const float* x, const float* dy, const float* mean, const float* rstd,
                                           const float* weight, bool training, int64_t N, int64_t C, int64_t S,
                                           float* dx, float* dweight, float* dbias) {
  const int64_t c = blockIdx.x, M = N * S;
  const float mu = mean[c], r = rstd[c], g = weight ? weight[c] : 1.f;
  double sdy = 0, sdyx = 0;  // Σ dy, Σ dy·(x − μ)
  for (int64_t e = threadIdx.x; e < M; e += blockDim.x) {
    const int64_t at = channel_at(c, e, C, S);
    sdy += dy[at], sdyx += dy[at] * (x[at] - mu);
  }
  sdy = block_reduce(sdy, SumOp{}, 0.0);
  sdyx = block_reduce(sdyx, SumOp{}, 0.0) * r;  // Σ dy·x̂
  if (threadIdx.x == 0) {
    if (dbias) dbias[c] = static_cast<float>(sdy);
    if (dweight) dweight[c] = static_cast<float>(sdyx);
  }
  if (!dx) return;
  const float k = g * r;
  const float a = training && M > 0 ? static_cast<float>(sdy / M) : 0.f;
  const float b = training && M > 0 ? static_cast<float>(sdyx / M) : 0.f;
  for (int64_t e = threadIdx.x; e < M; e += blockDim.x) {
    const int64_t at = channel_at(c, e, C, S);
    dx[at] = k * (dy[at] - a - (x[at] - mu) * r * b);
  }
}

// group (n, g): its K = (C/G)·S values are contiguous in [N, C, S], from (n·G + g)·K
__global__ void group_norm_forward_kernel(const float* x, const float* weight, const float* bias, float eps, int64_t C,
                                          int64_t S, int64_t G, float* y, float* mean, float* rstd) {
  const int64_t ng = blockIdx.x, Cg = C / G, K = Cg * S, c0 = (ng % G) * Cg;
  const float* xp = x + ng * K;
  double s = 0;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) s += xp[i];
  s = block_reduce(s, SumOp{}, 0.0);
  const double m = K ? s / static_cast<double>(K) : 0.0;
  double q = 0;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) q += (xp[i] - m) * (xp[i] - m);
  q = block_reduce(q, SumOp{}, 0.0);
  const float mu = static_cast<float>(m), r = 1.f / sqrtf(static_cast<float>(K ? q / K : 0.0) + eps);
  if (threadIdx.x == 0) mean[ng] = mu, rstd[ng] = r;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
    const int64_t c = c0 + i / S;
    const float scale = (weight ? weight[c] : 1.f) * r, shift = (bias ? bias[c] : 0.f) - mu * scale;
    y[ng * K + i] = xp[i] * scale + shift;
  }
}

__global__ void group_norm_dx_kernel(const float* x, const float* dy, const float* mean, const float* rstd,
                                     const float* weight, int64_t C, int64_t S, int64_t G, float* dx) {
  const int64_t ng = blockIdx.x, Cg = C / G, K = Cg * S, c0 = (ng % G) * Cg;
  const float mu = mean[ng], r = rstd[ng];
  const float *xp = x + ng * K, *gp = dy + ng * K;
  double sg = 0, sgx = 0;  // Σ ĝ, Σ ĝ·x̂ with ĝ = γ dy
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
    const float w = weight ? weight[c0 + i / S] : 1.f;
    sg += w * gp[i], sgx += w * gp[i] * (xp[i] - mu) * r;
  }
  sg = block_reduce(sg, SumOp{}, 0.0);
  sgx = block_reduce(sgx, SumOp{}, 0.0);
  const float a = K ? static_cast<float>(sg / K) : 0.f, b = K ? static_cast<float>(sgx / K) : 0.f;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
    const float w = weight ? weight[c0 + i / S] : 1.f;
    dx[ng * K + i] = r * (w * gp[i] - a - (xp[i] - mu) * r * b);
  }
}

__global__ void group_norm_dparams_kernel(const float* x, const float* dy, const float* mean, const float* rstd,
                                          int64_t N, int64_t C, int64_t S, int64_t G, float* dweight, float* dbias) {
  const int64_t c = blockIdx.x, Cg = C / G, M = N * S;
  double sw = 0, sb = 0;
  for (int64_t e = threadIdx.x; e < M; e += blockDim.x) {
    const int64_t n = e / S, ng = n * G + c / Cg, at = channel_at(c, e, C, S);
    sb += dy[at], sw += dy[at] * (x[at] - mean[ng]) * rstd[ng];
  }
  sw = block_reduce(sw, SumOp{}, 0.0);
  sb = block_reduce(sb, SumOp{}, 0.0);
  if (threadIdx.x == 0) {
    if (dweight) dweight[c] = static_cast<float>(sw);
    if (dbias) dbias[c] = static_cast<float>(sb);
  }
}

unsigned grid_of(int64_t blocks, const char* op) {
  QKV_CHECK(blocks <= 2147483647, op, ": ", blocks, " blocks are too many for one CUDA grid");
  return static_cast<unsigned>(blocks);
}

}  // namespace

void batch_norm_forward(const float* x, const float* weight, const float* bias, float* running_mean,
                        float* running_var, bool training, float momentum, float eps, int64_t N, int64_t C, int64_t S,
                        float* y, float* mean, float* rstd) {
  if (C == 0) return;
  QKV_LAUNCH(grid_of(C, "batch_norm"), kThreads, 0, stream(), batch_norm_forward_kernel)(
      x, weight, bias, running_mean, running_var, training, momentum, eps, N, C, S, y, mean, rstd);
  QKV_CUDA_LAUNCHED(batch_norm_forward_kernel);
}

void batch_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         bool training, int64_t N, int64_t C, int64_t S, float* dx, float* dweight, float* dbias) {
  if (C == 0) return;
  QKV_LAUNCH(grid_of(C, "batch_norm"), kThreads, 0, stream(), batch_norm_backward_kernel)(
      x, dy, mean, rstd, weight, training, N, C, S, dx, dweight, dbias);
  QKV_CUDA_LAUNCHED(batch_norm_backward_kernel);
}

void group_norm_forward(const float* x, const float* weight, const float* bias, float eps, int64_t N, int64_t C,
                        int64_t S, int64_t G, float* y, float* mean, float* rstd) {
  if (N * G == 0) return;
  QKV_LAUNCH(grid_of(N * G, "group_norm"), kThreads, 0, stream(), group_norm_forward_kernel)(
      x, weight, bias, eps, C, S, G, y, mean, rstd);
  QKV_CUDA_LAUNCHED(group_norm_forward_kernel);
}

void group_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         int64_t N, int64_t C, int64_t S, int64_t G, float* dx, float* dweight, float* dbias) {
  if (dx && N * G > 0) {
    QKV_LAUNCH(grid_of(N * G, "group_norm"), kThreads, 0, stream(), group_norm_dx_kernel)(
        x, dy, mean, rstd, weight, C, S, G, dx);
    QKV_CUDA_LAUNCHED(group_norm_dx_kernel);
  }
  if ((dweight || dbias) && C > 0) {
    QKV_LAUNCH(grid_of(C, "group_norm"), kThreads, 0, stream(), group_norm_dparams_kernel)(
        x, dy, mean, rstd, N, C, S, G, dweight, dbias);
    QKV_CUDA_LAUNCHED(group_norm_dparams_kernel);
  }
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
