// Mixed-precision GEMM for bf16 training (autocast): operands rounded to bfloat16, products and
// sums in f32, result f32. On AVX512_BF16 hardware `vdpbf16ps` does twice the multiply-adds of an
// f32 FMA, so oneDNN's bf16 matmul runs ≈ 2× its sgemm here (see docs/BENCHMARKS.md).
//
//   C[M,N] = op(A)[M,K] · op(B)[K,N] + beta · C,   A, B bf16 (row-major, op = identity or ᵀ), C f32
#pragma once

#include <cstdint>

#include "qkv/core/dtype.h"

namespace qkv::kernels::cpu {

// beta is 0 (overwrite C) or 1 (accumulate into C).
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
               const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The same product as sgemm of the operands widened to f32 (exact): what gemm_bf16 does on CPUs
// where oneDNN has no bf16 matmul (it needs AVX-512), callable anywhere so tests cover it.
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                       const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);

// dst[i] = bf16(src[i]), rounded to nearest even (as f32_to_bf16), in parallel.
void convert_to_bf16(const float* src, bf16* dst, int64_t n);

// dst[i] = f32(bf16(src[i])): the same rounding, kept in f32 (dst may be src), in parallel.
void round_to_bf16(const float* src, float* dst, int64_t n);

}  // namespace qkv::kernels::cpu
