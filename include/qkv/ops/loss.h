// cross_entropy(logits [N, C], target i32 [N]) as torch.nn.functional.cross_entropy:
//   ℓ_n = −(1 − ε) log p_{n, y_n} − (ε / C) Σ_c log p_{n, c},   p = softmax(logits)
//   loss = mean over n with y_n ≠ ignore_index (reduction "mean"), or the sum ("sum"),
//   or per-row ℓ ("none", ignored rows 0).
// Backward: dlogits_n = (p_n − (1 − ε) onehot(y_n) − ε/C) · (dloss / count).
#pragma once

#include <string>

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     float label_smoothing = 0.f, const std::string& reduction = "mean");

// A language model's output layer and its loss, without the [N, C] logits (Liger-Kernel's fused linear
// cross-entropy; src/ops/linear_cross_entropy.cpp):
//   linear_cross_entropy(x [N, d], weight [C, d], target i32 [N], bias [C] or undefined, …)
//     = cross_entropy(linear(x, weight, bias), target, ignore_index, label_smoothing, reduction)
// for reduction "mean" or "sum". The rows go through in chunks of `chunk_rows` (0: as many as make
// logits no larger than x or 2²³ elements, at least 512): a chunk's logits give its rows' losses and —
// where a gradient is wanted — at once their gradient for a loss gradient of 1, dx's rows = dlogits W,
// dW += dlogitsᵀ x, db += Σ_rows dlogits, the chunk's logits then overwritten by the next one's. The
// backward multiplies dx, dW, db by the loss's gradient (a scalar: "none" is refused, its per-row
// gradient unknown before the backward; and in place, once: a second backward through the same graph
// is refused). At GPT-2's vocabulary (50,257) and 8,192 tokens the logits and their gradient are 1.6 GB
// each; a chunk's, 103 MB. One chunk gives cross_entropy(linear(…))'s bits,
// forward and backward; more chunks add dW and db in chunks (within rounding). Under Autocast(bf16)
// the products take bf16 operands as linear's do.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target, const Tensor& bias = Tensor(),
                            int64_t ignore_index = -100, float label_smoothing = 0.f,
                            const std::string& reduction = "mean", int64_t chunk_rows = 0);

}  // namespace qkv
