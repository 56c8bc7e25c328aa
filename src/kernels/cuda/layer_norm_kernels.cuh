// LayerNorm's kernels (layer_norm.cu launches them: layer_norm, add_layer_norm; tests/kernels/norm_emulation_test.cpp
// runs them on the host through tests/kernels/cuda_emulation.h). Formulas: kernels/cpu/layer_norm.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/residual_row.cuh"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Add: the row is x + drop(res), written to sum (add_layer_norm_forward) and read back by the thread
// that wrote each element; otherwise x itself. y16 (may be null): y's bf16 copy.
template <bool Add>
__global__ void layer_norm_forward_kernel(const float* x, const float* res, DropoutMask drop, float* sum,
                                          const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                                          int64_t n, float eps, bf16* y16) {
  float* yr = y + blockIdx.x * n;
  float s = 0.f;
  const float* xr = residual_row<Add>(x, res, drop, sum, n, [](float v) { return v; }, s);
  const float mu = block_reduce(s, SumOp{}, 0.f) / static_cast<float>(n);
  float v = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) v += (xr[j] - mu) * (xr[j] - mu);
  const float r = rsqrtf(block_reduce(v, SumOp{}, 0.f) / static_cast<float>(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float xh = (xr[j] - mu) * r;
    yr[j] = (gamma ? gamma[j] : 1.f) * xh + (beta ? beta[j] : 0.f);
    store_bf16(y16, blockIdx.x * n + j, yr[j]);
  }
  if (threadIdx.x == 0 && mean) mean[blockIdx.x] = mu, rstd[blockIdx.x] = r;  // (null: nothing records)
}

// dx = r · (g − mean(g) − x̂ · mean(g·x̂)), g = dy·γ; res: the residual's part
// (kernels/residual_gradient.h), after an add_layer_norm
__global__ void layer_norm_dx_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                     const float* dy, float* dx, int64_t n, ResidualGradient res) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const float* gr = dy + row * n;
  const float mu = mean[row], r = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float g = gr[j] * (gamma ? gamma[j] : 1.f);
    sg += g;
    sgx += g * (xr[j] - mu) * r;
  }
  sg = block_reduce(sg, SumOp{}, 0.f) / static_cast<float>(n);
  sgx = block_reduce(sgx, SumOp{}, 0.f) / static_cast<float>(n);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float g = gr[j] * (gamma ? gamma[j] : 1.f);
    residual_gradient_at(res, row * n + j, r * (g - sg - (xr[j] - mu) * r * sgx), dx);
  }
}

// ---- rows of at most 1,024: a warp a row (residual_row.cuh's warp_row) --------------------------------
static_assert(kThreads == 32 * kWarpRowsABlock);

template <bool Add, int P>
__global__ void layer_norm_forward_warp_kernel(const float* x, const float* res, DropoutMask drop, float* sum,
                                               const float* gamma, const float* beta, float* y, float* mean,
                                               float* rstd, int64_t rows, int64_t n, float eps, bf16* y16) {
  const auto [row, at, lane] = warp_row_place(n);
  if (row >= rows) return;  // (warp_row_place)
  float v[P];
  const float mu = warp_row<Add>(x, res, drop, sum, at, n, lane, v, [](float e) { return e; }) / static_cast<float>(n);
  float q = 0.f;
#pragma unroll
  for (int t = 0; t < P; ++t)
    if (lane + 32 * t < n) q += (v[t] - mu) * (v[t] - mu);
  const float r = rsqrtf(warp_sum(q) / static_cast<float>(n) + eps);
#pragma unroll
  for (int t = 0; t < P; ++t) {
    const int64_t j = lane + 32 * t;
    if (j >= n) continue;
    const float out = (gamma ? gamma[j] : 1.f) * ((v[t] - mu) * r) + (beta ? beta[j] : 0.f);
    y[at + j] = out;
    store_bf16(y16, at + j, out);
  }
  if (lane == 0 && mean) mean[row] = mu, rstd[row] = r;
}

// layer_norm_dx_kernel's formula a warp a row (x and g = dy·γ held in registers)
template <int P>
__global__ void layer_norm_dx_warp_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                          const float* dy, float* dx, int64_t rows, int64_t n, ResidualGradient res) {
  const auto [row, at, lane] = warp_row_place(n);
  if (row >= rows) return;  // (warp_row_place)
  const float mu = mean[row], r = rstd[row];
  float xh[P], g[P];
  float sg = 0.f, sgx = 0.f;
  warp_row_gradient(x, gamma, dy, at, n, lane, xh, g, [&](float& v, float gv) {
    v = (v - mu) * r;  // x̂
    sg += gv;
    sgx += gv * v;
  });
  sg = warp_sum(sg) / static_cast<float>(n);
  sgx = warp_sum(sgx) / static_cast<float>(n);
#pragma unroll
  for (int t = 0; t < P; ++t) {
    const int64_t j = lane + 32 * t;
    if (j < n) residual_gradient_at(res, at + j, r * (g[t] - sg - xh[t] * sgx), dx);
  }
}

// partial[s, j] = Σ over rows of strip s of (dy·x̂, dy), for column j.
constexpr int64_t kStrip = 64;
__global__ void layer_norm_dparams_partial(const float* x, const float* mean, const float* rstd, const float* dy,
                                           float* pg, float* pb, int64_t rows, int64_t n) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  const int64_t r0 = blockIdx.y * kStrip, r1 = r0 + kStrip < rows ? r0 + kStrip : rows;
  float g = 0.f, b = 0.f;
  for (int64_t r = r0; r < r1; ++r) {
    const float d = dy[r * n + j];
    g += d * (x[r * n + j] - mean[r]) * rstd[r];
    b += d;
  }
  pg[blockIdx.y * n + j] = g;
  pb[blockIdx.y * n + j] = b;
}

}  // namespace
}  // namespace qkv::kernels::cuda
