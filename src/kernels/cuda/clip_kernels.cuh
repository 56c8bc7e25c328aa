// Clipping's kernels (clip.cu launches them; tests/kernels/norm_emulation_test.cpp runs them on the host
// through tests/kernels/cuda_emulation.h). Formulas: kernels/clip.inc.
#pragma once

#include <cmath>
#include <cstdint>

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
}  // namespace qkv::kernels::cuda
