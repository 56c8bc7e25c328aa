// The whole-tensor sums' kernels (elementwise.cu launches them: sum_f64, sum_squares_f64, sum_all;
// tests/kernels/loss_emulation_test.cpp runs them on the host through tests/kernels/cuda_emulation.h):
// each block's share in double, then — for a sum that stays on the device — the blocks' partial sums
// added by one block in a fixed order.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda {
namespace {

template <bool Square>
__global__ void sum_kernel(const float* x, int64_t n, double* partial) {
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double v = x[i];
    acc += Square ? v * v : v;
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: the partial sums in a fixed order, rounded once to f32.
__global__ void sum_partials_kernel(const double* partial, unsigned blocks, float* out) {
  double acc = 0;
  for (unsigned i = threadIdx.x; i < blocks; i += blockDim.x) acc += partial[i];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *out = static_cast<float>(acc);
}

}  // namespace
}  // namespace qkv::kernels::cuda
