// An f32 operand as bf16 or f16 attention reads it, on the GPU: the f32 kernels that serve 16-bit
// attention where no tensor-core kernel does (attention.cu's CUDA-core pair, a decoding step through
// the paged decoding kernel) round q, k and v as they load them — the numbers rounded copies would
// hold, without the copies.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/attention_problem.h"
#include "kernels/cuda/bf16_bits.cuh"

namespace qkv::kernels::cuda {

// Round 0: as it is (f32); 1: rounded to bf16 (to nearest even, as round_to_bf16 and dtype.h);
// 2: to IEEE f16 (as round_to_f16)
template <int Round>
__device__ inline float operand(float x) {
  static_assert(Round >= 0 && Round <= 2, "Round: 0 (f32), 1 (bf16) or 2 (f16)");
  if constexpr (Round == 1) return __uint_as_float(static_cast<uint32_t>(to_bf16_bits(x)) << 16);
  else if constexpr (Round == 2) return __half2float(__float2half_rn(x));
  else return x;
}

// The Round that reads operands as a problem's precision asks
constexpr int operand_rounding(AttnCompute c) { return c == AttnCompute::bf16 ? 1 : c == AttnCompute::f16 ? 2 : 0; }

}  // namespace qkv::kernels::cuda
