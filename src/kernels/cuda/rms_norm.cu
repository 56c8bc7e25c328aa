// RMSNorm on the GPU (formulas: kernels/cpu/rms_norm.h). Forward and dx: one block per row. dγ:
// column sums over the rows in strips, then the strips summed per column (no atomics: the result
// does not depend on their order), as layer_norm.cu.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/residual_row.cuh"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Add: the row is x + res, written to sum (add_rms_norm_forward) and read back by the thread that
// wrote each element; otherwise x itself.
template <bool Add>
__global__ void rms_norm_forward_kernel(const float* x, const float* res, float* sum, const float* gamma, float* y,
                                        float* rstd, int64_t n, float eps) {
  float* yr = y + blockIdx.x * n;
  float s = 0.f;
  const float* xr = residual_row<Add>(x, res, sum, n, [](float v) { return v * v; }, s);
  const float r = rsqrtf(block_reduce(s, SumOp{}, 0.f) / static_cast<float>(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = (xr[j] * r) * (gamma ? gamma[j] : 1.f);
  if (threadIdx.x == 0 && rstd) rstd[blockIdx.x] = r;
}

// dx = r · (g − x̂ · mean(g·x̂)), g = dy·γ
__global__ void rms_norm_dx_kernel(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                                   int64_t n) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const float* gr = dy + row * n;
  float* dr = dx + row * n;
  const float r = rstd[row];
  float sgx = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sgx += gr[j] * (gamma ? gamma[j] : 1.f) * xr[j] * r;
  sgx = block_reduce(sgx, SumOp{}, 0.f) / static_cast<float>(n);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dr[j] = r * (gr[j] * (gamma ? gamma[j] : 1.f) - xr[j] * r * sgx);
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
__global__ void rms_norm_column_sums(const float* partial, int64_t strips, int64_t n, float* out) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  float s = 0.f;
  for (int64_t i = 0; i < strips; ++i) s += partial[i * n + j];
  out[j] = s;
}

}  // namespace

void rms_norm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t n, float eps) {
  if (rows == 0 || n == 0) return;
  QKV_CHECK(rows <= 2147483647, "rms_norm: ", rows, " rows; the CUDA kernel takes at most 2^31 - 1");
  rms_norm_forward_kernel<false>
      <<<static_cast<unsigned>(rows), kThreads, 0, stream()>>>(x, nullptr, nullptr, gamma, y, rstd, n, eps);
  QKV_CUDA_LAUNCHED(rms_norm_forward_kernel);
}

void add_rms_norm_forward(const float* x, const float* res, const float* gamma, float* s, float* y, float* rstd,
                          int64_t rows, int64_t n, float eps) {
  if (rows == 0 || n == 0) return;
  QKV_CHECK(rows <= 2147483647, "add_rms_norm: ", rows, " rows; the CUDA kernel takes at most 2^31 - 1");
  rms_norm_forward_kernel<true><<<static_cast<unsigned>(rows), kThreads, 0, stream()>>>(x, res, s, gamma, y, rstd, n,
                                                                                        eps);
  QKV_CUDA_LAUNCHED(add_rms_norm_forward_kernel);
}

void rms_norm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                       float* dgamma, int64_t rows, int64_t n) {
  if (rows == 0 || n == 0) return;
  QKV_CHECK(rows <= 2147483647, "rms_norm: ", rows, " rows; the CUDA kernel takes at most 2^31 - 1");
  cudaStream_t s = stream();
  if (dx) {
    rms_norm_dx_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, gamma, rstd, dy, dx, n);
    QKV_CUDA_LAUNCHED(rms_norm_dx_kernel);
  }
  if (!dgamma) return;
  const int64_t strips = (rows + kStrip - 1) / kStrip;
  QKV_CHECK(strips <= 65535, "rms_norm: ", rows, " rows; the CUDA weight gradient takes at most ", 65535 * kStrip);
  float* partial = nullptr;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), strips * n * sizeof(float), s));
  const dim3 grid(blocks_for(n), static_cast<unsigned>(strips));
  rms_norm_dgamma_partial<<<grid, 256, 0, s>>>(x, rstd, dy, partial, rows, n);
  QKV_CUDA_LAUNCHED(rms_norm_dgamma_partial);
  rms_norm_column_sums<<<blocks_for(n), 256, 0, s>>>(partial, strips, n, dgamma);
  QKV_CUDA_LAUNCHED(rms_norm_column_sums);
  QKV_CUDA_CHECK(cudaFreeAsync(partial, s));
}

}  // namespace qkv::kernels::cuda
