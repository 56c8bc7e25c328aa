#include "qkv/ops/conv.h"

#include "dispatch.h"
#include "kernels/cpu/conv.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/view.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Size2 stride, Size2 padding,
              Size2 dilation, int64_t groups) {
  if (input.dim() == 3) return conv2d(input.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0);
  QKV_CHECK(input.dim() == 4 && input.dtype() == DType::f32, "conv2d: input must be f32 [N, C, H, W], got ",
            input.str());
  QKV_CHECK(weight.dim() == 4 && weight.dtype() == DType::f32, "conv2d: weight must be f32 [O, C / groups, kH, kW], got ",
            weight.str());
  QKV_CHECK(groups >= 1, "conv2d: groups must be positive, got ", groups);
  const int64_t N = input.size(0), C = input.size(1), O = weight.size(0);
  QKV_CHECK(C >= 1 && C == weight.size(1) * groups, "conv2d: input ", shape_str(input.shape()), " has ", C,
            " channels, but weight ", shape_str(weight.shape()), " with groups=", groups, " expects ",
            weight.size(1) * groups);
  QKV_CHECK(O >= 1 && O % groups == 0, "conv2d: ", O, " output channels are not divisible by groups=", groups);
  QKV_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == O && bias.dtype() == DType::f32),
            "conv2d: bias must be f32 [", O, "], got ", bias.str());
  QKV_CHECK(stride.h >= 1 && stride.w >= 1, "conv2d: stride must be positive, got ", stride.h, "×", stride.w);
  QKV_CHECK(padding.h >= 0 && padding.w >= 0, "conv2d: padding must be non-negative, got ", padding.h, "×", padding.w);
  QKV_CHECK(dilation.h >= 1 && dilation.w >= 1, "conv2d: dilation must be positive, got ", dilation.h, "×",
            dilation.w);
  kernels::Conv2dProblem p;
  p.N = N, p.C = C, p.H = input.size(2), p.W = input.size(3), p.O = O, p.KH = weight.size(2), p.KW = weight.size(3);
  p.stride_h = stride.h, p.stride_w = stride.w, p.pad_h = padding.h, p.pad_w = padding.w;
  p.dilation_h = dilation.h, p.dilation_w = dilation.w, p.groups = groups, p.bias = bias.defined();
  QKV_CHECK(p.KH >= 1 && p.KW >= 1 && p.out_h() >= 1 && p.out_w() >= 1, "conv2d: input ", shape_str(input.shape()),
            " padded by ", padding.h, "×", padding.w, " is smaller than the dilated kernel (", weight.size(2), "×",
            weight.size(3), ", dilation ", dilation.h, "×", dilation.w, ")");
  const Device d = device_of("conv2d", {&input, &weight, &bias});
  const Tensor x = dense(input), w = dense(weight);
  const Tensor b = bias.defined() ? dense(bias) : Tensor();
  Tensor y = Tensor::empty({N, O, p.out_h(), p.out_w()}, DType::f32, d);
  QKV_DISPATCH("conv2d", d, k::conv2d_forward(p, x.data(), w.data(), b.defined() ? b.data() : nullptr, y.data()));
  const bool gx = input.requires_grad(), gw = weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  return record(y, "conv2d", {input, weight, bias}, [x, w, p, gx, gw, gb, d](const Tensor& g) {
    const Tensor dy = g.contiguous();
    Tensor dx = gx ? Tensor::empty(x.shape(), DType::f32, d) : Tensor();
    Tensor dw = gw ? Tensor::empty(w.shape(), DType::f32, d) : Tensor();
    Tensor db = gb ? Tensor::empty({p.O}, DType::f32, d) : Tensor();
    if (gx) QKV_DISPATCH("conv2d", d, k::conv2d_backward_data(p, dy.data(), w.data(), dx.data()));
    if (gw || gb) {
      Tensor dw_all = gw ? dw : Tensor::empty(w.shape(), DType::f32, d);  // oneDNN computes both at once
      QKV_DISPATCH("conv2d", d, k::conv2d_backward_weights(p, x.data(), dy.data(), dw_all.data(), gb ? db.data() : nullptr));
    }
    return std::vector<Tensor>{dx, dw, db};
  });
}

}  // namespace qkv
