// RMSNorm (Zhang & Sennrich 2019; Llama, Qwen2, Mistral), as torch.nn.functional.rms_norm over the
// last dimension:
//
//   y = x / √(mean(x²) + ε) · γ
//
// No mean is subtracted and there is no bias: LayerNorm without its centring.
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

// x [..., n] (f32), weight [n] or undefined (no scale) → [..., n]. Differentiable in x and weight.
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);

}  // namespace qkv
