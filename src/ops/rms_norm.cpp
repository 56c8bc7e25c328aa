#include "qkv/ops/rms_norm.h"

#include "dispatch.h"
#include "kernels/cpu/rms_norm.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/autocast.h"
#include "residual_norm.h"

namespace qkv {

using ops_detail::check_residual;
using ops_detail::device_of;

namespace {

// y = x / √(mean(x²) + ε) · γ — or, with `residual`, the same of x + Dropout_p(residual) with the sum
// made in the same pass (the sum is the backward's input; its gradient goes to x, and through the mask
// to residual). sum_out: the sum is returned too, the node's second output (ops/residual_norm.h's
// record_norm), so that both outputs may take gradients. Backward in kernels/rms_norm.inc.
Tensor normalize(const char* op, const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                 float dropout_p = 0.f, Generator* generator = nullptr, Tensor* sum_out = nullptr) {
  QKV_CHECK(x.dtype() == DType::f32 && x.dim() >= 1, op, ": expected an f32 tensor of at least one dimension, got ",
            dtype_name(x.dtype()), " ", shape_str(x.shape()));
  QKV_CHECK(!weight.defined() || (weight.dim() == 1 && weight.size(0) == x.size(-1)), op, ": weight ",
            shape_str(weight.shape()), " does not match the last dimension of ", shape_str(x.shape()));
  const Device d = device_of(op, {&x, &residual, &weight});
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  Tensor xc = dense(x);
  Tensor w = weight.defined() ? dense(weight) : Tensor();  // read again by the backward, as linear's weight
  const float* wp = w.defined() ? w.data() : nullptr;
  // rstd only for a backward: none where nothing records (decoding)
  const bool records = autograd::needs_grad({x, weight, residual});
  Tensor out = Tensor::empty(x.shape(), DType::f32, d),
         rstd = records ? Tensor::empty({rows}, DType::f32, d) : Tensor();
  float* rp = records ? rstd.data() : nullptr;
  const kernels::DropoutMask drop = kernels::reserve_dropout(dropout_p, x.numel(), generator);  // (x: the residual's shape)
  // the output's bf16 copy, for the linear it goes to, when the step's AutocastWeights scope wants it
  Tensor out16 = AutocastWeights::copy_wanted(op) ? Tensor::empty(x.shape(), DType::bf16, d) : Tensor();
  bf16* o16 = out16.defined() ? out16.data<bf16>() : nullptr;
  Tensor sum;
  if (residual.defined()) {
    Tensor rc = dense(residual);
    sum = Tensor::empty(x.shape(), DType::f32, d);
    QKV_DISPATCH(
        op, d, k::add_rms_norm_forward(xc.data(), rc.data(), drop, wp, sum.data(), out.data(), rp, rows, n, eps, o16));
    xc = sum.detach();  // the normalized input, for the backward (detached: the sum may be the node's output)
  } else {
    QKV_DISPATCH(op, d, k::rms_norm_forward(xc.data(), wp, out.data(), rp, rows, n, eps, o16));
  }
  AutocastWeights::lend_copy(op, out, out16);
  if (!records) {  // nothing records (decoding): no rule to build
    if (sum_out) *sum_out = sum;
    return out;
  }
  const bool gw = weight.defined() && weight.requires_grad();
  const bool added = residual.defined();
  std::vector<Tensor> inputs = {x, weight};
  if (added) inputs.push_back(residual);
  // ds = dsum + RMSNorm's dx at s, dres = Dropout(ds): one kernel (kernels/residual_gradient.h)
  auto backward = [op, xc, w, rstd, rows, n, gw, added, drop, d](const Tensor& dsum, const Tensor& g) {
    Tensor gc = g.contiguous(), dx = Tensor::empty(xc.shape(), DType::f32, d);
    Tensor dw = gw ? Tensor::empty(w.shape(), DType::f32, d) : Tensor();
    const ops_detail::ResidualBackward res =
        ops_detail::residual_backward("add_rms_norm backward", dsum, added, drop, xc.shape(), d);
    QKV_DISPATCH(op, d,
                 k::rms_norm_backward(xc.data(), w.defined() ? w.data() : nullptr, rstd.data(), gc.data(), dx.data(),
                                      gw ? dw.data() : nullptr, rows, n, res.args(drop)));
    if (!added) return std::vector<Tensor>{dx, dw};
    return std::vector<Tensor>{dx, dw, res.residual_grad(dx)};
  };
  return ops_detail::record_norm(op, out, sum, sum_out, inputs, added, drop, d, backward);
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  return normalize("rms_norm", x, Tensor(), weight, eps);
}

Tensor add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps, float dropout_p,
                    Generator* generator) {
  check_residual("add_rms_norm", x, residual, dropout_p);
  return normalize("add_rms_norm", x, residual, weight, eps, dropout_p, generator);
}

SumAndNorm add_rms_norm_with_sum(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                                 float dropout_p, Generator* generator) {
  check_residual("add_rms_norm", x, residual, dropout_p);
  SumAndNorm r;
  r.normalized = normalize("add_rms_norm", x, residual, weight, eps, dropout_p, generator, &r.sum);
  return r;
}

}  // namespace qkv
