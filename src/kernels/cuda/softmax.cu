// Softmax and log-softmax over rows on the GPU (formulas: kernels/cpu/softmax.h): one block of 256
// threads per row; max and sum by block reductions, the row read from global memory each pass (it
// stays in L1/L2 for the row lengths of attention and vocabularies).
#include <cfloat>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

constexpr int kThreads = 256;

template <bool Log>
__global__ void softmax_forward_kernel(const float* x, float* y, int64_t n) {
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, xr[j]);
  m = block_reduce(m, MaxOp{}, -INFINITY);
  if (m == -INFINITY) {  // every position masked: zeros (softmax), NaN (log-softmax: log 0/0, as the CPU and PyTorch)
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = Log ? NAN : 0.f;
    return;
  }
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(xr[j] - m);
  s = block_reduce(s, SumOp{}, 0.f);
  if (Log) {
    // (x − m) − log s, not x − (m + log s): m + log s would round to the precision of |m| (as the CPU)
    const float log_s = logf(s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = (xr[j] - m) - log_s;
  } else {
    const float inv = 1.f / s;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;
  }
}

// softmax: dx = y (dy − Σ dy·y);  log-softmax: dx = dy − e^y Σ dy
template <bool Log>
__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  const float* yr = y + blockIdx.x * n;
  const float* gr = dy + blockIdx.x * n;
  float* dr = dx + blockIdx.x * n;
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += Log ? gr[j] : gr[j] * yr[j];
  s = block_reduce(s, SumOp{}, 0.f);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dr[j] = Log ? gr[j] - expf(yr[j]) * s : yr[j] * (gr[j] - s);
}

// Rows beyond the grid's 2³¹ − 1 limit go in further launches.
template <typename Launch>
void over_rows(int64_t rows, Launch launch) {
  constexpr int64_t kMaxGrid = 2147483647;
  for (int64_t r = 0; r < rows; r += kMaxGrid) launch(r, rows - r < kMaxGrid ? rows - r : kMaxGrid);
}

// y_j = m_j + log Σ_i exp(x_ij − m_j) − log k, m_j = max_i x_ij (−∞ where every x_ij is): a thread per j
__global__ void log_mean_exp_kernel(const float* const* x, int64_t k, float* y, int64_t n, float log_k) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n; j += int64_t{gridDim.x} * blockDim.x) {
    float m = x[0][j];
    for (int64_t i = 1; i < k; ++i) m = fmaxf(m, x[i][j]);
    if (m == -INFINITY) {
      y[j] = m;
      continue;
    }
    float s = 0.f;
    for (int64_t i = 0; i < k; ++i) s += expf(x[i][j] - m);
    y[j] = m + (logf(s) - log_k);
  }
}

}  // namespace

namespace {

// One block per row, `rows` of them in grids of at most 2³¹ − 1 (one stream, looked up once).
template <bool Log>
void forward(const float* x, float* y, int64_t rows, int64_t n) {
  if (rows * n == 0) return;
  cudaStream_t s = stream();
  over_rows(rows, [&](int64_t r, int64_t count) {
    QKV_LAUNCH(static_cast<unsigned>(count), kThreads, 0, s, softmax_forward_kernel<Log>)(x + r * n, y + r * n, n);
  });
  QKV_CUDA_LAUNCHED(softmax_forward_kernel);
}
template <bool Log>
void backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
  if (rows * n == 0) return;
  cudaStream_t s = stream();
  over_rows(rows, [&](int64_t r, int64_t count) {
    QKV_LAUNCH(static_cast<unsigned>(count), kThreads, 0, s, softmax_backward_kernel<Log>)(
        y + r * n, dy + r * n, dx + r * n, n);
  });
  QKV_CUDA_LAUNCHED(softmax_backward_kernel);
}

}  // namespace

void softmax_forward(const float* x, float* y, int64_t rows, int64_t n) { forward<false>(x, y, rows, n); }
void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t n) { forward<true>(x, y, rows, n); }
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
  backward<false>(y, dy, dx, rows, n);
}
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
  backward<true>(y, dy, dx, rows, n);
}

// x: k pointers on the host (as ops pass them) to device arrays of n; the pointer array is copied to
// the device on the current stream and freed in stream order.
void log_mean_exp(const float* const* x, int64_t k, float* y, int64_t n) {
  if (n == 0) return;
  cudaStream_t s = stream();
  const float** xd = nullptr;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&xd), sizeof(float*) * k, s));
  QKV_CUDA_CHECK(cudaMemcpyAsync(xd, x, sizeof(float*) * k, cudaMemcpyHostToDevice, s));
  QKV_LAUNCH(blocks_for(n, kThreads), kThreads, 0, s, log_mean_exp_kernel)(xd, k, y, n, logf(static_cast<float>(k)));
  QKV_CUDA_LAUNCHED(log_mean_exp_kernel);
  QKV_CUDA_CHECK(cudaFreeAsync(xd, s));
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
