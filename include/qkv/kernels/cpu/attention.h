// Scaled dot-product attention on the CPU — the reference path, which materializes the Lq×Lk
// probabilities (needed when the caller asks for the attention weights, and the yardstick the
// fast kernels are tested against).
//
//   S = scale · Q Kᵀ + M          (M: additive mask; boolean false / causal future → −∞)
//   P = softmax(S) row-wise       (a row with every key masked → all zeros, never NaN)
//   W = P ∘ Z / (1 − p)           (dropout; Z ~ Bernoulli(1 − p), regenerated from the counter)
//   O = W V
//
// Backward, given dO:
//   dV = Wᵀ dO,   dW = dO Vᵀ,   dP = dW ∘ Z / (1 − p)
//   dS = P ∘ (dP − rowsum(P ∘ dP))
//   dQ = scale · dS K,   dK = scale · dSᵀ Q,   dM = dS
//
// Layout: q [B, H, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv], any strides for the first three
// dims, unit stride for the last. H must be a multiple of Hkv (grouped-query attention: query head
// h reads key/value head h / (H / Hkv)).
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

struct AttnMask {
  enum class Kind { none, boolean, additive };
  Kind kind = Kind::none;
  const void* data = nullptr;            // uint8_t (1 = may attend) or float (added to scores)
  int64_t sb = 0, sh = 0, sq = 0, sk = 0;  // strides in elements; 0 along broadcast dims
};

// Where the rows of a [B, H, L, d] output or output gradient live: row (b, h, i) starts at
// b·sb + h·sh + i·sl, unit stride along d. Dense [B, H, L, d] unless the caller asks for another
// layout, e.g. [B, L, H, d] (sh = d, sl = H·d), so heads are already merged for the output
// projection. Only the flash kernels read these; the reference kernels and the bf16 forward write dense.
struct HeadLayout {
  int64_t sb = 0, sh = 0, sl = 0;
  static HeadLayout dense(int64_t H, int64_t L, int64_t d) { return {H * L * d, L * d, d}; }
  int64_t offset(int64_t b, int64_t h, int64_t i) const { return b * sb + h * sh + i * sl; }  // of row (b, h, i)
};

struct AttnProblem {
  int64_t B = 1, H = 1, Hkv = 1, Lq = 0, Lk = 0, D = 0, Dv = 0;
  const float* q = nullptr;
  int64_t q_sb = 0, q_sh = 0, q_sl = 0;
  const float* k = nullptr;
  int64_t k_sb = 0, k_sh = 0, k_sl = 0;
  const float* v = nullptr;
  int64_t v_sb = 0, v_sh = 0, v_sl = 0;
  AttnMask mask;
  bool causal = false;  // key j is visible to query i iff j ≤ i (top-left aligned, as PyTorch)
  float scale = 1.f;
  float dropout_p = 0.f;
  uint64_t seed = 0, counter = 0;  // dropout of element (b,h,i,j) uses counter + ((b·H + h)·Lq + i)·Lk + j
  // Flash kernels: layouts of out and dout ([B, H, Lq, Dv]), dq ([B, H, Lq, D]), dk ([B, Hkv, Lk, D])
  // and dv ([B, Hkv, Lk, Dv]). prepare() sets them dense.
  HeadLayout out_l, dout_l, dq_l, dk_l, dv_l;
};

// out: dense [B, H, Lq, Dv]. probs (P, before dropout; kept for the backward) and weights (W, after
// dropout, what PyTorch returns as attention weights): dense [B, H, Lq, Lk], either may be null.
void attention_forward_reference(const AttnProblem& p, float* out, float* probs, float* weights);

// dout: dense [B, H, Lq, Dv]; probs: from the forward. dq dense [B, H, Lq, D], dk [B, Hkv, Lk, D],
// dv [B, Hkv, Lk, Dv], overwritten. dscores (dS = dM, dense [B, H, Lq, Lk]) may be null.
void attention_backward_reference(const AttnProblem& p, const float* probs, const float* dout, float* dq, float* dk,
                                  float* dv, float* dscores);

// The tiled ("flash") path: same problem, never materializes Lq×Lk (attention_flash.cpp).
// out: [B, H, Lq, Dv] laid out as p.out_l; lse: dense [B, H, Lq] log-sum-exp of each row's scores
// (−∞ for a row that sees no key), kept for the backward; may be null for inference.
void attention_forward_flash(const AttnProblem& p, float* out, float* lse);
// out and lse from the forward; dout, dq, dk, dv laid out as p.dout_l, p.dq_l, p.dk_l, p.dv_l;
// dq, dk, dv overwritten.
void attention_backward_flash(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq,
                              float* dk, float* dv);

// bf16 forward (inference): q, k, v rounded to bf16, both products on AVX512_BF16 dot products
// with f32 accumulation; softmax in f32. out: dense f32 [B, H, Lq, Dv].
void attention_forward_flash_bf16(const AttnProblem& p, float* out);
bool has_avx512_bf16();  // whether this build has the bf16 kernel

}  // namespace qkv::kernels::cpu
