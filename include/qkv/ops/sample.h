// The next token of each row of logits, drawn on the logits' device (continuous batching's sampling
// step, decode/batching_generator.h: one number a row comes back to the host rather than the row):
// decode::Sampler's draw without top-k or top-p, formula in kernels/sample.inc —
//
//   temperature[r] ≤ 0:  the first of the row's largest logits (greedy; NaN never chosen)
//   temperature[r] > 0:  p = softmax(logits[r] / T) in f64; the least j with p_j > 0 whose cumulative
//                        probability exceeds u[r] (PyTorch: torch.multinomial(p, 1) with its own draw)
//
// On the CPU bit for bit decode::Sampler's tokens for the same u; on a GPU a draw within a rounding
// of a boundary may take the neighbouring token (its sums run in another order). Inference only.
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

// logits f32 [..., V] (V < 2³¹; rows = numel / V); temperature and u host values, one a row (u in
// [0, 1), temperature finite) → i32 [...] on the logits' device: each row's token, or −1 where the row
// has no distribution (a NaN logit, every logit −∞).
Tensor sample_rows(const Tensor& logits, const std::vector<double>& temperature, const std::vector<double>& u);

}  // namespace qkv
