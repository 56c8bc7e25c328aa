#include "qkv/train/optim.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "qkv/core/error.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/autocast.h"
#include "qkv/ops/clip.h"

namespace qkv::train {

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions opt) : opt_(opt) {
  QKV_CHECK(opt.lr >= 0 && opt.eps >= 0 && opt.beta1 >= 0 && opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1,
            "Adam: invalid options lr=", opt.lr, " betas=(", opt.beta1, ", ", opt.beta2, ") eps=", opt.eps);
  for (auto& g : groups)
    for (auto& [name, p] : g.params) {
      QKV_CHECK(p.dtype() == DType::f32 && p.is_contiguous(), "Adam: parameter ", name, " must be a dense f32 tensor");
      slots_.push_back({name, p, Tensor::zeros(p.shape(), DType::f32, p.device()),
                        Tensor::zeros(p.shape(), DType::f32, p.device()), g.weight_decay});
      if (std::find(decays_.begin(), decays_.end(), g.weight_decay) == decays_.end()) decays_.push_back(g.weight_decay);
    }
}

AdamUpdate Adam::update_of(float decay) const {
  AdamUpdate u;
  u.lr = opt_.lr, u.beta1 = opt_.beta1, u.beta2 = opt_.beta2, u.eps = opt_.eps;
  u.weight_decay = decay, u.decoupled_weight_decay = opt_.decoupled_weight_decay, u.step = t_;
  return u;
}

void Adam::step(const Tensor& clip_factor, AutocastWeights* casts) {
  advance();
  update(clip_factor, casts);
}

void Adam::keep_step_numbers_on_device() {
  QKV_CHECK(!slots_.empty(), "Adam: no parameters to keep the step's numbers beside");
  step_numbers_ = Tensor::zeros({static_cast<int64_t>(decays_.size()), 3}, DType::f32, slots_.front().param.device());
}

void Adam::advance() {
  ++t_;
  if (!step_numbers_.defined()) return;
  std::vector<float> rows;
  for (float decay : decays_) {
    const std::array<float, 3> n = adam_step_numbers(update_of(decay));
    rows.insert(rows.end(), n.begin(), n.end());
  }
  step_numbers_.copy_(Tensor::from_vector(rows, step_numbers_.shape()));
}

void Adam::update(const Tensor& clip_factor, AutocastWeights* casts) {
  // one list update a weight decay (two for GPT-style groups): on a GPU, two launches for every parameter
  for (size_t group = 0; group < decays_.size(); ++group) {
    const float decay = decays_[group];
    std::vector<Tensor> params, grads, ms, vs;
    for (Slot& s : slots_) {
      if (s.weight_decay != decay) continue;
      Tensor g = s.param.grad();
      if (!g.defined()) continue;
      params.push_back(s.param), grads.push_back(g), ms.push_back(s.m), vs.push_back(s.v);
    }
    if (params.empty()) continue;
    AdamUpdate u = update_of(decay);
    if (step_numbers_.defined()) u.step_numbers = step_numbers_.select(0, static_cast<int64_t>(group));
    adam_update_(params, grads, ms, vs, u, clip_factor, casts ? casts->copies_for(params) : std::vector<Tensor>{});
    if (casts) casts->written(params);
  }
}

void Adam::zero_grad() {
  for (Slot& s : slots_) s.param.zero_grad();
}

std::vector<std::pair<std::string, Tensor>> Adam::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Slot& s : slots_) {
    out.emplace_back("exp_avg." + s.name, s.m);
    out.emplace_back("exp_avg_sq." + s.name, s.v);
  }
  return out;
}

void Adam::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  for (Slot& s : slots_)
    for (auto [key, dst] : {std::pair{"exp_avg." + s.name, &s.m}, std::pair{"exp_avg_sq." + s.name, &s.v}}) {
      auto it = state.find(key);
      QKV_CHECK(it != state.end(), "Adam::load_state: the optimizer state has no \"", key, "\"");
      QKV_CHECK(it->second.shape() == dst->shape(), "Adam::load_state: \"", key, "\" has shape ",
                shape_str(it->second.shape()), ", expected ", shape_str(dst->shape()));
      dst->copy_(it->second);
    }
  t_ = steps;
}

std::vector<ParamGroup> decay_matrices_only(const std::vector<std::pair<std::string, Tensor>>& params, float wd) {
  ParamGroup decay{{}, wd}, no_decay{{}, 0.f};
  for (auto& np : params) (np.second.dim() >= 2 ? decay : no_decay).params.push_back(np);
  return {decay, no_decay};
}

std::vector<Tensor> gradients(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  return grads;
}

// g ← g · s, s = min(1, max_norm / (‖g‖ + 1e-6)): one wait for the device, to read ‖g‖ and s
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  std::vector<Tensor> grads = gradients(params);
  for (const Tensor& g : grads) QKV_CHECK(g.is_contiguous(), "clip_grad_norm_: gradients must be dense");
  const Tensor numbers = clip_coefficient(grads, max_norm).to(Device::cpu());
  const float norm = numbers.data()[0], s = numbers.data()[1];
  if (s < 1.f)
    for (Tensor& g : grads) mul_(g, s);
  return norm;
}

double LrSchedule::at(int64_t step) const {
  const double s = static_cast<double>(step + 1);
  if (kind == Schedule::inverse_sqrt) {
    QKV_CHECK(warmup_steps > 0, "lr schedule inverse_sqrt needs warmup_steps > 0");
    return lr / std::sqrt(static_cast<double>(d_model)) *
           std::min(1.0 / std::sqrt(s), s * std::pow(static_cast<double>(warmup_steps), -1.5));
  }
  if (warmup_steps > 0 && step < warmup_steps) return lr * s / static_cast<double>(warmup_steps);
  if (kind == Schedule::constant) return lr;
  if (step >= decay_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(std::max<int64_t>(1, decay_steps - warmup_steps));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - min_lr);
}

}  // namespace qkv::train
