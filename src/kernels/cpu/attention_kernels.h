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

#include "kernels/attention_problem.h"

namespace qkv::kernels::cpu {

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

// bf16 compute (attention_bf16.cpp), the flash pair's layouts: q, k, v (and dout) rounded to bf16.
// Forward for inference (lse null) on the AVX512_BF16 kernel below where this build has it, P
// rounded too; otherwise — training (lse wanted), dropout, no AVX512_BF16 — and for the backward,
// the f32 flash kernels over bf16-rounded copies (the GPU's tensor-core kernels round P and dS too).
void attention_forward_flash_bf16(const AttnProblem& p, float* out, float* lse);
void attention_backward_flash_bf16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                   float* dq, float* dk, float* dv);
// f16 compute (attention_bf16.cpp): the f32 flash kernels over copies rounded to IEEE f16, both
// directions (the GPU runs its tensor-core kernels on __half).
void attention_forward_flash_f16(const AttnProblem& p, float* out, float* lse);
void attention_backward_flash_f16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv);

// The AVX512_BF16 forward (inference): both products on bf16 dot products with f32 accumulation,
// softmax in f32; no dropout. out: dense f32 [B, H, Lq, Dv].
void attention_forward_flash_bf16_avx512(const AttnProblem& p, float* out);
bool has_avx512_bf16();  // whether this build has it

}  // namespace qkv::kernels::cpu
