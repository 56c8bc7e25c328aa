// softmax / log_softmax along a dim (formulas in kernels/cpu/softmax.h).
#pragma once

#include "qkv/core/tensor.h"

namespace qkv {

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

}  // namespace qkv
