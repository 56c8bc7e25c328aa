// An ensemble of models searched as one (as fairseq and Marian do): each step every member sees the
// same rows and tokens, and the search gets the log of their mean next-token probability
//
//   log p̄(v) = log( (1/n) Σ_i p_i(v) ) = m + log Σ_i exp(log p_i(v) − m) − log n,   m = max_i log p_i(v)
//
// so the members must share one vocabulary. Reordering reorders every member's state (KV caches).
// One member is the member itself: its log-probabilities come back unchanged.
#pragma once

#include <memory>
#include <vector>

#include "qkv/decode/search.h"

namespace qkv::decode {

class EnsembleStepModel : public StepModel {
 public:
  explicit EnsembleStepModel(std::vector<std::unique_ptr<StepModel>> members);
  Tensor step(const std::vector<int32_t>& tokens) override;
  void reorder(const std::vector<int64_t>& index, bool sources_changed) override;

 private:
  std::vector<std::unique_ptr<StepModel>> members_;
};

// The formula above on f32 [rows, V] log-probabilities of equal shape.
Tensor mean_probability_log(const std::vector<Tensor>& log_probs);

}  // namespace qkv::decode
