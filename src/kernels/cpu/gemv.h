// Decoding's matrix–vector products: batch-1 generation reads every weight once per token, so its
// speed is the memory bandwidth over the weights' bytes. Products and sums are f32:
//
//   y[m, n] = Σ_k x[m, k] · f32(W[n, k]) (+ b[n]),   W: f32 or bf16 [N, K] row-major (PyTorch's layout)
//
// Each output feature's row of W is summed whole before the next (two accumulator chains), so W is
// read front to back as one stream, which the hardware prefetcher follows; the threads split the
// features, each its own contiguous share. bf16 halves the bytes (and lets a 10M-parameter model sit
// in a 32 MB L3). For f32 this reads 1.1–2.3× faster than oneDNN's sgemm with one row, which walks
// several rows of W at once (K ≤ 2,048; docs/BENCHMARKS.md).
#pragma once

#include <cstdint>

#include "qkv/core/dtype.h"

namespace qkv::kernels::cpu {

// x: f32 [M, K] (row stride ldx), W: bf16 [N, K], bias: f32 [N] or null, y: f32 [M, N] (stride ldy).
void gemv_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const bf16* W, const float* bias, float* y,
               int64_t ldy);
// The same with f32 weights W [N, K] (row stride K).
//
// Rows longer than this read slower than oneDNN's sgemm (one thread, GB/s: K 4,096 19–23 against
// 23–24, K 8,192 18 against 24.5), which keeps a block of x in L1 across several rows where a whole
// row of x (32 KB at K 8,192) meets W's stream there; up to it, faster (K 3,072: 19–30 against 16–22).
inline constexpr int64_t kGemvF32MaxK = 3072;
void gemv_f32(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* W, const float* bias, float* y,
              int64_t ldy);

}  // namespace qkv::kernels::cpu
