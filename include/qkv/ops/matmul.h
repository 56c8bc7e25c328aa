// Matrix products.
//   matmul:  C = A B with torch.matmul's rules (1-D operands, broadcast batch dims).
//            dA = dC Bᵀ,  dB = Aᵀ dC  (summed over broadcast batch dims)
//   linear:  y = x Wᵀ + b, W: [out, in] (PyTorch's layout). dx = dy W, dW = dyᵀ x, db = Σ dy
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor matmul(const Tensor& a, const Tensor& b);
// Under Autocast(DType::bf16) (ops/autocast.h) its products take bf16-rounded operands, f32 sums.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// Inference (no tape): linear(x, weight, bias), but when `weight_bf16` (a bf16 copy of weight) is
// given and x has at most 16 rows — a decoding step — the product reads the bf16 copy instead
// (kernels/cpu/gemv_bf16.h: half the bytes, f32 accumulation; ~3 significant digits of weight).
Tensor linear_inference(const Tensor& x, const Tensor& weight, const Tensor& weight_bf16, const Tensor& bias = Tensor());

}  // namespace qkv
