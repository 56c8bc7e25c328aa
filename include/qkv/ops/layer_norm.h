// layer_norm over the trailing dims `normalized_shape` (formulas in kernels/cpu/layer_norm.h).
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), float eps = 1e-5f);

// layer_norm(x + residual), the sum made in the same pass over the rows (a post-LN Transformer's
// "LN(x + Sublayer(x))": one kernel where add and layer_norm are two). residual: x's shape and dtype.
//   backward: ds = layer_norm's dx at s = x + residual;  dx = dresidual = ds
Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                      const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), float eps = 1e-5f);

// The same, returning the sum too: a pre-LN layer's residual stream s = x + residual and the next
// sublayer's input LN(s), from one pass. Both may take gradients:
//   backward: ds = dsum + layer_norm's dx at s;  dx = dresidual = ds
struct SumAndNorm {
  Tensor sum, normalized;
};
SumAndNorm add_layer_norm_with_sum(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                   const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), float eps = 1e-5f);

}  // namespace qkv
