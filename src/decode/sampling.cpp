#include "qkv/decode/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "qkv/core/error.h"
#include "qkv/core/rng.h"

namespace qkv::decode {

void top_k_filter(std::vector<float>& logits, int64_t k) {
  const auto n = static_cast<int64_t>(logits.size());
  if (k <= 0 || k >= n) return;
  std::vector<float> sorted = logits;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[static_cast<size_t>(k - 1)];
  for (float& x : logits)
    if (x < kth) x = -INFINITY;
}

std::vector<double> softmax_probs(const std::vector<float>& logits, double temperature) {
  QKV_CHECK(!logits.empty(), "softmax_probs: empty logits");
  QKV_CHECK(temperature > 0, "softmax_probs: temperature must be positive, got ", temperature);
  const double mx = *std::max_element(logits.begin(), logits.end());
  QKV_CHECK(std::isfinite(mx), "softmax_probs: logits have no finite maximum (NaN or all −∞)");
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - mx) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

void top_p_filter(std::vector<float>& logits, double top_p) {
  if (top_p >= 1.0) return;
  QKV_CHECK(top_p > 0, "top_p must be in (0, 1], got ", top_p);
  std::vector<double> p = softmax_probs(logits);
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  double cum = 0;
  size_t keep = 0;
  while (keep < order.size()) {  // keep tokens until the total reaches top_p (the crossing one included)
    cum += p[order[keep++]];
    if (cum >= top_p) break;
  }
  for (size_t i = keep; i < order.size(); ++i) logits[order[i]] = -INFINITY;
}

int64_t sample_from(const std::vector<double>& probs, double u) {
  double cum = 0;
  int64_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    last = static_cast<int64_t>(i);
    cum += probs[i];
    if (u < cum) return last;
  }
  QKV_CHECK(last >= 0, "sample_from: no token has positive probability");
  return last;  // u ≥ the rounded total: the last possible token
}

int64_t argmax(const std::vector<float>& logits) {
  QKV_CHECK(!logits.empty(), "argmax: empty logits");
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

Sampler::Sampler(SamplingOptions opt, const std::vector<int32_t>& prompt) : opt_(opt) {
  if (opt_.temperature < kGreedyTemperature) opt_.temperature = 0;  // (NaN stays: refused where drawn)
  QKV_CHECK(opt_.top_p > 0, "sampling: top_p must be in (0, 1] (1: off), got ", opt_.top_p);
  QKV_CHECK(std::isfinite(opt_.repetition_penalty) && opt_.repetition_penalty > 0 &&
                opt_.repetition_penalty <= 1e30,
            "sampling: the repetition penalty must be positive and finite (1: off), got ", opt_.repetition_penalty);
  QKV_CHECK(std::abs(opt_.frequency_penalty) <= 1e30 && std::abs(opt_.presence_penalty) <= 1e30,
            "sampling: the frequency and presence penalties must be finite (0: off), got ", opt_.frequency_penalty,
            " and ", opt_.presence_penalty);
  if (penalized())
    for (int32_t t : prompt) seen_[t] = SeenToken{t, 0, true};
}

RowSampling Sampler::row() {
  RowSampling r;
  r.temperature = opt_.temperature, r.top_k = opt_.top_k, r.top_p = opt_.top_p;
  r.u = draw();
  if (penalized()) {
    r.repetition_penalty = static_cast<float>(opt_.repetition_penalty);
    r.frequency_penalty = static_cast<float>(opt_.frequency_penalty);
    r.presence_penalty = static_cast<float>(opt_.presence_penalty);
    r.seen.reserve(seen_.size());
    for (const auto& [token, s] : seen_) r.seen.push_back(s);
  }
  return r;
}

void Sampler::accept(int32_t token) {
  if (!penalized()) return;
  SeenToken& s = seen_[token];
  s.token = token, ++s.count;
}

int64_t Sampler::next(const Tensor& logits) {
  // vLLM's order: the penalties, then (as Hugging Face's warpers) temperature, top-k, top-p, the draw
  const int32_t token = sample_rows(logits.reshape({1, -1}), {row()}).to_ints()[0];
  QKV_CHECK(token >= 0, "sampling: the logits hold no distribution (a NaN, or no finite logit after the temperature ",
            opt_.temperature, ")");
  accept(token);
  return token;
}

int64_t Sampler::next(const std::vector<float>& logits) {
  QKV_CHECK(!logits.empty(), "sampling: empty logits");
  return next(Tensor::from_blob(const_cast<float*>(logits.data()), {static_cast<int64_t>(logits.size())}, DType::f32));
}

double Sampler::draw() {
  if (opt_.temperature <= 0) return 0;
  return static_cast<double>(Generator::bits(opt_.seed, counter_++) >> 11) * 0x1.0p-53;  // 53 random bits
}

}  // namespace qkv::decode
