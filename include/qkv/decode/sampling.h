// Choosing the next token from logits: greedy, or sampling with temperature, top-k and top-p
// (nucleus), with the filters' usual semantics (nanoGPT / Hugging Face):
//
//   p = softmax(logits / T)
//   top-k: keep the k largest logits (ties with the k-th are kept), the rest → −∞
//   top-p: keep the smallest set of most probable tokens whose total probability reaches p
//          (the token that crosses p is kept; at least one token always survives)
//
// Sampling is deterministic for a seed: draw n uses the counter-based generator at (seed, n).
//
// The filters below are the formulas written plainly (the reference); Sampler draws through ops'
// sample_rows, which computes them in the same order on the logits' device — bit for bit these on the
// CPU (tests/decode/sampling_test.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "qkv/ops/sample.h"
#include "qkv/ops/tensor.h"

namespace qkv::decode {

// Sets every logit below the k-th largest to −∞ (k ≤ 0 or k ≥ size: no change).
void top_k_filter(std::vector<float>& logits, int64_t k);
// Sets the logits outside the nucleus of probability p to −∞ (p ≥ 1: no change).
void top_p_filter(std::vector<float>& logits, double p);
// softmax(logits / temperature) in double, for the draw.
std::vector<double> softmax_probs(const std::vector<float>& logits, double temperature = 1.0);
// The smallest index whose cumulative probability exceeds u ∈ [0, 1).
int64_t sample_from(const std::vector<double>& probs, double u);
int64_t argmax(const std::vector<float>& logits);  // the first maximum

struct SamplingOptions {
  // 0 — or below kGreedyTemperature: greedy (vLLM's rule; dividing the logits by less overflows them)
  double temperature = 1.0;
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  uint64_t seed = 1337;
  // The history's penalties, on the logits before all of the above (kernels/penalties.h, vLLM's):
  // a token of the prompt or the output has a positive logit divided by repetition_penalty and a
  // negative one multiplied (Hugging Face's repetition_penalty; 1: off); a token the output holds c
  // times loses frequency_penalty · c + presence_penalty (OpenAI's; 0: off).
  double repetition_penalty = 1.0;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
};

// Temperatures below it sample greedily: the limit of softmax(x / T) as T → 0 (vLLM's _SAMPLING_EPS).
inline constexpr double kGreedyTemperature = 1e-5;

class Sampler {
 public:
  // `prompt`: the tokens the repetition penalty weighs from the start (the output's join them).
  explicit Sampler(SamplingOptions opt, const std::vector<int32_t>& prompt = {});
  // One token from a row of logits ([V], or [1, V], on any device: sample_rows draws it there and one
  // number comes back); advances the draw counter and accepts the token (below). A row without a
  // distribution (a NaN, or no finite logit after the temperature) is refused by name.
  int64_t next(const Tensor& logits);
  int64_t next(const std::vector<float>& logits);
  uint64_t draws() const { return counter_; }
  // The next token's sampling for ops' sample_rows (the batching generator draws many rows in one
  // call): the options, the draw's uniform — advancing the counter as next() does — and, with
  // penalties, the tokens seen. The caller then accepts the token drawn.
  RowSampling row();
  // `token` joins the output: the history the penalties weigh.
  void accept(int32_t token);
  // The uniform in [0, 1) next() would draw (53 random bits), advancing the counter as it does; greedy
  // (temperature ≤ 0) draws none: 0, the counter kept.
  double draw();

 private:
  bool penalized() const {
    return opt_.repetition_penalty != 1 || opt_.frequency_penalty != 0 || opt_.presence_penalty != 0;
  }
  SamplingOptions opt_;
  uint64_t counter_ = 0;
  std::map<int32_t, SeenToken> seen_;  // by token (penalized() only)
};

}  // namespace qkv::decode
