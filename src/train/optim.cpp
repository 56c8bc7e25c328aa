#include "qkv/train/optim.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu/simd.h"

namespace qkv::train {

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions opt) : opt_(opt) {
  QKV_CHECK(opt.lr >= 0 && opt.eps >= 0 && opt.beta1 >= 0 && opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1,
            "Adam: invalid options lr=", opt.lr, " betas=(", opt.beta1, ", ", opt.beta2, ") eps=", opt.eps);
  for (auto& g : groups)
    for (auto& [name, p] : g.params) {
      QKV_CHECK(p.dtype() == DType::f32 && p.is_contiguous(), "Adam: parameter ", name, " must be a dense f32 tensor");
      slots_.push_back({name, p, Tensor::zeros(p.shape()), Tensor::zeros(p.shape()), g.weight_decay});
    }
}

void Adam::step() {
  ++t_;
  const float b1 = opt_.beta1, b2 = opt_.beta2, lr = opt_.lr, eps = opt_.eps;
  const double bc1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(t_));
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  for (Slot& s : slots_) {
    Tensor g = s.param.grad();
    if (!g.defined()) continue;
    g = g.contiguous();
    float* p = s.param.data();
    const float* gp = g.data();
    float* m = s.m.data();
    float* v = s.v.data();
    const float decay = opt_.decoupled_weight_decay ? 1.f - lr * s.weight_decay : 1.f;
    const float l2 = opt_.decoupled_weight_decay ? 0.f : s.weight_decay;
    parallel_for(s.param.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      int64_t i = lo;
#if QKV_SIMD
      namespace simd = kernels::cpu::simd;
      const simd::vf vb1 = simd::set1(b1), vb2 = simd::set1(b2), vc1 = simd::set1(1.f - b1),
                     vc2 = simd::set1(1.f - b2), vdecay = simd::set1(decay), vl2 = simd::set1(l2),
                     vstep = simd::set1(step_size), vinv = simd::set1(inv_sqrt_bc2), veps = simd::set1(eps);
      for (; i + simd::kLanes <= hi; i += simd::kLanes) {
        const simd::vf pi = simd::load(p + i);
        const simd::vf gi = simd::fmadd(vl2, pi, simd::load(gp + i));
        const simd::vf mi = simd::fmadd(vb1, simd::load(m + i), simd::mul(vc1, gi));
        const simd::vf vi = simd::fmadd(vb2, simd::load(v + i), simd::mul(vc2, simd::mul(gi, gi)));
        const simd::vf denom = simd::fmadd(simd::sqrt(vi), vinv, veps);
        simd::store(m + i, mi);
        simd::store(v + i, vi);
        simd::store(p + i, simd::fnmadd(vstep, simd::div(mi, denom), simd::mul(pi, vdecay)));
      }
#endif
      for (; i < hi; ++i) {
        const float gi = gp[i] + l2 * p[i];
        m[i] = b1 * m[i] + (1.f - b1) * gi;
        v[i] = b2 * v[i] + (1.f - b2) * gi * gi;
        p[i] = p[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
      }
    });
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

// ‖g‖ = √(Σ ‖gᵢ‖²),  g ← g · min(1, max_norm / (‖g‖ + 1e-6))
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  double total = 0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    QKV_CHECK(g.is_contiguous(), "clip_grad_norm_: gradients must be dense");
    const float* d = g.data();
    const int64_t n = g.numel();
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(d[i]) * d[i];
    total += s;
  }
  const double norm = std::sqrt(total);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      float* d = g.data();
      const int64_t n = g.numel();
      const auto c = static_cast<float>(coef);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) d[i] *= c;
    }
  }
  return norm;
}

double LrSchedule::at(int64_t step) const {
  const double s = static_cast<double>(step + 1);
  if (kind == "inverse_sqrt") {
    QKV_CHECK(warmup_steps > 0, "lr schedule inverse_sqrt needs warmup_steps > 0");
    return lr / std::sqrt(static_cast<double>(d_model)) *
           std::min(1.0 / std::sqrt(s), s * std::pow(static_cast<double>(warmup_steps), -1.5));
  }
  if (warmup_steps > 0 && step < warmup_steps) return lr * s / static_cast<double>(warmup_steps);
  if (kind == "constant") return lr;
  QKV_CHECK(kind == "cosine", "unknown lr schedule \"", kind, "\" (constant, cosine, inverse_sqrt)");
  if (step >= decay_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(std::max<int64_t>(1, decay_steps - warmup_steps));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - min_lr);
}

}  // namespace qkv::train
