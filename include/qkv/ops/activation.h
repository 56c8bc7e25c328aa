// Activations and dropout (formulas in kernels/cpu/activation.h).
#pragma once

#include <string>

#include "qkv/core/rng.h"
#include "qkv/ops/tensor.h"

namespace qkv {

Tensor relu(const Tensor& x);
// approximate: "none" (exact erf, the default, as PyTorch) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// dropout(relu(x), p, true, gen) and dropout(gelu(x, approximate), p, true, gen) in one pass — a
// Transformer FFN's hidden layer in training: the same mask, bits and gradients (p = 0: the
// activation alone; the caller passes 0 outside training).
//   backward: dx = act'(x) · dy · m / (1 − p)
// With `bias` [x.size(-1)] (undefined: none) a linear layer's bias is added in the same pass — its GEMM
// then runs without it, one write and one read of the product fewer (Megatron's bias_gelu; an FFN's
// first layer: nn::feed_forward): the bits of dropout(act(add(x, bias))), forward and backward; the
// bias's gradient is Σ over rows of dx.
Tensor relu(const Tensor& x, float dropout_p, Generator* gen = nullptr, const Tensor& bias = Tensor());
Tensor gelu(const Tensor& x, const std::string& approximate, float dropout_p, Generator* gen = nullptr,
            const Tensor& bias = Tensor());
// SiLU (swish): x · σ(x), as F.silu — Llama's MLP gate.
Tensor silu(const Tensor& x);

// SwiGLU's product silu(gate) · up (Llama's MLP: down_proj(silu(gate_proj(x)) · up_proj(x))) in one pass,
// forward and backward, where F.silu(gate) * up makes three (vLLM's silu_and_mul, on two tensors); gate
// and up of one shape.
Tensor silu_mul(const Tensor& gate, const Tensor& up);
// Inverted dropout; identity when !training or p == 0. gen: default_generator() when null.
Tensor dropout(const Tensor& x, float p, bool training = true, Generator* gen = nullptr);
// Channel dropout (F.dropout2d): x [N, C, H, W] or [C, H, W]; each whole channel is zeroed with
// probability p, the others scaled by 1 / (1 − p). Identity when !training or p == 0.
Tensor dropout2d(const Tensor& x, float p, bool training = true, Generator* gen = nullptr);

}  // namespace qkv
