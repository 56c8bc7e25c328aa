#include "qkv/ops/arith.h"

#include <algorithm>
#include <cmath>

#include "dispatch.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/functors.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;
namespace fn = kernels;  // the elementwise functions (kernels/functors.h)

namespace {

void check_f32(const Tensor& t, const char* op) {
  QKV_CHECK(t.dtype() == DType::f32, op, ": expected an f32 tensor, got ", dtype_name(t.dtype()), " ",
            shape_str(t.shape()));
}

// out = f(a, b), broadcast, a new dense tensor on the operands' device.
template <typename F>
Tensor binary_op(const Tensor& a, const Tensor& b, const char* op, F f) {
  check_f32(a, op);
  check_f32(b, op);
  const Device d = device_of(op, {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape, DType::f32, d);
  QKV_DISPATCH(op, d, k::binary(shape, out.data(), a.data(), broadcast_strides(a, shape), b.data(),
                                broadcast_strides(b, shape), f));
  return out;
}

template <typename F>
Tensor unary_op(const Tensor& a, const char* op, F f) {
  check_f32(a, op);
  const Device d = device_of(op, {&a});
  Tensor out = Tensor::empty(a.shape(), DType::f32, d);
  QKV_DISPATCH(op, d, k::unary(a.shape(), out.data(), a.data(), a.strides(), f));
  return out;
}

}  // namespace

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  const Device d = device_of("sum_to", {&a});
  Tensor src = dense(a);
  Tensor out = Tensor::empty(shape, DType::f32, d);
  QKV_DISPATCH("sum_to", d, k::sum_to(src.shape(), src.data(), shape, out.data()));
  return out;
}

// a ∘= b in place (b broadcast to a), no tape.
template <typename F>
Tensor& binary_op_(Tensor& a, const Tensor& b, const char* op, F f) {
  check_f32(a, op);
  check_f32(b, op);
  const Device d = device_of(op, {&a, &b});
  QKV_CHECK(a.is_contiguous(), op, ": the tensor written must be dense, got strides ", shape_str(a.strides()));
  ++a.impl().storage->writes;
  QKV_DISPATCH(op, d, k::binary(a.shape(), a.data(), a.data(), a.strides(), b.data(), broadcast_strides(b, a.shape()), f));
  return a;
}

// a += b: gradient accumulation.
Tensor& add_(Tensor& a, const Tensor& b) { return binary_op_(a, b, "add_", fn::Add{}); }
// a *= b: linear_cross_entropy's gradients times the loss's gradient, a scalar on the device.
Tensor& mul_(Tensor& a, const Tensor& b) { return binary_op_(a, b, "mul_", fn::Mul{}); }

// a *= s in place, no tape.
Tensor& mul_(Tensor& a, float s) {
  check_f32(a, "mul_");
  const Device d = device_of("mul_", {&a});
  QKV_CHECK(a.is_contiguous(), "mul_: the tensor must be dense, got strides ", shape_str(a.strides()));
  ++a.impl().storage->writes;
  QKV_DISPATCH("mul_", d, k::scale_inplace(a.data(), a.numel(), s));
  return a;
}

// Σ a², accumulated in double, to the host.
double sum_of_squares(const Tensor& a) {
  check_f32(a, "sum_of_squares");
  const Device d = device_of("sum_of_squares", {&a});
  Tensor c = dense(a);
  double s = 0;
  QKV_DISPATCH("sum_of_squares", d, s = k::sum_squares_f64(c.data(), c.numel()));
  return s;
}

// z = a + b:  da = dz, db = dz
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(a, b, "add", fn::Add{});
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "add", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
  });
}

// z = a − b:  da = dz, db = −dz
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(a, b, "sub", fn::Sub{});
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "sub", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)};
  });
}

// z = a · b:  da = dz · b, db = dz · a
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(a, b, "mul", fn::Mul{});
  Tensor sa = a.detach(), sb = b.detach();
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "mul", {a, b}, [sa, sb, ga, gb](const Tensor& g) {
    return std::vector<Tensor>{ga ? sum_to(mul(g, sb), sa.shape()) : Tensor(),
                               gb ? sum_to(mul(g, sa), sb.shape()) : Tensor()};
  });
}

// z = a / b:  da = dz / b, db = −dz · a / b²
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(a, b, "div", fn::Div{});
  Tensor sa = a.detach(), sb = b.detach();
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "div", {a, b}, [sa, sb, ga, gb](const Tensor& g) {
    Tensor gb_full;
    if (gb) gb_full = binary_op(mul(g, sa), mul(sb, sb), "div", fn::NegDiv{});
    return std::vector<Tensor>{ga ? sum_to(div(g, sb), sa.shape()) : Tensor(),
                               gb ? sum_to(gb_full, sb.shape()) : Tensor()};
  });
}

// z = a + s:  da = dz
Tensor add(const Tensor& a, float s) {
  Tensor out = unary_op(a, "add", fn::AddScalar{s});
  return record(out, "add_scalar", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

// z = a · s:  da = s · dz
Tensor mul(const Tensor& a, float s) {
  Tensor out = unary_op(a, "mul", fn::MulScalar{s});
  return record(out, "mul_scalar", {a}, [s](const Tensor& g) { return std::vector<Tensor>{mul(g, s)}; });
}

Tensor neg(const Tensor& a) { return mul(a, -1.f); }

// z = eᵃ:  da = dz · z
Tensor exp(const Tensor& a) {
  Tensor out = unary_op(a, "exp", fn::Exp{});
  Tensor so = out.detach();
  return record(out, "exp", {a}, [so](const Tensor& g) { return std::vector<Tensor>{mul(g, so)}; });
}

// z = log a:  da = dz / a
Tensor log(const Tensor& a) {
  Tensor out = unary_op(a, "log", fn::Log{});
  Tensor sa = a.detach();
  return record(out, "log", {a}, [sa](const Tensor& g) { return std::vector<Tensor>{div(g, sa)}; });
}

// z = tanh a:  da = dz · (1 − z²)
Tensor tanh(const Tensor& a) {
  Tensor out = unary_op(a, "tanh", fn::Tanh{});
  Tensor so = out.detach();
  return record(out, "tanh", {a}, [so](const Tensor& g) {
    return std::vector<Tensor>{binary_op(g, so, "tanh", fn::TanhGrad{})};
  });
}

// z = 1 / (1 + e⁻ᵃ):  da = dz · z (1 − z)
Tensor sigmoid(const Tensor& a) {
  Tensor out = unary_op(a, "sigmoid", fn::Sigmoid{});
  Tensor so = out.detach();
  return record(out, "sigmoid", {a}, [so](const Tensor& g) {
    return std::vector<Tensor>{binary_op(g, so, "sigmoid", fn::SigmoidGrad{})};
  });
}

// z = √a:  da = dz / (2z)
Tensor sqrt(const Tensor& a) {
  Tensor out = unary_op(a, "sqrt", fn::Sqrt{});
  Tensor so = out.detach();
  return record(out, "sqrt", {a}, [so](const Tensor& g) {
    return std::vector<Tensor>{binary_op(g, so, "sqrt", fn::SqrtGrad{})};
  });
}

// z = Σ_dims a:  da = broadcast(dz)
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims_in, bool keepdim) {
  check_f32(a, "sum");
  std::vector<bool> reduce(a.dim(), dims_in.empty());
  for (int64_t d : dims_in) reduce[a.wrap_dim(d)] = true;
  Shape kept = a.shape(), out_shape;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (reduce[d]) kept[d] = 1;
    if (!reduce[d] || keepdim) out_shape.push_back(kept[d]);
  }
  const Device dev = device_of("sum", {&a});
  Tensor r = Tensor::empty(kept, DType::f32, dev);
  {
    Tensor src = dense(a);
    if (a.numel() > 0 && numel_of(kept) == 1) {
      // Whole-tensor sum in double, so long reductions stay exact to f32 (on the device: no wait).
      QKV_DISPATCH("sum", dev, k::sum_all(src.data(), src.numel(), r.data()));
    } else {
      QKV_DISPATCH("sum", dev, k::sum_to(src.shape(), src.data(), kept, r.data()));
    }
  }
  Tensor out = r.detach().as_strided(out_shape, contiguous_strides(out_shape), 0);
  Shape in_shape = a.shape();
  return record(out, "sum", {a}, [in_shape, kept](const Tensor& g) {
    return std::vector<Tensor>{g.reshape(kept).expand(in_shape).contiguous()};
  });
}

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  int64_t count = 1;
  if (dims.empty()) {
    count = a.numel();
  } else {
    for (int64_t d : dims) count *= a.size(d);
  }
  return mul(sum(a, dims, keepdim), 1.f / static_cast<float>(std::max<int64_t>(count, 1)));
}

// z = mask ? value : a:  da = mask ? 0 : dz
Tensor masked_fill(const Tensor& a, const Tensor& mask, float value) {
  check_f32(a, "masked_fill");
  QKV_CHECK(mask.dtype() == DType::boolean, "masked_fill: the mask must be boolean, got ", dtype_name(mask.dtype()));
  Tensor m = mask.to(DType::f32);
  Tensor out = binary_op(a, m, "masked_fill", fn::MaskedFill{value});
  Shape sa = a.shape();
  return record(out, "masked_fill", {a}, [m, sa](const Tensor& g) {
    return std::vector<Tensor>{sum_to(binary_op(g, m, "masked_fill", fn::MaskedFill{0.f}), sa)};
  });
}

}  // namespace qkv
