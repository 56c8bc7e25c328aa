#include "qkv/ops/adam.h"

#include <cmath>

#include "dispatch.h"
#include "kernels/cpu/adam.h"

namespace qkv {

using ops_detail::device_of;

namespace {

void check_operands(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  for (const Tensor* t : {&param, &exp_avg, &exp_avg_sq})
    QKV_CHECK(t->defined() && t->dtype() == DType::f32 && t->is_contiguous() && t->shape() == param.shape(),
              "adam_update_: param, exp_avg and exp_avg_sq must be dense f32 tensors of one shape, got ",
              t->defined() ? t->str() : std::string("an undefined tensor"));
  QKV_CHECK(grad.defined() && grad.shape() == param.shape() && grad.dtype() == DType::f32, "adam_update_: gradient ",
            grad.defined() ? grad.str() : std::string("(undefined)"), " for a parameter ", param.str());
}

kernels::AdamCoefficients coefficients(const AdamUpdate& u) {
  const std::array<float, 3> n = adam_step_numbers(u);
  kernels::AdamCoefficients c{};
  c.beta1 = u.beta1, c.beta2 = u.beta2, c.eps = u.eps;
  c.step_size = n[0], c.inv_sqrt_bc2 = n[1], c.decay = n[2];
  c.l2 = u.decoupled_weight_decay ? 0.f : u.weight_decay;
  return c;
}

}  // namespace

// step_size = lr / (1 − β₁ᵗ),  inv_sqrt_bc2 = 1 / √(1 − β₂ᵗ)  (in double, then f32),  decay = 1 − lr·λ
std::array<float, 3> adam_step_numbers(const AdamUpdate& u) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(u.beta1), static_cast<double>(u.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(u.beta2), static_cast<double>(u.step));
  return {static_cast<float>(u.lr / bc1), static_cast<float>(1.0 / std::sqrt(bc2)),
          u.decoupled_weight_decay ? 1.f - u.lr * u.weight_decay : 1.f};
}

void adam_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs, const AdamUpdate& u,
                  const Tensor& clip_factor, const std::vector<Tensor>& bf16_copies) {
  const size_t count = params.size();
  QKV_CHECK(grads.size() == count && exp_avgs.size() == count && exp_avg_sqs.size() == count &&
                (bf16_copies.empty() || bf16_copies.size() == count),
            "adam_update_: lists of ", count, " parameters, ", grads.size(), " gradients, ", exp_avgs.size(),
            " exp_avg, ", exp_avg_sqs.size(), " exp_avg_sq and ", bf16_copies.size(), " bf16 copies");
  std::vector<const TensorBase*> operands{&clip_factor, &u.step_numbers};
  std::vector<bf16*> copies;
  for (size_t i = 0; i < count; ++i) {
    check_operands(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i]);
    operands.insert(operands.end(), {&params[i], &grads[i], &exp_avgs[i], &exp_avg_sqs[i]});
    if (bf16_copies.empty()) continue;
    const Tensor& copy = bf16_copies[i];
    QKV_CHECK(!copy.defined() || (copy.dtype() == DType::bf16 && copy.is_contiguous() && copy.shape() == params[i].shape()),
              "adam_update_: a parameter's bf16 copy must be a dense bf16 tensor of its shape, got ", copy.str(),
              " for ", params[i].str());
    if (copy.defined()) operands.push_back(&copy), ++copy.impl().storage->writes;
    copies.push_back(copy.defined() ? copy.data<bf16>() : nullptr);
  }
  QKV_CHECK(!clip_factor.defined() || (clip_factor.dtype() == DType::f32 && clip_factor.numel() == 1),
            "adam_update_: clip_factor must be one f32 number, got ", clip_factor.defined() ? clip_factor.str() : "");
  QKV_CHECK(!u.step_numbers.defined() || (u.step_numbers.dtype() == DType::f32 && u.step_numbers.is_contiguous() &&
                                           u.step_numbers.numel() == 3),
            "adam_update_: step_numbers must be three dense f32 numbers, got ", u.step_numbers.str());
  const Device d = device_of("adam_update_", operands);
  std::vector<Tensor> dense_grads;
  std::vector<float*> p, m, v;
  std::vector<const float*> g;
  std::vector<int64_t> n;
  for (size_t i = 0; i < count; ++i) {
    dense_grads.push_back(dense(grads[i]));
    p.push_back(params[i].data()), g.push_back(dense_grads.back().data());
    ++params[i].impl().storage->writes, ++exp_avgs[i].impl().storage->writes, ++exp_avg_sqs[i].impl().storage->writes;
    m.push_back(exp_avgs[i].data()), v.push_back(exp_avg_sqs[i].data());
    n.push_back(params[i].numel());
  }
  const kernels::AdamCoefficients c = coefficients(u);
  const float* scale = clip_factor.defined() ? clip_factor.data() : nullptr;
  const float* numbers = u.step_numbers.defined() ? u.step_numbers.data() : nullptr;
  QKV_DISPATCH("adam_update_", d,
               k::adam_update_list(p.data(), g.data(), m.data(), v.data(), n.data(), static_cast<int64_t>(count), c,
                                   numbers, scale, copies.empty() ? nullptr : copies.data()));
}


// One parameter: a list of one.
void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamUpdate& u) {
  adam_update_(std::vector<Tensor>{param}, {grad}, {exp_avg}, {exp_avg_sq}, u);
}

}  // namespace qkv
