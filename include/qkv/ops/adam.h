// The Adam / AdamW update of one parameter as a fused op (torch._fused_adam_'s counterpart), in place
// and off the tape; train::Adam calls it for each parameter (the formulas are in qkv/train/optim.h).
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

struct AdamUpdate {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.f;
  bool decoupled_weight_decay = true;  // AdamW (true) or Adam with L2 decay (false)
  int64_t step = 1;                    // t, counting from 1 (for the bias corrections)
};

// param, exp_avg, exp_avg_sq: dense f32 of one shape, updated in place; grad: that shape, any layout.
void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamUpdate& u);

}  // namespace qkv
