#include "qkv/ops/arith.h"

#include <algorithm>
#include <cmath>

#include "qkv/autograd/node.h"
#include "qkv/kernels/cpu/elementwise.h"

namespace qkv {

using autograd::record;
namespace k = kernels::cpu;

namespace {

void check_f32(const Tensor& t, const char* op) {
  QKV_CHECK(t.dtype() == DType::f32, op, ": expected an f32 tensor, got ", dtype_name(t.dtype()), " ",
            shape_str(t.shape()));
}

template <typename F>
Tensor binary_op(const Tensor& a, const Tensor& b, const char* op, F f) {
  check_f32(a, op);
  check_f32(b, op);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape);
  k::binary(shape, out.data(), a.data(), broadcast_strides(a, shape), b.data(), broadcast_strides(b, shape), f);
  return out;
}

template <typename F>
Tensor unary_op(const Tensor& a, const char* op, F f) {
  check_f32(a, op);
  Tensor out = Tensor::empty(a.shape());
  k::unary(a.shape(), out.data(), a.data(), a.strides(), f);
  return out;
}

}  // namespace

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  Tensor src = a.contiguous_copy();
  Tensor out = Tensor::empty(shape);
  k::sum_to(src.shape(), src.data(), shape, out.data());
  return out;
}

// z = a + b:  da = dz, db = dz
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(a, b, "add", [](float x, float y) { return x + y; });
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "add", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
  });
}

// z = a − b:  da = dz, db = −dz
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(a, b, "sub", [](float x, float y) { return x - y; });
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "sub", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)};
  });
}

// z = a · b:  da = dz · b, db = dz · a
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(a, b, "mul", [](float x, float y) { return x * y; });
  Tensor sa = a.detach(), sb = b.detach();
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "mul", {a, b}, [sa, sb, ga, gb](const Tensor& g) {
    return std::vector<Tensor>{ga ? sum_to(mul(g, sb), sa.shape()) : Tensor(),
                               gb ? sum_to(mul(g, sa), sb.shape()) : Tensor()};
  });
}

// z = a / b:  da = dz / b, db = −dz · a / b²
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(a, b, "div", [](float x, float y) { return x / y; });
  Tensor sa = a.detach(), sb = b.detach();
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "div", {a, b}, [sa, sb, ga, gb](const Tensor& g) {
    Tensor gb_full;
    if (gb) gb_full = binary_op(mul(g, sa), mul(sb, sb), "div", [](float x, float y) { return -x / y; });
    return std::vector<Tensor>{ga ? sum_to(div(g, sb), sa.shape()) : Tensor(),
                               gb ? sum_to(gb_full, sb.shape()) : Tensor()};
  });
}

// z = a + s:  da = dz
Tensor add(const Tensor& a, float s) {
  Tensor out = unary_op(a, "add", [s](float x) { return x + s; });
  return record(out, "add_scalar", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

// z = a · s:  da = s · dz
Tensor mul(const Tensor& a, float s) {
  Tensor out = unary_op(a, "mul", [s](float x) { return x * s; });
  return record(out, "mul_scalar", {a}, [s](const Tensor& g) { return std::vector<Tensor>{mul(g, s)}; });
}

Tensor neg(const Tensor& a) { return mul(a, -1.f); }

// z = eᵃ:  da = dz · z
Tensor exp(const Tensor& a) {
  Tensor out = unary_op(a, "exp", [](float x) { return std::exp(x); });
  Tensor so = out.detach();
  return record(out, "exp", {a}, [so](const Tensor& g) { return std::vector<Tensor>{mul(g, so)}; });
}

// z = log a:  da = dz / a
Tensor log(const Tensor& a) {
  Tensor out = unary_op(a, "log", [](float x) { return std::log(x); });
  Tensor sa = a.detach();
  return record(out, "log", {a}, [sa](const Tensor& g) { return std::vector<Tensor>{div(g, sa)}; });
}

// z = tanh a:  da = dz · (1 − z²)
Tensor tanh(const Tensor& a) {
  Tensor out = unary_op(a, "tanh", [](float x) { return std::tanh(x); });
  Tensor so = out.detach();
  return record(out, "tanh", {a}, [so](const Tensor& g) {
    return std::vector<Tensor>{binary_op(g, so, "tanh", [](float d, float z) { return d * (1.f - z * z); })};
  });
}

// z = 1 / (1 + e⁻ᵃ):  da = dz · z (1 − z)
Tensor sigmoid(const Tensor& a) {
  Tensor out = unary_op(a, "sigmoid", [](float x) { return 1.f / (1.f + std::exp(-x)); });
  Tensor so = out.detach();
  return record(out, "sigmoid", {a}, [so](const Tensor& g) {
    return std::vector<Tensor>{binary_op(g, so, "sigmoid", [](float d, float z) { return d * z * (1.f - z); })};
  });
}

// z = √a:  da = dz / (2z)
Tensor sqrt(const Tensor& a) {
  Tensor out = unary_op(a, "sqrt", [](float x) { return std::sqrt(x); });
  Tensor so = out.detach();
  return record(out, "sqrt", {a}, [so](const Tensor& g) {
    return std::vector<Tensor>{binary_op(g, so, "sqrt", [](float d, float z) { return d / (2.f * z); })};
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
  Tensor r = Tensor::empty(kept);
  {
    Tensor src = a.is_contiguous() ? a : a.contiguous_copy();
    if (a.numel() > 0 && numel_of(kept) == 1) {
      // Whole-tensor sum in double, so long reductions stay exact to f32.
      double s = 0;
      const float* p = src.data();
      for (int64_t i = 0, n = src.numel(); i < n; ++i) s += p[i];
      r.data()[0] = static_cast<float>(s);
    } else {
      k::sum_to(src.shape(), src.data(), kept, r.data());
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
  Tensor out = binary_op(a, m, "masked_fill", [value](float x, float mm) { return mm != 0.f ? value : x; });
  Shape sa = a.shape();
  return record(out, "masked_fill", {a}, [m, sa](const Tensor& g) {
    return std::vector<Tensor>{sum_to(binary_op(g, m, "masked_fill", [](float d, float mm) { return mm != 0.f ? 0.f : d; }), sa)};
  });
}

}  // namespace qkv
