#include "residual_norm.h"

#include "qkv/autograd/node.h"

namespace qkv::ops_detail {

void check_residual(const char* op, const Tensor& x, const Tensor& residual) {
  QKV_CHECK(residual.defined() && residual.shape() == x.shape() && residual.dtype() == DType::f32, op,
            ": the residual ", residual.defined() ? residual.str() : std::string("(undefined)"),
            " must be an f32 tensor of the input's shape ", shape_str(x.shape()));
}

NormInputs norm_inputs(const Tensor& x, const Tensor& residual, const Tensor& sum, Tensor* sum_out,
                       const std::vector<Tensor>& params) {
  NormInputs r;
  if (residual.defined() && sum_out) {
    *sum_out = autograd::record(sum, "add", {x, residual}, [](const Tensor& g) { return std::vector<Tensor>{g, g}; });
    r.inputs.push_back(*sum_out);
  } else {
    r.inputs.push_back(x);
  }
  r.inputs.insert(r.inputs.end(), params.begin(), params.end());
  if (residual.defined() && !sum_out) r.inputs.push_back(residual), r.residual_last = true;
  return r;
}

}  // namespace qkv::ops_detail
