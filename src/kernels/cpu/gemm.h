// The CPU's GEMM (kernels/gemm.inc: the formula, one declaration for every device) through oneDNN,
// chosen by measurement on this machine (docs/BENCHMARKS.md: oneDNN's sgemm reaches ~500 GF/s on 2
// Zen 5 cores at transformer shapes and shares our OpenMP pool), and a batched form of the CPU's own.
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/gemm.inc"

// `batch` independent GEMMs, matrix i at A + i·stride_a etc. Small problems run in parallel over
// the batch (each GEMM single-threaded); large ones one after another, each using every thread.
void sgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                   int64_t ldc, int64_t stride_c, int64_t batch);

// C[i, :N] = bias for each of M rows ldc apart (sgemm_bias's and gemm_bf16_bias's first pass on the CPU)
void fill_bias_rows(float* C, int64_t ldc, const float* bias, int64_t M, int64_t N);

}  // namespace qkv::kernels::cpu
