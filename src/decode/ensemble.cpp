#include "qkv/decode/ensemble.h"

#include "qkv/core/error.h"
#include "qkv/ops/softmax.h"

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

// log p̄ = log((1/n) Σ_i p_i) (ops' log_mean_exp over the members' log-probabilities)
Tensor mean_probability_log(const std::vector<Tensor>& log_probs) {
  QKV_CHECK(!log_probs.empty(), "ensemble: no log-probabilities");
  for (const Tensor& t : log_probs)
    QKV_CHECK(t.dtype() == DType::f32 && t.shape() == log_probs[0].shape(), "ensemble: members returned ",
              shape_str(log_probs[0].shape()), " and ", shape_str(t.shape()),
              " log-probabilities (do the models share one vocabulary?)");
  return log_mean_exp(log_probs);
}

}  // namespace qkv::decode
