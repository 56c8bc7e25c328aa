#include "qkv/ops/rms_norm.h"

#include "dispatch.h"
#include "kernels/cpu/rms_norm.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

// y = x / √(mean(x²) + ε) · γ; backward in kernels/cpu/rms_norm.h, beside the forward.
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  QKV_CHECK(x.dtype() == DType::f32 && x.dim() >= 1, "rms_norm: expected an f32 tensor of at least one dimension, got ",
            dtype_name(x.dtype()), " ", shape_str(x.shape()));
  QKV_CHECK(!weight.defined() || (weight.dim() == 1 && weight.size(0) == x.size(-1)), "rms_norm: weight ",
            shape_str(weight.shape()), " does not match the last dimension of ", shape_str(x.shape()));
  const Device d = device_of("rms_norm", {&x, &weight});
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  Tensor xc = dense(x);
  Tensor w = weight.defined() ? weight.contiguous_copy() : Tensor();
  Tensor out = Tensor::empty(x.shape(), DType::f32, d), rstd = Tensor::empty({rows}, DType::f32, d);
  QKV_DISPATCH("rms_norm", d,
               k::rms_norm_forward(xc.data(), w.defined() ? w.data() : nullptr, out.data(), rstd.data(), rows, n, eps));
  const bool gw = weight.defined() && weight.requires_grad();
  return record(out, "rms_norm", {x, weight}, [xc, w, rstd, rows, n, gw, d](const Tensor& g) {
    Tensor gc = g.contiguous(), dx = Tensor::empty(xc.shape(), DType::f32, d);
    Tensor dw = gw ? Tensor::empty(w.shape(), DType::f32, d) : Tensor();
    QKV_DISPATCH("rms_norm", d,
                 k::rms_norm_backward(xc.data(), w.defined() ? w.data() : nullptr, rstd.data(), gc.data(), dx.data(),
                                      gw ? dw.data() : nullptr, rows, n));
    return std::vector<Tensor>{dx, dw};
  });
}

}  // namespace qkv
