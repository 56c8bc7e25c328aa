// Choosing the next token from logits: greedy, or sampling with temperature, top-k and top-p
// (nucleus), with the filters' usual semantics (nanoGPT / Hugging Face):
//
//   p = softmax(logits / T)
//   top-k: keep the k largest logits (ties with the k-th are kept), the rest → −∞
//   top-p: keep the smallest set of most probable tokens whose total probability reaches p
//          (the token that crosses p is kept; at least one token always survives)
//
// Sampling is deterministic for a seed: draw n uses the counter-based generator at (seed, n).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

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
};

// Temperatures below it sample greedily: the limit of softmax(x / T) as T → 0 (vLLM's _SAMPLING_EPS).
inline constexpr double kGreedyTemperature = 1e-5;

class Sampler {
 public:
  explicit Sampler(SamplingOptions opt) : opt_(opt) {
    if (opt_.temperature < kGreedyTemperature) opt_.temperature = 0;  // (NaN stays: refused where drawn)
  }
  int64_t next(std::vector<float> logits);  // one token; advances the draw counter
  uint64_t draws() const { return counter_; }
  // Without top-k or top-p (or greedy): the draw ops' sample_rows makes on the logits' device
  // (ops/sample.h: the same token for the same u).
  bool plain() const {
    return opt_.temperature <= 0 || (std::isfinite(opt_.temperature) && opt_.top_k <= 0 && opt_.top_p >= 1.0);
  }
  double temperature() const { return opt_.temperature; }  // 0: greedy
  // The uniform in [0, 1) next() would draw (53 random bits), advancing the counter as it does; greedy
  // (temperature ≤ 0) draws none: 0, the counter kept.
  double draw();

 private:
  SamplingOptions opt_;
  uint64_t counter_ = 0;
};

}  // namespace qkv::decode
