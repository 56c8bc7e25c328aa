// A normalizing kernel's row, with the residual added first (add_layer_norm, add_rms_norm): one block
// a row. With Add, s = x + drop(res) is written to `sum` (rounded as an addition would: the backward's
// input; drop: kernels/dropout_mask.h, the dropped residual dropout_kernel's bits) and normalized;
// without, x itself. Each thread adds f(element) over the elements it visits
// (j = threadIdx.x, + blockDim.x, …) into `partial`, the first of the norm's sums (Σx for LayerNorm's
// mean, Σx² for RMSNorm's), and later reads back only those elements.
#pragma once

#include <cstdint>

#include "kernels/cuda/bf16_bits.cuh"
#include "kernels/dropout_mask.h"
#include "kernels/residual_gradient.h"

namespace qkv::kernels::cuda {

// Returns the row the norm reads: sum's when Add, x's otherwise.
template <bool Add, class F>
__device__ inline const float* residual_row(const float* x, const float* res, const DropoutMask& drop, float* sum,
                                            int64_t n, F f, float& partial) {
  const int64_t at = blockIdx.x * n;
  if constexpr (Add) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float r = res[at + j];
      const float v = __fadd_rn(x[at + j], drop.active() ? drop(r, static_cast<uint64_t>(at + j)) : r);
      sum[at + j] = v;
      partial += f(v);
    }
    return sum + at;
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) partial += f(x[at + j]);
    return x + at;
  }
}

// The backward's counterpart (kernels/residual_gradient.h): element i of the norm's dx is v; writes
// dx[i] = v + dsum[i] (rounded as the addition of two gradients), dres[i] = drop(dx[i]) and the
// residual's gradient's bf16 copy.
__device__ inline void residual_gradient_at(const ResidualGradient& res, int64_t i, float v, float* dx) {
  if (res.dsum) v = __fadd_rn(v, res.dsum[i]);
  dx[i] = v;
  if (res.dres) res.dres[i] = v = res.drop.active() ? res.drop(v, static_cast<uint64_t>(i)) : v;
  if (res.grad16) reinterpret_cast<uint16_t*>(res.grad16)[i] = to_bf16_bits(v);
}

// y16[i] = bf16(v) when the copy is wanted (ops/autocast.h's activation copies)
__device__ inline void store_bf16(bf16* y16, int64_t i, float v) {
  if (y16) reinterpret_cast<uint16_t*>(y16)[i] = to_bf16_bits(v);
}

}  // namespace qkv::kernels::cuda
