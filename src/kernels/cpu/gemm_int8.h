// int8 products for decoding (issue 27): weights quantized per output row, activations per input
// row, products summed exactly in int32 by oneDNN's integer GEMM, one f32 multiply at the end.
//
//   weights   (once)     s_w[n] = max_k |W[n,k]| / 127,   W8[n,k] = round(W[n,k] / s_w[n])  ∈ [−127, 127]
//   activations (each)   s_x[m] = max_k |x[m,k]| / L,     X8[m,k] = round(x[m,k] / s_x[m]) ∈ [−L, L]
//   y[m,n] = s_x[m] · s_w[n] · Σ_k X8[m,k] · W8[n,k]  (+ b[n])
//
// The activations' levels L (int8_activations below): the products take u8 × s8 pairs, X8 + z
// (z = L + 1, the zero point taken back out with Σ_k W8[n,k]).
//   L = 127, z = 128 (8 bits) where every path sums u8 · s8 exactly in int32: oneDNN's effective ISA
//           has VNNI (vpdpbusd) or AMX, and this build's matrix–vector kernel uses vpdpbusd (or its
//           scalar loop) — the encoder's products need the eighth bit (docs/BENCHMARKS.md).
//   L = 63,  z = 64 (7 bits) elsewhere: without VNNI a u8 × s8 pair goes through vpmaddubsw's
//           saturating int16, and 2 · 127 · 127 < 2¹⁵ is what never saturates.
// Within one process every path (matrix–vector, packed, oneDNN's GEMM) sums the same integers.
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

// One int8 product's weights, as quantize_rows_int8 made them: W8 [N, K] (row stride ldw), s_w [N],
// Σ_k W8[n,k] [N], the bias [N] or null, and W8's packed copy or null.
struct Int8Weights {
  int64_t N, K;
  const int8_t* W8;
  int64_t ldw;
  const float* scale;
  const int32_t* row_sums;
  const float* bias;
  const PackedLinear* packed;
};

// A decoding step's log-probabilities from int8 weights: x [M, K] dense → y [M, N] dense,
//
//   y = log_softmax(x Wᵀ + b)
//
// the log-softmax taken on each row of logits as the dequantizing pass writes it, while it is in
// cache (a vocabulary's [128, 8,000] logits are 4 MB: two more passes through memory unfused). The
// same numbers as linear_int8 then log_softmax_forward.
void linear_log_softmax_int8(int64_t M, const float* x, const Int8Weights& w, float* y);

// The activation between a feed-forward block's two products (the formulas in activation.inc;
// silu(x) = x · σ(x)).
enum class FfnActivation : uint8_t { relu, gelu, gelu_tanh, silu };

// A feed-forward block on int8 weights: x [M, K] dense, l1 [H, K], l2 [N, H] → y [M, N] dense,
//
//   y = act(x W₁ᵀ + b₁) W₂ᵀ + b₂
//
// with the hidden activations' quantization fused into the first product: each row of its int32
// sums becomes f32 (scales, b₁), passes the activation, and is quantized for the second product
// (max|h| / L, the rounding) while it is in cache, in the sums' own buffer — the [M, H] f32 hidden
// activations are never written out, nor read back twice. The same numbers as linear_int8, the
// activation kernel, linear_int8 (exp/erf-based activations to the last bit where their kernel
// takes the same vector path on a row as on the whole buffer) — except silu, whose σ here is the
// vector exp's (~2 ulp from libm's expf, which the unfused sigmoid op calls element by element). The caller's buffers: hidden, int32
// [M, H] (the first product's sums, then each row's f32 activations in place) and hq, u8 [M, H] —
// an encoder's thousands of rows would keep a per-thread buffer that large for good.
void feed_forward_int8(int64_t M, const float* x, const Int8Weights& l1, FfnActivation act, const Int8Weights& l2,
                       float* y, int32_t* hidden, uint8_t* hq);

// An embedding lookup from int8 rows: out[i, :] = s_w[ids[i]] · W8[ids[i], :] (W8 [vocab, dim]); an
// id outside [0, vocab) is a qkv::Error naming it.
void embedding_int8(const int8_t* W8, const float* scale, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n,
                    float* out);

// The activations' quantization: levels L and zero point z = L + 1 (above).
struct Int8Activations {
  float levels;
  int32_t zero_point;
};
// Whether this CPU and build sum 8-bit activations exactly on every path (VNNI or AMX in oneDNN's
// effective ISA — ONEDNN_MAX_CPU_ISA lowers it — and a matrix–vector kernel without vpmaddubsw).
bool int8_full_range_available();
// The process's choice: 8 bits where available, unless QKV_INT8_ACTIVATION_BITS=7 (read once);
// products with K > kInt8FullRangeMaxK take 7 bits whatever the choice (Σ (X8 + 128) · W8 must fit
// in int32: K · 255 · 127 < 2³¹).
Int8Activations int8_activations(int64_t K);
int int8_activation_bits();
// Sets the choice (7 or 8; 8 only where available, else a qkv::Error): tests compare both. Not while
// another thread runs an int8 product.
void set_int8_activation_bits(int bits);
constexpr int64_t kInt8FullRangeMaxK = 66'000;

// Batches of at most this many rows take the matrix–vector kernel (one pass over W8), larger ones
// a GEMM.
constexpr int64_t kInt8GemvRows = 8;

}  // namespace qkv::kernels::cpu
