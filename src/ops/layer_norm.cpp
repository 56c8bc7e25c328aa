#include "qkv/ops/layer_norm.h"

#include "dispatch.h"
#include "kernels/cpu/layer_norm.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/autocast.h"
#include "residual_norm.h"

namespace qkv {

using ops_detail::check_residual;
using ops_detail::device_of;

namespace {

// layer_norm(x) — or, with `residual`, layer_norm(x + Dropout_p(residual)) with the sum made in the
// same pass (the sum is the backward's input; its gradient goes to x, and through the mask to residual).
// sum_out: the sum is returned too, the node's second output (ops/residual_norm.h's record_norm), so
// that both outputs may take gradients.
Tensor normalize(const char* op, const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                 const Tensor& weight, const Tensor& bias, float eps, float dropout_p = 0.f,
                 Generator* generator = nullptr, Tensor* sum_out = nullptr) {
  QKV_CHECK(x.dtype() == DType::f32, op, ": expected an f32 tensor, got ", dtype_name(x.dtype()));
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  QKV_CHECK(nd >= 1 && nd <= x.dim() &&
                Shape(x.shape().end() - nd, x.shape().end()) == normalized_shape,
            op, ": normalized_shape ", shape_str(normalized_shape), " is not the trailing shape of input ",
            shape_str(x.shape()));
  QKV_CHECK(!weight.defined() || weight.shape() == normalized_shape, op, ": weight ", shape_str(weight.shape()),
            " does not match normalized_shape ", shape_str(normalized_shape));
  QKV_CHECK(!bias.defined() || bias.shape() == normalized_shape, op, ": bias ", shape_str(bias.shape()),
            " does not match normalized_shape ", shape_str(normalized_shape));
  const Device d = device_of(op, {&x, &residual, &weight, &bias});
  const int64_t n = numel_of(normalized_shape), rows = n ? x.numel() / n : 0;
  Tensor xc = dense(x);
  // γ is read again by the backward: kept as the parameter itself, as linear keeps its weight
  Tensor w = weight.defined() ? dense(weight) : Tensor();
  Tensor b = bias.defined() ? dense(bias) : Tensor();
  // mean and rstd only for a backward: none where nothing records (decoding)
  const bool records = autograd::needs_grad({x, weight, bias, residual});
  Tensor out = Tensor::empty(x.shape(), DType::f32, d),
         mean = records ? Tensor::empty({rows}, DType::f32, d) : Tensor(),
         rstd = records ? Tensor::empty({rows}, DType::f32, d) : Tensor();
  float* mp = records ? mean.data() : nullptr;
  float* rp = records ? rstd.data() : nullptr;
  const float* wp = w.defined() ? w.data() : nullptr;
  const float* bp = b.defined() ? b.data() : nullptr;
  const kernels::DropoutMask drop = kernels::reserve_dropout(dropout_p, x.numel(), generator);  // (x: the residual's shape)
  // the output's bf16 copy, for the linear it goes to, when the step's AutocastWeights scope wants it
  Tensor out16 = AutocastWeights::copy_wanted(op) ? Tensor::empty(x.shape(), DType::bf16, d) : Tensor();
  bf16* o16 = out16.defined() ? out16.data<bf16>() : nullptr;
  Tensor sum;
  if (residual.defined()) {
    Tensor rc = dense(residual);
    sum = Tensor::empty(x.shape(), DType::f32, d);
    QKV_DISPATCH(op, d,
                 k::add_layer_norm_forward(xc.data(), rc.data(), drop, wp, bp, sum.data(), out.data(), mp, rp, rows, n,
                                           eps, o16));
    xc = sum.detach();  // the normalized input, for the backward (detached: the sum may be the node's output)
  } else {
    QKV_DISPATCH(op, d, k::layer_norm_forward(xc.data(), wp, bp, out.data(), mp, rp, rows, n, eps, o16));
  }
  AutocastWeights::lend_copy(op, out, out16);
  if (!records) {  // nothing records (decoding): no rule to build
    if (sum_out) *sum_out = sum;
    return out;
  }
  bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  const bool added = residual.defined();
  std::vector<Tensor> inputs = {x, weight, bias};
  if (added) inputs.push_back(residual);
  // ds = dsum + LN's dx at s, dres = Dropout(ds): one kernel (kernels/residual_gradient.h)
  auto backward = [op, xc, w, mean, rstd, rows, n, gw, gb, added, drop, d](const Tensor& dsum, const Tensor& g) {
    Tensor gc = g.contiguous(), dx = Tensor::empty(xc.shape(), DType::f32, d);
    Tensor dw = gw ? Tensor::empty(w.shape(), DType::f32, d) : Tensor(),
           db = gb ? Tensor::empty(w.defined() ? w.shape() : Shape{n}, DType::f32, d) : Tensor();
    const ops_detail::ResidualBackward res =
        ops_detail::residual_backward("add_layer_norm backward", dsum, added, drop, xc.shape(), d);
    QKV_DISPATCH(op, d,
                 k::layer_norm_backward(xc.data(), w.defined() ? w.data() : nullptr, mean.data(), rstd.data(),
                                        gc.data(), dx.data(), gw ? dw.data() : nullptr, gb ? db.data() : nullptr, rows, n,
                                        res.args(drop)));
    if (!added) return std::vector<Tensor>{dx, dw, db};
    return std::vector<Tensor>{dx, dw, db, res.residual_grad(dx)};
  };
  return ops_detail::record_norm(op, out, sum, sum_out, inputs, added, drop, d, backward);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  float eps) {
  return normalize("layer_norm", x, Tensor(), normalized_shape, weight, bias, eps);
}

Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape, const Tensor& weight,
                      const Tensor& bias, float eps, float dropout_p, Generator* generator) {
  check_residual("add_layer_norm", x, residual, dropout_p);
  return normalize("add_layer_norm", x, residual, normalized_shape, weight, bias, eps, dropout_p, generator);
}

SumAndNorm add_layer_norm_with_sum(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                   const Tensor& weight, const Tensor& bias, float eps, float dropout_p,
                                   Generator* generator) {
  check_residual("add_layer_norm", x, residual, dropout_p);
  SumAndNorm r;
  r.normalized =
      normalize("add_layer_norm", x, residual, normalized_shape, weight, bias, eps, dropout_p, generator, &r.sum);
  return r;
}

}  // namespace qkv
