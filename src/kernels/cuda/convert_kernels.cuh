// f32 → bf16 on the GPU: the list kernel of convert_to_bf16_list (kernels/gemm_bf16.inc; elementwise.cu
// launches it, and tests/kernels/convert_emulation_test.cpp runs it on the host through
// tests/kernels/cuda_emulation.h), each element rounded by bf16_bits.cuh's to_bf16_bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/bf16_bits.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_list.h"

namespace qkv::kernels::cuda {
namespace {

// dst[t][i] = bf16(src[t][i]) for tensor t = blockIdx.y of the list (ptr[0]: the f32 sources, ptr[1]:
// the bf16 destinations, carried as float pointers), its elements strided over gridDim.x blocks.
__global__ void convert_to_bf16_list_kernel(TensorList<2> list) {
  const int t = blockIdx.y;
  const int64_t n = list.n[t];
  const float* src = list.ptr[0][t];
  uint16_t* dst = reinterpret_cast<uint16_t*>(list.ptr[1][t]);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = to_bf16_bits(src[i]);
}

}  // namespace
}  // namespace qkv::kernels::cuda
