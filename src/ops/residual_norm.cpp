#include "residual_norm.h"

#include "dispatch.h"
#include "kernels/cpu/activation.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/autocast.h"

namespace qkv::ops_detail {

void check_residual(const char* op, const Tensor& x, const Tensor& residual, float dropout_p) {
  QKV_CHECK(residual.defined() && residual.shape() == x.shape() && residual.dtype() == DType::f32, op,
            ": the residual ", residual.defined() ? residual.str() : std::string("(undefined)"),
            " must be an f32 tensor of the input's shape ", shape_str(x.shape()));
  QKV_CHECK(dropout_p >= 0.f && dropout_p <= 1.f, op, ": the residual's dropout probability has to be between 0 and 1, but got ",
            dropout_p);
}

// d residual = ds · m / (1 − p): dropout's backward, the forward's mask regenerated
Tensor residual_gradient(const char* op, const Tensor& ds, const kernels::DropoutMask& drop, Device d) {
  if (!drop.active()) return ds;
  Tensor gc = ds.contiguous(), dr = Tensor::empty(ds.shape(), DType::f32, d);
  QKV_DISPATCH(op, d, k::dropout_apply(gc.data(), dr.data(), gc.numel(), drop));
  return dr;
}

ResidualBackward residual_backward(const char* producer, const Tensor& dsum, bool has_residual,
                                   const kernels::DropoutMask& drop, const Shape& shape, Device d) {
  ResidualBackward r;
  r.producer = producer;
  if (dsum.defined()) r.dsum = dsum.contiguous();
  if (has_residual && drop.active()) r.dres = Tensor::empty(shape, DType::f32, d);
  if (has_residual && AutocastWeights::copy_wanted(producer)) r.grad16 = Tensor::empty(shape, DType::bf16, d);
  return r;
}

kernels::ResidualGradient ResidualBackward::args(const kernels::DropoutMask& drop) const {
  return {dsum.defined() ? dsum.data() : nullptr, dres.defined() ? dres.data() : nullptr, drop,
          grad16.defined() ? grad16.data<bf16>() : nullptr};
}

Tensor ResidualBackward::residual_grad(const Tensor& dx) const {
  Tensor g = dres.defined() ? dres : dx;
  AutocastWeights::lend_copy(producer, g, grad16);  // (nothing when there is no copy)
  return g;
}

Tensor record_norm(const char* op, const Tensor& out, const Tensor& sum, Tensor* sum_out,
                   const std::vector<Tensor>& inputs, bool has_residual, const kernels::DropoutMask& drop, Device d,
                   NormBackward backward) {
  const size_t n_inputs = inputs.size();
  auto rule = [op, n_inputs, has_residual, drop, d, backward = std::move(backward)](const Tensor& dsum,
                                                                                   const Tensor& dy) {
    if (dy.defined()) return backward(dsum, dy);
    std::vector<Tensor> g(n_inputs);  // only the sum took a gradient (or none did): ds = dsum
    if (!dsum.defined()) return g;
    g[0] = dsum;
    if (has_residual) g.back() = residual_gradient(op, dsum, drop, d);
    return g;
  };
  if (!sum_out) return autograd::record(out, op, inputs, [rule](const Tensor& g) { return rule(Tensor(), g); });
  std::vector<Tensor> o = autograd::record_outputs(std::vector<Tensor>{out, sum}, op, inputs,
                                                   [rule](const std::vector<Tensor>& g) { return rule(g[1], g[0]); });
  *sum_out = o[1];
  return o[0];
}

}  // namespace qkv::ops_detail
