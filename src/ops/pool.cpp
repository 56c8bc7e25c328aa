#include "qkv/ops/pool.h"

#include "dispatch.h"
#include "kernels/cpu/pool.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

namespace {

// A batched view of input: [N, C, H, W] as is, [C, H, W] as [1, C, H, W]; checks the dtype.
Tensor batched(const char* op, const Tensor& input) {
  QKV_CHECK((input.dim() == 3 || input.dim() == 4) && input.dtype() == DType::f32, op,
            ": input must be f32 [N, C, H, W] or [C, H, W], got ", input.str());
  return input.dim() == 3 ? input.unsqueeze(0) : input;
}

kernels::Pool2dProblem problem(const char* op, const Tensor& x, Size2 k, std::optional<Size2> stride, Size2 pad,
                                    Size2 dil, bool ceil_mode) {
  const Size2 s = stride.value_or(k);
  QKV_CHECK(k.h >= 1 && k.w >= 1, op, ": kernel_size must be positive, got ", k.h, "×", k.w);
  QKV_CHECK(s.h >= 1 && s.w >= 1, op, ": stride must be positive, got ", s.h, "×", s.w);
  QKV_CHECK(dil.h >= 1 && dil.w >= 1, op, ": dilation must be positive, got ", dil.h, "×", dil.w);
  QKV_CHECK(pad.h >= 0 && pad.w >= 0 && 2 * pad.h <= dil.h * (k.h - 1) + 1 && 2 * pad.w <= dil.w * (k.w - 1) + 1, op,
            ": padding ", pad.h, "×", pad.w, " must be at most half the kernel (", k.h, "×", k.w, ")");
  kernels::Pool2dProblem p;
  p.planes = x.size(0) * x.size(1), p.H = x.size(2), p.W = x.size(3);
  p.KH = k.h, p.KW = k.w, p.stride_h = s.h, p.stride_w = s.w, p.pad_h = pad.h, p.pad_w = pad.w;
  p.dilation_h = dil.h, p.dilation_w = dil.w, p.ceil_mode = ceil_mode;
  QKV_CHECK(p.out_h() >= 1 && p.out_w() >= 1, op, ": input ", shape_str(x.shape()), " is too small for a ", k.h, "×",
            k.w, " window (dilation ", dil.h, "×", dil.w, ", padding ", pad.h, "×", pad.w, ")");
  return p;
}

Tensor unbatched_like(const Tensor& input, Tensor out) { return input.dim() == 3 ? out.squeeze(0) : out; }

}  // namespace

Tensor max_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride, Size2 padding, Size2 dilation,
                  bool ceil_mode) {
  const Tensor xb = batched("max_pool2d", input);
  const auto p = problem("max_pool2d", xb, kernel_size, stride, padding, dilation, ceil_mode);
  QKV_CHECK(p.H * p.W <= INT32_MAX, "max_pool2d: a plane of ", p.H, "×", p.W, " is too large");
  const Device d = device_of("max_pool2d", {&input});
  const Tensor x = dense(xb);
  const Shape out_shape = {xb.size(0), xb.size(1), p.out_h(), p.out_w()};
  Tensor y = Tensor::empty(out_shape, DType::f32, d), argmax = Tensor::empty(out_shape, DType::i32, d);
  QKV_DISPATCH("max_pool2d", d, k::max_pool2d_forward(p, x.data(), y.data(), argmax.data<int32_t>()));
  const Shape in_shape = xb.shape();
  Tensor out = record(y, "max_pool2d", {xb}, [p, argmax, in_shape, d](const Tensor& g) {
    const Tensor dy = g.contiguous();
    Tensor dx = Tensor::empty(in_shape, DType::f32, d);
    QKV_DISPATCH("max_pool2d", d, k::max_pool2d_backward(p, dy.data(), argmax.data<int32_t>(), dx.data()));
    return std::vector<Tensor>{dx};
  });
  return unbatched_like(input, out);
}

Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride, Size2 padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  const Tensor xb = batched("avg_pool2d", input);
  auto p = problem("avg_pool2d", xb, kernel_size, stride, padding, 1, ceil_mode);
  QKV_CHECK(!divisor_override || *divisor_override != 0, "avg_pool2d: divisor_override must be non-zero");
  p.count_include_pad = count_include_pad, p.divisor = divisor_override.value_or(0);
  const Device d = device_of("avg_pool2d", {&input});
  const Tensor x = dense(xb);
  Tensor y = Tensor::empty({xb.size(0), xb.size(1), p.out_h(), p.out_w()}, DType::f32, d);
  QKV_DISPATCH("avg_pool2d", d, k::avg_pool2d_forward(p, x.data(), y.data()));
  const Shape in_shape = xb.shape();
  Tensor out = record(y, "avg_pool2d", {xb}, [p, in_shape, d](const Tensor& g) {
    const Tensor dy = g.contiguous();
    Tensor dx = Tensor::empty(in_shape, DType::f32, d);
    QKV_DISPATCH("avg_pool2d", d, k::avg_pool2d_backward(p, dy.data(), dx.data()));
    return std::vector<Tensor>{dx};
  });
  return unbatched_like(input, out);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size) {
  const Tensor xb = batched("adaptive_avg_pool2d", input);
  const int64_t planes = xb.size(0) * xb.size(1), H = xb.size(2), W = xb.size(3), OH = output_size.h,
                OW = output_size.w;
  QKV_CHECK(OH >= 1 && OW >= 1, "adaptive_avg_pool2d: output_size must be positive, got ", OH, "×", OW);
  QKV_CHECK(H >= 1 && W >= 1, "adaptive_avg_pool2d: input ", shape_str(input.shape()), " has an empty plane");
  const Device d = device_of("adaptive_avg_pool2d", {&input});
  const Tensor x = dense(xb);
  Tensor y = Tensor::empty({xb.size(0), xb.size(1), OH, OW}, DType::f32, d);
  QKV_DISPATCH("adaptive_avg_pool2d", d, k::adaptive_avg_pool2d_forward(x.data(), y.data(), planes, H, W, OH, OW));
  const Shape in_shape = xb.shape();
  Tensor out = record(y, "adaptive_avg_pool2d", {xb}, [=](const Tensor& g) {
    const Tensor dy = g.contiguous();
    Tensor dx = Tensor::empty(in_shape, DType::f32, d);
    QKV_DISPATCH("adaptive_avg_pool2d", d,
                 k::adaptive_avg_pool2d_backward(dy.data(), dx.data(), planes, H, W, OH, OW));
    return std::vector<Tensor>{dx};
  });
  return unbatched_like(input, out);
}

}  // namespace qkv
