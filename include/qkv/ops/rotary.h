// Rotary position embeddings (RoPE, Su et al. 2021), as Llama applies them to queries and keys
// (Hugging Face's apply_rotary_pos_emb, the "rotate half" layout): the first `rot` features of each
// head are split into halves x₁ = x[:rot/2], x₂ = x[rot/2:rot], and position t rotates each pair
// (x₁ᵢ, x₂ᵢ) by the angle t·θᵢ:
//
//   y[:rot]  = x[:rot] · cos + rotate_half(x[:rot]) · sin,   rotate_half(x) = (−x₂, x₁)
//   y[rot:]  = x[rot:]                                        (partial rotary: the rest unchanged)
//
// where cos, sin [T, rot] hold cos(t·θᵢ), sin(t·θᵢ) with θ repeated over both halves. A rotation, so
// the backward is the inverse rotation: dx = dy · cos − rotate_half(dy · sin) … written out by the
// ops it is built from, which record their own backward.
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

// x [B, H, T, D], cos/sin [T, rot] (rot even, ≤ D; no gradient) → [B, H, T, D].
Tensor apply_rotary_pos_emb(const Tensor& x, const Tensor& cos, const Tensor& sin);

}  // namespace qkv
