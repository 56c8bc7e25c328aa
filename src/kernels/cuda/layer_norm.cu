// LayerNorm on the GPU (formulas: kernels/cpu/layer_norm.h). Forward and dx: one block per row,
// mean and variance in two passes (no E[x²] − E[x]² cancellation). dγ and dβ: column sums over the
// rows, each block summing a strip of rows into a partial, then the partials summed per column, so
// the result does not depend on atomics' order.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/residual_row.cuh"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Add: the row is x + res, written to sum (add_layer_norm_forward) and read back by the thread that
// wrote each element; otherwise x itself.
template <bool Add>
__global__ void layer_norm_forward_kernel(const float* x, const float* res, float* sum, const float* gamma,
                                          const float* beta, float* y, float* mean, float* rstd, int64_t n, float eps) {
  float* yr = y + blockIdx.x * n;
  float s = 0.f;
  const float* xr = residual_row<Add>(x, res, sum, n, [](float v) { return v; }, s);
  const float mu = block_reduce(s, SumOp{}, 0.f) / static_cast<float>(n);
  float v = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) v += (xr[j] - mu) * (xr[j] - mu);
  const float r = rsqrtf(block_reduce(v, SumOp{}, 0.f) / static_cast<float>(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float xh = (xr[j] - mu) * r;
    yr[j] = (gamma ? gamma[j] : 1.f) * xh + (beta ? beta[j] : 0.f);
  }
  if (threadIdx.x == 0) mean[blockIdx.x] = mu, rstd[blockIdx.x] = r;
}

// dx = r · (g − mean(g) − x̂ · mean(g·x̂)), g = dy·γ
__global__ void layer_norm_dx_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                     const float* dy, float* dx, int64_t n) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const float* gr = dy + row * n;
  float* dr = dx + row * n;
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
    dr[j] = r * (g - sg - (xr[j] - mu) * r * sgx);
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
__global__ void column_sums(const float* partial, int64_t strips, int64_t n, float* out) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n || !out) return;
  float s = 0.f;
  for (int64_t i = 0; i < strips; ++i) s += partial[i * n + j];
  out[j] = s;
}

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int64_t rows, int64_t n, float eps) {
  if (rows == 0 || n == 0) return;
  QKV_CHECK(rows <= 2147483647, "layer_norm: ", rows, " rows; the CUDA kernel takes at most 2^31 - 1");
  layer_norm_forward_kernel<false><<<static_cast<unsigned>(rows), kThreads, 0, stream()>>>(
      x, nullptr, nullptr, gamma, beta, y, mean, rstd, n, eps);
  QKV_CUDA_LAUNCHED(layer_norm_forward_kernel);
}

void add_layer_norm_forward(const float* x, const float* res, const float* gamma, const float* beta, float* s, float* y,
                            float* mean, float* rstd, int64_t rows, int64_t n, float eps) {
  if (rows == 0 || n == 0) return;
  QKV_CHECK(rows <= 2147483647, "add_layer_norm: ", rows, " rows; the CUDA kernel takes at most 2^31 - 1");
  layer_norm_forward_kernel<true><<<static_cast<unsigned>(rows), kThreads, 0, stream()>>>(x, res, s, gamma, beta, y,
                                                                                          mean, rstd, n, eps);
  QKV_CUDA_LAUNCHED(add_layer_norm_forward_kernel);
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t n) {
  if (rows == 0 || n == 0) return;
  QKV_CHECK(rows <= 2147483647, "layer_norm: ", rows, " rows; the CUDA kernel takes at most 2^31 - 1");
  cudaStream_t s = stream();
  if (dx) {
    layer_norm_dx_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, gamma, mean, rstd, dy, dx, n);
    QKV_CUDA_LAUNCHED(layer_norm_dx_kernel);
  }
  if (!dgamma && !dbeta) return;
  const int64_t strips = (rows + kStrip - 1) / kStrip;
  QKV_CHECK(strips <= 65535, "layer_norm: ", rows, " rows; the CUDA parameter gradients take at most ", 65535 * kStrip);
  float* partial = nullptr;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), 2 * strips * n * sizeof(float), s));
  const dim3 grid(blocks_for(n), static_cast<unsigned>(strips));
  layer_norm_dparams_partial<<<grid, 256, 0, s>>>(x, mean, rstd, dy, partial, partial + strips * n, rows, n);
  QKV_CUDA_LAUNCHED(layer_norm_dparams_partial);
  column_sums<<<blocks_for(n), 256, 0, s>>>(partial, strips, n, dgamma);
  column_sums<<<blocks_for(n), 256, 0, s>>>(partial + strips * n, strips, n, dbeta);
  QKV_CUDA_LAUNCHED(column_sums);
  QKV_CUDA_CHECK(cudaFreeAsync(partial, s));
}

}  // namespace qkv::kernels::cuda
