#include "qkv/decode/ensemble.h"

#include "qkv/core/error.h"
#include "qkv/kernels/cpu/softmax.h"

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

// log p̄ = m + log Σ_i exp(log p_i − m) − log n,  m = max_i log p_i   (elementwise: kernels/cpu/softmax.h)
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
  kernels::cpu::log_mean_exp(in.data(), static_cast<int64_t>(in.size()), out.data<float>(), out.numel());
  return out;
}

}  // namespace qkv::decode
