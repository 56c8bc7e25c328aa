// int8 products for decoding (issue 27): weights quantized per output row, activations per input
// row, products summed exactly in int32 by oneDNN's integer GEMM, one f32 multiply at the end.
//
//   weights   (once)     s_w[n] = max_k |W[n,k]| / 127,   W8[n,k] = round(W[n,k] / s_w[n])  ∈ [−127, 127]
//   activations (each)   s_x[m] = max_k |x[m,k]| / 63,    X8[m,k] = round(x[m,k] / s_x[m]) ∈ [−63, 63]
//   y[m,n] = s_x[m] · s_w[n] · Σ_k X8[m,k] · W8[n,k]  (+ b[n])
//
// Why 63 for activations: CPUs without VNNI multiply u8 × s8 pairs into a saturating int16
// (vpmaddubsw); oneDNN feeds it X8 + 64 ∈ [1, 127] (its u8 operand, the 64 taken back out as a zero
// point), and 2 · 127 · 127 < 2¹⁵ can never saturate. The same numbers on every CPU: a machine
// with VNNI computes the identical integer sums.
#pragma once

#include <cstdint>

#include "kernels/cpu/packed_linear.h"

namespace qkv::kernels::cpu {

// W: f32 [N, K] → W8 [N, K], s_w [N] as above (an all-zero row gets scale 1), and row_sums [N] =
// Σ_k W8[n,k] (what the activations' zero point contributes, taken back out by linear_int8).
void quantize_rows_int8(int64_t N, int64_t K, const float* W, int8_t* W8, float* scale, int32_t* row_sums);

// x: f32 [M, K] (row stride ldx), W8: int8 [N, K] (row stride ldw), scale: s_w [N], row_sums: [N]
// from quantize_rows_int8, bias: f32 [N] or null → y: f32 [M, N] (row stride ldy). packed: W8's
// packed copy (kernels/cpu/packed_linear.h) or null; batches of more than a few rows read it when
// given, and oneDNN's GEMM (which packs W8 on each call) otherwise.
void linear_int8(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const int8_t* W8, int64_t ldw,
                 const float* scale, const int32_t* row_sums, const float* bias, float* y, int64_t ldy,
                 const PackedLinear* packed = nullptr);

// An embedding lookup from int8 rows: out[i, :] = s_w[ids[i]] · W8[ids[i], :] (W8 [vocab, dim]); an
// id outside [0, vocab) is a qkv::Error naming it.
void embedding_int8(const int8_t* W8, const float* scale, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n,
                    float* out);

// Batches of at most this many rows take the matrix–vector kernel (one pass over W8), larger ones
// a GEMM.
constexpr int64_t kInt8GemvRows = 8;

}  // namespace qkv::kernels::cpu
