// Decoding's matrix–vector products with bf16 weights: batch-1 generation reads every weight once
// per token, so its speed is the memory bandwidth over the weights' bytes; bf16 halves the bytes
// (and lets a 10M-parameter model sit in a 32 MB L3). Products and sums stay f32:
//
//   y[m, n] = Σ_k x[m, k] · f32(W[n, k]) (+ b[n]),   W: bf16 [N, K] row-major (PyTorch's layout)
#pragma once

#include <cstdint>

#include "qkv/core/dtype.h"

namespace qkv::kernels::cpu {

// x: f32 [M, K] (row stride ldx), W: bf16 [N, K], bias: f32 [N] or null, y: f32 [M, N] (stride ldy).
void gemv_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const bf16* W, const float* bias,
               float* y, int64_t ldy);

}  // namespace qkv::kernels::cpu
