// topk's kernel (topk.cu launches it; tests/kernels/norm_emulation_test.cpp runs it on the host through
// tests/kernels/cuda_emulation.h). Order and contract: kernels/topk.inc, kernels/topk.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/topk.h"

namespace qkv::kernels::cuda {
namespace {

struct MaxKey {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};

__global__ void topk_kernel(const float* x, int64_t n, int64_t k, float* values, int32_t* indices) {
  const float* row = x + blockIdx.x * n;
  uint64_t last = 0;
  for (int64_t j = 0; j < k; ++j) {
    uint64_t best = 0;  // below every key (−∞'s is 0x007fffff·2³² + …)
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const uint64_t key = topk_key(__ldg(row + i), i);
      if ((j == 0 || key < last) && key > best) best = key;
    }
    best = block_reduce(best, MaxKey{}, uint64_t{0});
    last = best;
    if (threadIdx.x == 0) {
      const auto i = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best));
      values[blockIdx.x * k + j] = row[i];
      indices[blockIdx.x * k + j] = i;
    }
  }
}

}  // namespace
}  // namespace qkv::kernels::cuda
