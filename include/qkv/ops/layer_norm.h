// layer_norm over the trailing dims `normalized_shape` (formulas in kernels/cpu/layer_norm.h).
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), float eps = 1e-5f);

}  // namespace qkv
