#include "qkv/ops/adam.h"

#include <cmath>

#include "dispatch.h"
#include "kernels/cpu/adam.h"

namespace qkv {

using ops_detail::device_of;

// step_size = lr / (1 − β₁ᵗ),  inv_sqrt_bc2 = 1 / √(1 − β₂ᵗ)  (in double, then f32)
void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamUpdate& u) {
  const Device d = device_of("adam_update_", {&param, &grad, &exp_avg, &exp_avg_sq});
  for (const Tensor* t : {&param, &exp_avg, &exp_avg_sq})
    QKV_CHECK(t->dtype() == DType::f32 && t->is_contiguous() && t->shape() == param.shape(),
              "adam_update_: param, exp_avg and exp_avg_sq must be dense f32 tensors of one shape, got ", t->str());
  QKV_CHECK(grad.shape() == param.shape() && grad.dtype() == DType::f32, "adam_update_: gradient ", grad.str(),
            " for a parameter ", param.str());
  const Tensor g = dense(grad);
  const double bc1 = 1.0 - std::pow(static_cast<double>(u.beta1), static_cast<double>(u.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(u.beta2), static_cast<double>(u.step));
  kernels::AdamCoefficients c{};
  c.beta1 = u.beta1, c.beta2 = u.beta2, c.eps = u.eps;
  c.step_size = static_cast<float>(u.lr / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.decay = u.decoupled_weight_decay ? 1.f - u.lr * u.weight_decay : 1.f;
  c.l2 = u.decoupled_weight_decay ? 0.f : u.weight_decay;
  QKV_DISPATCH("adam_update_", d,
               k::adam_update(param.data(), g.data(), exp_avg.data(), exp_avg_sq.data(), param.numel(), c));
}

}  // namespace qkv
