// softmax / log_softmax along a dim (formulas in kernels/cpu/softmax.h), and the log of a mean of
// exponentials (an ensemble's mean probability, from its members' log-probabilities).
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// In place along the last dim, no tape: decoding's next-token scores, where the logits are not kept
// (a [rows, vocab] buffer less at decoding's memory peak). x: dense f32, not requiring grad.
Tensor& log_softmax_(Tensor& x);

// Elementwise over tensors of one shape, no tape:
//   log((1/n) Σ_i exp(x_i)) = m + log Σ_i exp(x_i − m) − log n,   m = max_i x_i
// One tensor comes back as it is.
Tensor log_mean_exp(const std::vector<Tensor>& xs);

}  // namespace qkv
