// The next token of each row of logits, drawn on the logits' device (continuous batching's sampling
// step, decode/batching_generator.h: one number a row comes back to the host rather than the row):
// decode::Sampler's draw — temperature, top-k, top-p, then the draw —, formula in kernels/sample.inc:
//
//   temperature ≤ 0:  the first of the row's largest logits (greedy; NaN never chosen)
//   temperature > 0:  t = logits / T; top-k keeps the k largest t (ties with the k-th kept); top-p keeps
//                     the most probable tokens until their probability reaches p (the crossing one
//                     kept); p = softmax(t) over what is left, in f64; the least j with p_j > 0 whose
//                     cumulative probability exceeds u (PyTorch: torch.multinomial(p, 1) with its own
//                     draw, after Hugging Face's TopK and TopP warpers)
//
// On the CPU bit for bit decode::Sampler's tokens for the same u (it draws through this op); on a GPU
// a draw, or a top-p total, within a rounding of a boundary may take the neighbouring token (its sums
// run in another order). Before all of it, the penalties of what the row has seen (repetition,
// frequency, presence), on a copy of the logits. Inference only.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

// A token a generation has seen, for the penalties: how often its output holds it, whether its prompt does.
struct SeenToken {
  int32_t token = 0;
  int32_t count = 0;  // in the output
  bool in_prompt = false;
};

// One row's draw: decode::SamplingOptions for one token, with the uniform it draws and the history the
// penalties weigh (kernels/penalties.h: vLLM's, applied first, to the logits).
struct RowSampling {
  double temperature = 0;  // ≤ 0: greedy (no draw); NaN: no distribution (−1)
  int64_t top_k = 0;       // ≤ 0, or ≥ V: off
  double top_p = 1;        // in (0, 1); ≥ 1: off
  double u = 0;            // in [0, 1)
  float repetition_penalty = 1;  // > 0; 1: off
  float frequency_penalty = 0;   // finite; 0: off
  float presence_penalty = 0;    // finite; 0: off
  std::vector<SeenToken> seen;   // distinct tokens of the row's vocabulary
};

// logits f32 [..., V] (V < 2³¹; rows = numel / V), one RowSampling a row → i32 [...] on the logits'
// device: each row's token, or −1 where the row has no distribution (a NaN after the temperature, no
// finite logit).
Tensor sample_rows(const Tensor& logits, const std::vector<RowSampling>& rows);

}  // namespace qkv
