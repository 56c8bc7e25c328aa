#include "residual_norm.h"

#include "dispatch.h"
#include "kernels/cpu/activation.h"
#include "qkv/autograd/node.h"

namespace qkv::ops_detail {

void check_residual(const char* op, const Tensor& x, const Tensor& residual, float dropout_p) {
  QKV_CHECK(residual.defined() && residual.shape() == x.shape() && residual.dtype() == DType::f32, op,
            ": the residual ", residual.defined() ? residual.str() : std::string("(undefined)"),
            " must be an f32 tensor of the input's shape ", shape_str(x.shape()));
  QKV_CHECK(dropout_p >= 0.f && dropout_p <= 1.f, op, ": the residual's dropout probability has to be between 0 and 1, but got ",
            dropout_p);
}

kernels::DropoutMask residual_dropout(const Tensor& residual, float p, Generator* generator) {
  if (p == 0.f) return {};
  Generator& g = generator ? *generator : default_generator();
  const uint64_t seed = g.seed(), counter = g.reserve(static_cast<uint64_t>(residual.numel()));
  return kernels::dropout_mask(p, seed, counter);
}

// d residual = ds · m / (1 − p): dropout's backward, the forward's mask regenerated
Tensor residual_gradient(const char* op, const Tensor& ds, const kernels::DropoutMask& drop, Device d) {
  if (!drop.active()) return ds;
  Tensor gc = ds.contiguous(), dr = Tensor::empty(ds.shape(), DType::f32, d);
  QKV_DISPATCH(op, d, k::dropout_apply(gc.data(), dr.data(), gc.numel(), drop.p, drop.seed, drop.counter));
  return dr;
}

NormInputs norm_inputs(const char* op, const Tensor& x, const Tensor& residual, const kernels::DropoutMask& drop,
                       const Tensor& sum, Tensor* sum_out, const std::vector<Tensor>& params) {
  NormInputs r;
  if (residual.defined() && sum_out) {
    const Device d = sum.device();
    *sum_out = autograd::record(sum, "add", {x, residual}, [op, drop, d](const Tensor& g) {
      return std::vector<Tensor>{g, residual_gradient(op, g, drop, d)};
    });
    r.inputs.push_back(*sum_out);
  } else {
    r.inputs.push_back(x);
  }
  r.inputs.insert(r.inputs.end(), params.begin(), params.end());
  if (residual.defined() && !sum_out) r.inputs.push_back(residual), r.residual_last = true;
  return r;
}

}  // namespace qkv::ops_detail
