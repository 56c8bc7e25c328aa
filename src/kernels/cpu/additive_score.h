// Bahdanau's additive attention scores, fused (nn/alignment.h's "additive" score):
//
//   e_tj = Σ_a v_a tanh(q_ta + k_ja)          q = W_q s (the decoder states), k = W_k h + b (the keys)
//
// backward, with τ_tja = tanh(q_ta + k_ja) recomputed rather than stored ([T, S, A] per sentence):
//   g_tja = de_tj v_a (1 − τ_tja²)    dq_ta = Σ_j g_tja    dk_ja = Σ_t g_tja    dv_a = Σ_{t,j} de_tj τ_tja
//
// Unfused, the same scores write q + k ([B, T, S, A]), its tanh, and read both back twice in the
// backward; here nothing of that size is ever stored.
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// q [B, T, A], k [B, S, A], v [A] (all dense) → e [B, T, S].
void additive_score_forward(const float* q, const float* k, const float* v, float* e, int64_t B, int64_t T, int64_t S,
                            int64_t A);
// de [B, T, S] → dq [B, T, A], dk [B, S, A], dv [A] (each overwritten; any may be null).
void additive_score_backward(const float* q, const float* k, const float* v, const float* de, float* dq, float* dk,
                             float* dv, int64_t B, int64_t T, int64_t S, int64_t A);

}  // namespace qkv::kernels::cpu
