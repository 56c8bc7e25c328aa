// Matrix products.
//   matmul:  C = A B with torch.matmul's rules (1-D operands, broadcast batch dims).
//            dA = dC Bᵀ,  dB = Aᵀ dC  (summed over broadcast batch dims)
//   linear:  y = x Wᵀ + b, W: [out, in] (PyTorch's layout). dx = dy W, dW = dyᵀ x, db = Σ dy
#pragma once

#include <string>

#include "qkv/ops/inference_weight.h"
#include "qkv/ops/tensor.h"

namespace qkv {

Tensor matmul(const Tensor& a, const Tensor& b);
// Under Autocast(DType::bf16) (ops/autocast.h) its products take bf16-rounded operands, f32 sums.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// Inference (no tape): linear(x, weight, bias) reading what `w` holds for weight
// (ops/inference_weight.h): int8 rows — any number of rows of x, through the int8 GEMM; a bf16
// copy — when x has at most 16 rows, a decoding step (kernels/cpu/gemv.h: half the bytes, f32
// accumulation); otherwise, or for f32, the f32 weight: one row through the same matrix–vector
// kernel (rows of W up to 3,072 long), batches through the weight's packed copy (from its second batch on).
Tensor linear_inference(const Tensor& x, const Tensor& weight, const InferenceWeight& w, const Tensor& bias = Tensor());
// Inference: log_softmax(linear_inference(x, weight, w, bias), -1), a decoding step's
// log-probabilities; on int8 rows one kernel takes each row's log-softmax as its logits are written
// (kernels/cpu/gemm_int8.h: linear_log_softmax_int8), the same numbers.
Tensor linear_log_softmax_inference(const Tensor& x, const Tensor& weight, const InferenceWeight& w,
                                    const Tensor& bias = Tensor());
// Inference: a feed-forward block, linear_inference(act(linear_inference(x, w1, iw1, b1)), w2, iw2, b2)
// with act "relu", "gelu", "gelu_tanh" or "silu" (x [..., K], w1 [H, K], w2 [N, H] → [..., N]). With
// int8 rows for both weights on the CPU the hidden activations are quantized in the first product's
// epilogue (kernels/cpu/gemm_int8.h: feed_forward_int8), never written as f32; the same numbers.
Tensor feed_forward_inference(const Tensor& x, const Tensor& w1, const InferenceWeight& iw1, const Tensor& b1,
                              const std::string& activation, const Tensor& w2, const InferenceWeight& iw2,
                              const Tensor& b2);

}  // namespace qkv
