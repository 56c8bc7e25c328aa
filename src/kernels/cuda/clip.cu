// Clipping by the global norm on the GPU (formulas: kernels/clip.inc), with no host round trip: a
// launch a chunk of ≤ kListTensors tensors writes each tensor's partial sums of squares (in double,
// kNormBlocks per tensor), then one block adds them all in a fixed order — the same bits every run —
// and writes ‖x‖ and s where the next kernel (Adam's list update) reads them.
#include <cmath>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_list.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kNormBlocks = 32;  // blocks a tensor: partial sums per tensor

// partial[(first + t) · kNormBlocks + b] = Σ x² over block b's share of tensor t = blockIdx.y.
__global__ void squares_kernel(TensorList<1> list, int64_t first, double* partial) {
  const int t = blockIdx.y;
  const float* x = list.ptr[0][t];
  const int64_t n = list.n[t];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double v = x[i];
    acc += v * v;
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[(first + t) * kNormBlocks + blockIdx.x] = acc;
}

// out[0] = √(Σ partial), out[1] = min(1, max_norm / (‖x‖ + 1e-6)); one block.
__global__ void clip_finish_kernel(const double* partial, int64_t count, double max_norm, float* out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) {
    const double norm = sqrt(acc), s = max_norm / (norm + 1e-6);
    out[0] = static_cast<float>(norm);
    out[1] = s < 1.0 ? static_cast<float>(s) : 1.f;
  }
}

}  // namespace

void clip_coefficient(const float* const* x, const int64_t* n, int64_t count, double max_norm, float* out) {
  cudaStream_t s = stream();
  double* partial = nullptr;
  const int64_t partials = (count > 0 ? count : 1) * kNormBlocks;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), partials * sizeof(double), s));
  QKV_CUDA_CHECK(cudaMemsetAsync(partial, 0, partials * sizeof(double), s));  // empty tensors add nothing
  for_each_chunk<1>({x}, n, count, [&](const TensorList<1>& list, int64_t first, int tensors, int64_t) {
    squares_kernel<<<dim3(kNormBlocks, tensors), 256, 0, s>>>(list, first, partial);
    QKV_CUDA_LAUNCHED(squares_kernel);
  });
  clip_finish_kernel<<<1, 256, 0, s>>>(partial, partials, max_norm, out);
  QKV_CUDA_LAUNCHED(clip_finish_kernel);
  QKV_CUDA_CHECK(cudaFreeAsync(partial, s));
}

}  // namespace qkv::kernels::cuda
