// Optimizers, learning-rate schedules and gradient clipping, with torch.optim's names and formulas.
//
// Adam / AdamW (Kingma & Ba; Loshchilov & Hutter), step t, gradient g, per parameter θ:
//   m ← β₁ m + (1 − β₁) g          v ← β₂ v + (1 − β₂) g²
//   θ ← θ − lr · (m / (1 − β₁ᵗ)) / (√(v / (1 − β₂ᵗ)) + ε)
//   weight decay λ:  AdamW: θ ← θ (1 − lr λ) first (decoupled);  Adam: g ← g + λ θ (L2)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qkv/core/names.h"
#include "qkv/ops/adam.h"
#include "qkv/ops/autocast.h"
#include "qkv/ops/tensor.h"

namespace qkv::train {

// Adam's weight decay: AdamW's decoupled decay (θ ← θ(1 − lr·λ)), or Adam's L2 term (g ← g + λθ, the paper's).
enum class Optimizer : uint8_t { adamw, adam };
// The learning-rate schedules of LrSchedule below.
enum class Schedule : uint8_t { constant, cosine, inverse_sqrt };
constexpr EnumTable<Optimizer, 2> enum_table(Optimizer) {
  return {"optimizer", {{{Optimizer::adamw, "adamw"}, {Optimizer::adam, "adam"}}}};
}
constexpr EnumTable<Schedule, 3> enum_table(Schedule) {
  return {"learning-rate schedule",
          {{{Schedule::cosine, "cosine"}, {Schedule::constant, "constant"}, {Schedule::inverse_sqrt, "inverse_sqrt"}}}};
}

struct ParamGroup {
  std::vector<std::pair<std::string, Tensor>> params;  // named, so the state saves by name
  float weight_decay = 0.f;
};

struct AdamOptions {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  bool decoupled_weight_decay = true;  // AdamW (true) or Adam with L2 (false)
};

class Adam {
 public:
  Adam(std::vector<ParamGroup> groups, AdamOptions opt);

  // One update of every parameter that has a gradient (parameters without one are skipped, as
  // PyTorch), each gradient first multiplied by clip_factor when it is defined (one f32 on the
  // parameters' device: clip_coefficient's [1], so that clipping needs no host round trip). The
  // updates are list ops, one a weight decay: on a GPU, a launch for up to 64 parameters. With
  // `casts` (bf16 autocast's weight copies: ops/autocast.h), the update also writes the bf16 copies
  // of the weights the scopes lend, in the same pass, so the next step's scope casts none of them.
  void step(const Tensor& clip_factor = Tensor(), AutocastWeights* casts = nullptr);
  void zero_grad();  // drops the gradients (set_to_none)

  // A step in two halves, for a step graph (train/step_graph.h) whose recording bakes the kernels'
  // arguments in: advance() counts the step (t ← t + 1) and, once the numbers live on the device,
  // writes there the ones lr and t give (ops/adam.h's adam_step_numbers, one row a weight-decay
  // group) — before each replay, outside the recording —; update() queues the list updates, which
  // read them there. step() = advance() then update().
  void keep_step_numbers_on_device();  // from now on: a [groups, 3] f32 tensor on the parameters' device
  void advance();
  void update(const Tensor& clip_factor = Tensor(), AutocastWeights* casts = nullptr);
  void set_lr(float lr) { opt_.lr = lr; }
  float lr() const { return opt_.lr; }
  int64_t steps() const { return t_; }
  void set_steps(int64_t t) { t_ = t; }  // a data-parallel rank whose state came from rank 0

  // The moments by name ("exp_avg.<param>", "exp_avg_sq.<param>") and the step count, for checkpoints.
  std::vector<std::pair<std::string, Tensor>> state() const;
  void load_state(const std::map<std::string, Tensor>& state, int64_t steps);

 private:
  struct Slot {
    std::string name;
    Tensor param, m, v;
    float weight_decay;
  };
  std::vector<Slot> slots_;
  std::vector<float> decays_;  // the groups' weight decays, each once, in the slots' order
  AdamOptions opt_;
  int64_t t_ = 0;
  Tensor step_numbers_;  // [decays_, 3] on the parameters' device, or undefined (keep_step_numbers_on_device)
  AdamUpdate update_of(float decay) const;
};

// Groups for GPT-style training: weight decay on matrices (dim ≥ 2), none on biases, LayerNorm
// weights (dim 1) — nanoGPT's configure_optimizers.
std::vector<ParamGroup> decay_matrices_only(const std::vector<std::pair<std::string, Tensor>>& params,
                                            float weight_decay);

// The gradients of the parameters that have one, in order.
std::vector<Tensor> gradients(const std::vector<Tensor>& params);

// Scales all gradients so that their global L2 norm is at most max_norm:
//   ‖g‖ = √(Σ ‖gᵢ‖²),  g ← g · min(1, max_norm / (‖g‖ + 1e-6))
// Returns ‖g‖ before clipping (as torch.nn.utils.clip_grad_norm_), read from the device once. A
// training step leaves both numbers on the device instead (ops/clip.h's clip_coefficient, then
// Adam::step(factor)): the trainer's way.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// Learning-rate schedules: the rate for step `step` (0-based).
struct LrSchedule {
  Schedule kind = Schedule::constant;  // inverse_sqrt is the paper's ("noam")
  double lr = 1e-3;                    // peak rate (cosine, constant); scale factor for inverse_sqrt
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;             // cosine: reaches min_lr here and stays
  double min_lr = 0;
  int64_t d_model = 512;               // inverse_sqrt: the model's width (models::Model::width())

  // constant:     lr · min(1, (step+1)/warmup)
  // cosine:       warm-up as above, then min_lr + ½(1 + cos(π·(step−warmup)/(decay−warmup)))·(lr − min_lr)
  // inverse_sqrt: lr · d_model^−½ · min((step+1)^−½, (step+1)·warmup^−³ᐟ²)   (paper §5.3, lr = 1)
  double at(int64_t step) const;
};

}  // namespace qkv::train
