// layer_norm over the trailing dims `normalized_shape` (formulas in kernels/cpu/layer_norm.h).
#pragma once

#include "qkv/core/rng.h"
#include "qkv/ops/tensor.h"

namespace qkv {

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), float eps = 1e-5f);

// layer_norm(x + Dropout_p(residual)), the dropout and the sum made in the same pass over the rows (a
// post-LN Transformer's "LN(x + Dropout(Sublayer(x)))": one kernel where dropout, add and layer_norm
// are three). residual: x's shape and dtype. dropout_p (0: none; the caller passes 0 outside training)
// draws dropout(residual, dropout_p, true, generator)'s mask and bits.
//   backward: ds = layer_norm's dx at s = x + Dropout_p(residual);  dx = ds, dresidual = ds · m / (1 − p)
Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                      const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), float eps = 1e-5f,
                      float dropout_p = 0.f, Generator* generator = nullptr);

// The same, returning the sum too: a pre-LN layer's residual stream s = x + Dropout_p(residual) and the
// next sublayer's input LN(s), from one pass. Both may take gradients:
//   backward: ds = dsum + layer_norm's dx at s;  dx = ds, dresidual = ds · m / (1 − p)
struct SumAndNorm {
  Tensor sum, normalized;
};
SumAndNorm add_layer_norm_with_sum(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                   const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), float eps = 1e-5f,
                                   float dropout_p = 0.f, Generator* generator = nullptr);

}  // namespace qkv
