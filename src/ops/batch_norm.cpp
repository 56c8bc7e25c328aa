#include "qkv/ops/batch_norm.h"

#include "dispatch.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/group_norm.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

namespace {

// [N, C, *] → (N, C, S); weight and bias [C] or undefined.
void check_nc(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias) {
  QKV_CHECK(input.dim() >= 2 && input.dtype() == DType::f32, op, ": input must be f32 [N, C, *], got ", input.str());
  const int64_t C = input.size(1);
  for (const Tensor* t : {&weight, &bias})
    QKV_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == C && t->dtype() == DType::f32), op,
              ": weight and bias must be f32 [", C, "], got ", t->str());
}

Tensor dense_or_none(const Tensor& t) { return t.defined() ? dense(t) : Tensor(); }
const float* ptr(const Tensor& t) { return t.defined() ? t.data() : nullptr; }

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, float momentum, float eps) {
  check_nc("batch_norm", input, weight, bias);
  const int64_t N = input.size(0), C = input.size(1), S = N ? input.numel() / (N * C) : 0;
  for (const Tensor* t : {&running_mean, &running_var})
    QKV_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == C && t->dtype() == DType::f32 && t->is_contiguous() &&
                                !t->requires_grad()),
              "batch_norm: running statistics must be contiguous f32 [", C, "] without grad, got ", t->str());
  QKV_CHECK(training || (running_mean.defined() && running_var.defined()),
            "batch_norm: evaluation needs running_mean and running_var");
  QKV_CHECK(!training || running_mean.defined() == running_var.defined(),
            "batch_norm: give both running statistics or neither");
  QKV_CHECK(!training || N * S > 1, "batch_norm: training needs more than one value per channel, got input ",
            shape_str(input.shape()));
  QKV_CHECK(eps > 0.f || !training, "batch_norm: eps must be positive");
  const Device d = device_of("batch_norm", {&input, &weight, &bias, &running_mean, &running_var});
  const Tensor x = dense(input), w = dense_or_none(weight), b = dense_or_none(bias);
  Tensor y = Tensor::empty(input.shape(), DType::f32, d), mean = Tensor::empty({C}, DType::f32, d),
         rstd = Tensor::empty({C}, DType::f32, d);
  QKV_DISPATCH("batch_norm", d,
               k::batch_norm_forward(x.data(), ptr(w), ptr(b), running_mean.defined() ? running_mean.data() : nullptr,
                                     running_var.defined() ? running_var.data() : nullptr, training, momentum, eps, N,
                                     C, S, y.data(), mean.data(), rstd.data()));
  const bool gx = input.requires_grad(), gw = weight.defined() && weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  return record(y, "batch_norm", {input, weight, bias}, [=](const Tensor& g) {
    const Tensor dy = g.contiguous();
    Tensor dx = gx ? Tensor::empty(x.shape(), DType::f32, d) : Tensor();
    Tensor dw = gw ? Tensor::empty({C}, DType::f32, d) : Tensor(), db = gb ? Tensor::empty({C}, DType::f32, d) : Tensor();
    QKV_DISPATCH("batch_norm", d,
                 k::batch_norm_backward(x.data(), dy.data(), mean.data(), rstd.data(), ptr(w), training, N, C, S,
                                        gx ? dx.data() : nullptr, gw ? dw.data() : nullptr, gb ? db.data() : nullptr));
    return std::vector<Tensor>{dx, dw, db};
  });
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, float eps) {
  check_nc("group_norm", input, weight, bias);
  const int64_t N = input.size(0), C = input.size(1), S = N ? input.numel() / (N * C) : 0, G = num_groups;
  QKV_CHECK(G >= 1 && C % G == 0, "group_norm: ", C, " channels cannot be split into ", G, " groups");
  const Device d = device_of("group_norm", {&input, &weight, &bias});
  const Tensor x = dense(input), w = dense_or_none(weight), b = dense_or_none(bias);
  Tensor y = Tensor::empty(input.shape(), DType::f32, d), mean = Tensor::empty({N, G}, DType::f32, d),
         rstd = Tensor::empty({N, G}, DType::f32, d);
  QKV_DISPATCH("group_norm", d,
               k::group_norm_forward(x.data(), ptr(w), ptr(b), eps, N, C, S, G, y.data(), mean.data(), rstd.data()));
  const bool gx = input.requires_grad(), gw = weight.defined() && weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  return record(y, "group_norm", {input, weight, bias}, [=](const Tensor& g) {
    const Tensor dy = g.contiguous();
    Tensor dx = gx ? Tensor::empty(x.shape(), DType::f32, d) : Tensor();
    Tensor dw = gw ? Tensor::empty({C}, DType::f32, d) : Tensor(), db = gb ? Tensor::empty({C}, DType::f32, d) : Tensor();
    QKV_DISPATCH("group_norm", d,
                 k::group_norm_backward(x.data(), dy.data(), mean.data(), rstd.data(), ptr(w), N, C, S, G,
                                        gx ? dx.data() : nullptr, gw ? dw.data() : nullptr, gb ? db.data() : nullptr));
    return std::vector<Tensor>{dx, dw, db};
  });
}

}  // namespace qkv
