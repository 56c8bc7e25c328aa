// scaled_dot_product_attention with torch.nn.functional's semantics:
//
//   Attention(Q, K, V) = softmax(Q Kᵀ · scale + M) V,    scale = 1/√d by default
//
// q [..., Lq, d], k [..., Lk, d], v [..., Lk, dv] with the same leading dims ([B, H] or [B] or
// none); Lq ≠ Lk and d ≠ dv are fine. attn_mask broadcasts to [..., Lq, Lk]: boolean (true = may
// attend, as PyTorch) or float (added to the scores; −inf masks). is_causal masks key j > query i
// (top-left aligned, as PyTorch; it may be combined with attn_mask here). A query whose every key
// is masked gets zeros and zero gradients, never NaN. dropout_p drops attention weights (train
// only: pass 0 at inference). enable_gqa: k/v may have fewer heads than q (dim −3), H % Hkv == 0.
// softcap > 0 (beyond PyTorch's SDPA: FlashAttention-2's softcap, Gemma 2's attn_logit_softcapping)
// caps the scores before the mask, Q Kᵀ · scale → softcap · tanh(Q Kᵀ · scale / softcap); on a GPU by the
// CUDA-core kernels, the mma.sync and 3xTF32 pairs and wgmma's at head dim 256 (the WMMA pair and wgmma's
// at 64 and 128 take no cap).
//
// Gradients flow to q, k, v and to a float attn_mask that requires grad.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "qkv/core/names.h"
#include "qkv/core/rng.h"
#include "qkv/ops/tensor.h"

namespace qkv {

// Which kernel computes attention. automatic: the tiled flash kernel (O(L) memory), except when
// the weights are asked for or a float mask needs its gradient, which take the reference kernel
// (it materializes the Lq×Lk probabilities).
enum class AttentionBackend { automatic, flash, reference };
constexpr EnumTable<AttentionBackend, 3> enum_table(AttentionBackend) {
  return {"attention backend",
          {{{AttentionBackend::automatic, "auto"}, {AttentionBackend::flash, "flash"}, {AttentionBackend::reference, "reference"}}}};
}

// What attention's products compute in: f32, bf16 or f16 — the flash path with q, k, v (and,
// backward, the output's gradient) rounded to the 16-bit format, f32 accumulation and softmax:
// bf16 about 3 significant digits (see docs/BENCHMARKS.md), f16 about 4 but only within ±65504:
// an operand beyond it becomes ±inf and a gradient dO below 2⁻²⁴ zero (PyTorch's float16 too, which
// training meets with a loss scale); scores and sums stay f32. Inputs, output and gradients stay f32.
// On a GPU both directions run on the tensor cores at head dims 64 and 128 (decoding steps of ≤ 16
// query rows, and other head dims, on the f32 kernels over the rounded operands); on the CPU bf16
// inference runs on AVX512_BF16 where present, everything else on the f32 kernels over the rounded
// operands. Under
// Autocast(bf16) (ops/autocast.h) attention computes in bf16 unless the weights or a float mask's
// gradient are asked for, as under torch.autocast.
enum class AttentionCompute : uint8_t { f32, bf16, f16 };
constexpr EnumTable<AttentionCompute, 3> enum_table(AttentionCompute) {
  return {"attention compute dtype",
          {{{AttentionCompute::f32, "f32"}, {AttentionCompute::bf16, "bf16"}, {AttentionCompute::f16, "f16"}}}};
}

struct AttentionOptions {
  Tensor attn_mask;
  float dropout_p = 0.f;
  bool is_causal = false;
  std::optional<float> scale;
  float softcap = 0.f;  // 0: none
  bool enable_gqa = false;
  Generator* generator = nullptr;  // for dropout; default_generator() when null
  AttentionBackend backend = AttentionBackend::automatic;
  AttentionCompute compute_dtype = AttentionCompute::f32;
};

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), float dropout_p = 0.f, bool is_causal = false,
                                    std::optional<float> scale = std::nullopt, bool enable_gqa = false);
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt);

// Also returns the attention weights [..., Lq, Lk] (after dropout, as PyTorch's
// MultiheadAttention returns them), for inspection: they carry no gradient.
struct AttentionResult {
  Tensor output;
  Tensor weights;
};
AttentionResult scaled_dot_product_attention_with_weights(const Tensor& q, const Tensor& k, const Tensor& v,
                                                          const AttentionOptions& opt = {});

}  // namespace qkv
