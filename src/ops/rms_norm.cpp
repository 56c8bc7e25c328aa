#include "qkv/ops/rms_norm.h"

#include "qkv/core/error.h"
#include "qkv/ops/arith.h"

namespace qkv {

// y = x / √(mean(x²) + ε) · γ — composed of differentiable ops, so the backward is theirs:
//   dx = (γ·dy − x̂ · mean(γ·dy·x̂)) / √(mean(x²) + ε),  dγ = Σ_rows dy · x̂   (x̂ = x / √(mean(x²) + ε))
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  QKV_CHECK(x.dtype() == DType::f32 && x.dim() >= 1, "rms_norm: expected an f32 tensor of at least one dimension, got ",
            dtype_name(x.dtype()), " ", shape_str(x.shape()));
  QKV_CHECK(!weight.defined() || (weight.dim() == 1 && weight.size(0) == x.size(-1)), "rms_norm: weight ",
            shape_str(weight.shape()), " does not match the last dimension of ", shape_str(x.shape()));
  Tensor xhat = div(x, sqrt(add(mean(mul(x, x), {-1}, /*keepdim=*/true), eps)));
  return weight.defined() ? mul(xhat, weight) : xhat;
}

}  // namespace qkv
