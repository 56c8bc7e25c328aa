// f32 → bf16 on the GPU, one element: dtype.h's f32_to_bf16 bit for bit — the list cast's
// (convert_kernels.cuh) and the bf16 copies the norms and activations write of their outputs
// (ops/autocast.h's activation copies).
#pragma once

#include <cstdint>

namespace qkv::kernels::cuda {

// f32 → bf16 bits, round to nearest even; NaN stays a quiet NaN.
__device__ inline uint16_t to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? u | 0x00400000u : u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(r >> 16);
}

}  // namespace qkv::kernels::cuda
