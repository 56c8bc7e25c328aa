// The CPU's bf16 GEMM and roundings: kernels/gemm_bf16.inc (one declaration for every device). On
// AVX512_BF16 hardware `vdpbf16ps` does twice the multiply-adds of an f32 FMA, so oneDNN's bf16
// matmul runs ≈ 2× its sgemm here (see docs/BENCHMARKS.md).
#pragma once

#include <cstdint>

#include "qkv/core/dtype.h"

namespace qkv::kernels::cpu {
#include "kernels/gemm_bf16.inc"

// The same product as sgemm of the operands widened to f32 (exact): what gemm_bf16 does on CPUs
// where oneDNN has no bf16 matmul (it needs AVX-512), callable anywhere so tests cover it.
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                       const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace qkv::kernels::cpu
