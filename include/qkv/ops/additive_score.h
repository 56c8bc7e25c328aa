// Bahdanau's additive attention scores in one op (formulas in kernels/cpu/additive_score.h):
//
//   additive_score(q [B, T, A], k [B, S, A], v [A]) → e [B, T, S],   e_tj = vᵀ tanh(q_t + k_j)
//
// the same as matmul(tanh(q.unsqueeze(2) + k.unsqueeze(1)), v) without the [B, T, S, A] tensors.
// Differentiable in q, k and v.
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor additive_score(const Tensor& q, const Tensor& k, const Tensor& v);

}  // namespace qkv
