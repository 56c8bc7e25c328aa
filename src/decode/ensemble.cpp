#include "qkv/decode/ensemble.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"

namespace qkv::decode {

EnsembleStepModel::EnsembleStepModel(std::vector<std::unique_ptr<StepModel>> members) : members_(std::move(members)) {
  QKV_CHECK(!members_.empty(), "ensemble: no models");
}

Tensor EnsembleStepModel::step(const std::vector<int32_t>& tokens) {
  std::vector<Tensor> lp;
  lp.reserve(members_.size());
  for (auto& m : members_) lp.push_back(m->step(tokens));
  return mean_probability_log(lp);
}

void EnsembleStepModel::reorder(const std::vector<int64_t>& index, bool sources_changed) {
  for (auto& m : members_) m->reorder(index, sources_changed);
}

// log p̄ = m + log Σ_i exp(log p_i − m) − log n,  m = max_i log p_i   (elementwise)
Tensor mean_probability_log(const std::vector<Tensor>& log_probs) {
  QKV_CHECK(!log_probs.empty(), "ensemble: no log-probabilities");
  if (log_probs.size() == 1) return log_probs[0];
  std::vector<Tensor> lp;
  for (const Tensor& t : log_probs) {
    QKV_CHECK(t.dtype() == DType::f32 && t.shape() == log_probs[0].shape(), "ensemble: members returned ",
              shape_str(log_probs[0].shape()), " and ", shape_str(t.shape()),
              " log-probabilities (do the models share one vocabulary?)");
    lp.push_back(t.contiguous());
  }
  Tensor out = Tensor::empty(lp[0].shape(), DType::f32);
  std::vector<const float*> in;
  for (const Tensor& t : lp) in.push_back(t.data<float>());
  float* o = out.data<float>();
  const float log_n = std::log(static_cast<float>(lp.size()));
  parallel_for(out.numel(), 1 << 14, [&, o, log_n](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      float m = -std::numeric_limits<float>::infinity();
      for (const float* p : in) m = std::max(m, p[j]);
      if (m == -std::numeric_limits<float>::infinity()) {  // impossible under every member
        o[j] = m;
        continue;
      }
      float s = 0;
      for (const float* p : in) s += std::exp(p[j] - m);
      o[j] = m + (std::log(s) - log_n);
    }
  });
  return out;
}

}  // namespace qkv::decode
