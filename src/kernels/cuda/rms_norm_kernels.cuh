// RMSNorm's kernels (rms_norm.cu launches them: rms_norm, add_rms_norm; tests/kernels/rms_norm_emulation_test.cpp
// runs them on the host through tests/kernels/cuda_emulation.h). Formulas: kernels/cpu/rms_norm.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/residual_row.cuh"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Add: the row is x + drop(res), written to sum (add_rms_norm_forward) and read back by the thread
// that wrote each element; otherwise x itself. y16 (may be null): y's bf16 copy.
template <bool Add>
__global__ void rms_norm_forward_kernel(const float* x, const float* res, DropoutMask drop, float* sum,
                                        const float* gamma, float* y, float* rstd, int64_t n, float eps,
                                        bf16* y16) {
  float* yr = y + blockIdx.x * n;
  float s = 0.f;
  const float* xr = residual_row<Add>(x, res, drop, sum, n, [](float v) { return v * v; }, s);
  const float r = rsqrtf(block_reduce(s, SumOp{}, 0.f) / static_cast<float>(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    yr[j] = (xr[j] * r) * (gamma ? gamma[j] : 1.f);
    store_bf16(y16, blockIdx.x * n + j, yr[j]);
  }
  if (threadIdx.x == 0 && rstd) rstd[blockIdx.x] = r;
}

// dx = r · (g − x̂ · mean(g·x̂)), g = dy·γ
// res: the residual's part (kernels/residual_gradient.h), after an add_rms_norm
__global__ void rms_norm_dx_kernel(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                                   int64_t n, ResidualGradient res) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const float* gr = dy + row * n;
  const float r = rstd[row];
  float sgx = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sgx += gr[j] * (gamma ? gamma[j] : 1.f) * xr[j] * r;
  sgx = block_reduce(sgx, SumOp{}, 0.f) / static_cast<float>(n);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    residual_gradient_at(res, row * n + j, r * (gr[j] * (gamma ? gamma[j] : 1.f) - xr[j] * r * sgx), dx);
}

// ---- rows of at most 1,024: a warp a row (residual_row.cuh's warp_row; the block kernels' formulas) -----
static_assert(kThreads == 32 * kWarpRowsABlock);

template <bool Add, int P>
__global__ void rms_norm_forward_warp_kernel(const float* x, const float* res, DropoutMask drop, float* sum,
                                             const float* gamma, float* y, float* rstd, int64_t rows, int64_t n,
                                             float eps, bf16* y16) {
  const auto [row, at, lane] = warp_row_place(n);
  if (row >= rows) return;  // (warp_row_place)
  float v[P];
  const float ss = warp_row<Add>(x, res, drop, sum, at, n, lane, v, [](float e) { return e * e; });
  const float r = rsqrtf(ss / static_cast<float>(n) + eps);
#pragma unroll
  for (int t = 0; t < P; ++t) {
    const int64_t j = lane + 32 * t;
    if (j >= n) continue;
    const float out = (v[t] * r) * (gamma ? gamma[j] : 1.f);
    y[at + j] = out;
    store_bf16(y16, at + j, out);
  }
  if (lane == 0 && rstd) rstd[row] = r;
}

template <int P>
__global__ void rms_norm_dx_warp_kernel(const float* x, const float* gamma, const float* rstd, const float* dy,
                                        float* dx, int64_t rows, int64_t n, ResidualGradient res) {
  const auto [row, at, lane] = warp_row_place(n);
  if (row >= rows) return;  // (warp_row_place)
  const float r = rstd[row];
  float xv[P], g[P];
  float sgx = 0.f;
  warp_row_gradient(x, gamma, dy, at, n, lane, xv, g, [&](float v, float gv) { sgx += gv * v * r; });
  sgx = warp_sum(sgx) / static_cast<float>(n);
#pragma unroll
  for (int t = 0; t < P; ++t) {
    const int64_t j = lane + 32 * t;
    if (j < n) residual_gradient_at(res, at + j, r * (g[t] - xv[t] * r * sgx), dx);
  }
}

constexpr int64_t kStrip = 64;
// partial[s, j] = Σ over rows of strip s of dy·x̂, for column j
__global__ void rms_norm_dgamma_partial(const float* x, const float* rstd, const float* dy, float* partial,
                                        int64_t rows, int64_t n) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  const int64_t r0 = blockIdx.y * kStrip, r1 = r0 + kStrip < rows ? r0 + kStrip : rows;
  float g = 0.f;
  for (int64_t r = r0; r < r1; ++r) g += dy[r * n + j] * x[r * n + j] * rstd[r];
  partial[blockIdx.y * n + j] = g;
}

}  // namespace
}  // namespace qkv::kernels::cuda
