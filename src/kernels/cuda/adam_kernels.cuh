// The list Adam's kernel (adam.cu launches it; tests/kernels/norm_emulation_test.cpp runs it on the host
// through tests/kernels/cuda_emulation.h). Formulas: kernels/adam.inc.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/adam.h"
#include "kernels/cuda/bf16_bits.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_list.h"

namespace qkv::kernels::cuda {
namespace {

// θ ← decay·θ − step_size · m / (√v · inv_sqrt_bc2 + ε) after the moments, g = gs + l2·θ
__device__ inline void adam_element(float* p, float gs, float* m, float* v, const AdamCoefficients& c) {
  const float gi = fmaf(c.l2, *p, gs);
  const float mi = c.beta1 * *m + (1.f - c.beta1) * gi;
  const float vi = c.beta2 * *v + (1.f - c.beta2) * gi * gi;
  *m = mi, *v = vi;
  *p = *p * c.decay - c.step_size * mi / (sqrtf(vi) * c.inv_sqrt_bc2 + c.eps);
}

// Tensor blockIdx.y of the list (ptr: θ, g, m, v, and the bf16 copy carried as a float pointer, null
// for none), its elements strided over gridDim.x blocks; the copy rounded as convert_to_bf16_list's.
// step_numbers (or null): the step's numbers in device memory (kernels/adam.inc), read as the kernel runs.
__global__ void adam_list_kernel(TensorList<5> list, AdamCoefficients given, const float* step_numbers,
                                 const float* clip_factor) {
  const AdamCoefficients c = with_step_numbers(given, step_numbers);
  const int t = blockIdx.y;
  const int64_t n = list.n[t];
  float* p = list.ptr[0][t];
  const float* gp = list.ptr[1][t];
  float* m = list.ptr[2][t];
  float* v = list.ptr[3][t];
  uint16_t* copy = reinterpret_cast<uint16_t*>(list.ptr[4][t]);
  const float s = clip_factor ? *clip_factor : 1.f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    adam_element(p + i, __fmul_rn(gp[i], s), m + i, v + i, c);  // g · s rounded on its own (no contraction)
    if (copy) copy[i] = to_bf16_bits(p[i]);
  }
}

}  // namespace
}  // namespace qkv::kernels::cuda
