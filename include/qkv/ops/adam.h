// The Adam / AdamW update of one parameter as a fused op (torch._fused_adam_'s counterpart), in place
// and off the tape; train::Adam calls it for each parameter (the formulas are in qkv/train/optim.h).
#pragma once

#include <array>
#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

struct AdamUpdate {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.f;
  bool decoupled_weight_decay = true;  // AdamW (true) or Adam with L2 decay (false)
  int64_t step = 1;                    // t, counting from 1 (for the bias corrections)
  // A step graph's (train/step_graph.h), whose replays change lr and t after the kernels were
  // recorded: where defined, three f32 on the parameters' device — adam_step_numbers(lr, t) of the
  // step being run, written there before it runs — which the kernel reads in place of lr and step.
  Tensor step_numbers;
};

// The numbers of one step that depend on lr and t, in double and then rounded to f32:
//   [lr / (1 − β₁ᵗ),  1 / √(1 − β₂ᵗ),  1 − lr·λ (AdamW) or 1 (Adam)]
std::array<float, 3> adam_step_numbers(const AdamUpdate& u);

// param, exp_avg, exp_avg_sq: dense f32 of one shape, updated in place; grad: that shape, any layout.
void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamUpdate& u);

// The update of many parameters at once (torch._fused_adamw_ over lists: one launch on a GPU for up
// to 64 of them), each list's i-th tensors as above. clip_factor, when defined, is one f32 on their
// device by which every gradient is multiplied first (clip_coefficient's [1], never read back to the
// host: g · s rounded to f32, as clip_grad_norm_ scaling the gradients in place; the gradients are
// left as they are). bf16_copies, when not empty, holds for each parameter a dense bf16 tensor of its
// shape on its device, or an undefined one: the updated parameter is written there too, rounded as
// to(DType::bf16) rounds it, in the same pass (autocast's weight copies for the next step:
// ops/autocast.h's AutocastWeights::copies_for).
void adam_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs, const AdamUpdate& u,
                  const Tensor& clip_factor = Tensor(), const std::vector<Tensor>& bf16_copies = {});

}  // namespace qkv
