// Matrix products.
//   matmul:  C = A B with torch.matmul's rules (1-D operands, broadcast batch dims).
//            dA = dC Bᵀ,  dB = Aᵀ dC  (summed over broadcast batch dims)
//   linear:  y = x Wᵀ + b, W: [out, in] (PyTorch's layout). dx = dy W, dW = dyᵀ x, db = Σ dy
#pragma once

#include "qkv/core/tensor.h"

namespace qkv {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace qkv
