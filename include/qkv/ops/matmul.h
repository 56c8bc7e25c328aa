// Matrix products.
//   matmul:  C = A B with torch.matmul's rules (1-D operands, broadcast batch dims).
//            dA = dC Bᵀ,  dB = Aᵀ dC  (summed over broadcast batch dims)
//   linear:  y = x Wᵀ + b, W: [out, in] (PyTorch's layout). dx = dy W, dW = dyᵀ x, db = Σ dy
#pragma once

#include "qkv/ops/inference_weight.h"
#include "qkv/ops/tensor.h"

namespace qkv {

Tensor matmul(const Tensor& a, const Tensor& b);
// Under Autocast(DType::bf16) (ops/autocast.h) its products take bf16-rounded operands, f32 sums.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// Inference (no tape): linear(x, weight, bias) reading what `w` holds for weight
// (ops/inference_weight.h): int8 rows — any number of rows of x, through the int8 GEMM; a bf16
// copy — when x has at most 16 rows, a decoding step (kernels/cpu/gemv_bf16.h: half the bytes, f32
// accumulation); otherwise, or for f32, the f32 weight.
Tensor linear_inference(const Tensor& x, const Tensor& weight, const InferenceWeight& w, const Tensor& bias = Tensor());

}  // namespace qkv
