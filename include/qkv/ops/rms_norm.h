// RMSNorm (Zhang & Sennrich 2019; Llama, Qwen2, Mistral), as torch.nn.functional.rms_norm over the
// last dimension:
//
//   y = x / √(mean(x²) + ε) · γ
//
// No mean is subtracted and there is no bias: LayerNorm without its centring.
#pragma once

#include "qkv/ops/layer_norm.h"  // SumAndNorm
#include "qkv/ops/tensor.h"

namespace qkv {

// x [..., n] (f32), weight [n] or undefined (no scale) → [..., n]. Differentiable in x and weight.
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);

// rms_norm(x + Dropout_p(residual)), the dropout and the sum made in the same pass over the rows.
// residual: x's shape, f32. dropout_p (0: none; the caller passes 0 outside training) draws
// dropout(residual, dropout_p, true, generator)'s mask and bits.
//   backward: ds = rms_norm's dx at s = x + Dropout_p(residual);  dx = ds, dresidual = ds · m / (1 − p)
Tensor add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps, float dropout_p = 0.f,
                    Generator* generator = nullptr);

// The same, returning the sum too: a pre-norm decoder's residual stream s = x + Dropout_p(residual) and
// the next sublayer's input RMSNorm(s), from one pass (Llama's "h = x + attention; MLP(RMSNorm(h))", and
// a layer's last sum with the next layer's first norm). Both may take gradients:
//   backward: ds = dsum + rms_norm's dx at s;  dx = ds, dresidual = ds · m / (1 − p)
SumAndNorm add_rms_norm_with_sum(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                                 float dropout_p = 0.f, Generator* generator = nullptr);

}  // namespace qkv
