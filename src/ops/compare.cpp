#include "qkv/ops/compare.h"

#include "dispatch.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/functors.h"

namespace qkv {

using ops_detail::device_of;
using kernels::Compare;

namespace {

// out = x ∘ s, the scalar converted to x's element type (as torch.eq(int_tensor, 3.0) compares ints).
Tensor compare_scalar(const Tensor& x, float s, Compare c, const char* op) {
  const Device d = device_of(op, {&x});
  Tensor out = Tensor::empty(x.shape(), DType::boolean, d);
  uint8_t* o = out.data<uint8_t>();
  switch (x.dtype()) {
    case DType::f32:
      QKV_DISPATCH(op, d, k::map1(x.shape(), o, x.data<float>(), x.strides(), kernels::CompareScalar<float>{c, s}));
      break;
    case DType::i32: {
      const auto si = static_cast<int32_t>(s);
      QKV_CHECK(static_cast<float>(si) == s, op, ": comparing an i32 tensor with ", s, ", which is not an integer");
      QKV_DISPATCH(op, d, k::map1(x.shape(), o, x.data<int32_t>(), x.strides(), kernels::CompareScalar<int32_t>{c, si}));
      break;
    }
    case DType::boolean: {
      const uint8_t sb = s != 0.f;
      QKV_DISPATCH(op, d, k::map1(x.shape(), o, x.data<uint8_t>(), x.strides(), kernels::CompareScalar<uint8_t>{c, sb}));
      break;
    }
    default: QKV_CHECK(false, op, ": expected an f32, i32 or boolean tensor, got ", x.str());
  }
  return out;
}

void check_bool(const Tensor& m, const char* op) {
  QKV_CHECK(m.dtype() == DType::boolean, op, ": expected a boolean tensor, got ", m.str());
}

Tensor logic(const Tensor& a, const Tensor& b, bool is_and, const char* op) {
  check_bool(a, op);
  check_bool(b, op);
  const Device d = device_of(op, {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape, DType::boolean, d);
  if (is_and)
    QKV_DISPATCH(op, d, k::map2(shape, out.data<uint8_t>(), a.data<uint8_t>(), broadcast_strides(a, shape),
                                b.data<uint8_t>(), broadcast_strides(b, shape), kernels::LogicalAnd{}));
  else
    QKV_DISPATCH(op, d, k::map2(shape, out.data<uint8_t>(), a.data<uint8_t>(), broadcast_strides(a, shape),
                                b.data<uint8_t>(), broadcast_strides(b, shape), kernels::LogicalOr{}));
  return out;
}

}  // namespace

Tensor eq(const Tensor& x, float s) { return compare_scalar(x, s, Compare::eq, "eq"); }
Tensor ne(const Tensor& x, float s) { return compare_scalar(x, s, Compare::ne, "ne"); }
Tensor lt(const Tensor& x, float s) { return compare_scalar(x, s, Compare::lt, "lt"); }
Tensor le(const Tensor& x, float s) { return compare_scalar(x, s, Compare::le, "le"); }
Tensor gt(const Tensor& x, float s) { return compare_scalar(x, s, Compare::gt, "gt"); }
Tensor ge(const Tensor& x, float s) { return compare_scalar(x, s, Compare::ge, "ge"); }

Tensor logical_not(const Tensor& m) {
  check_bool(m, "logical_not");
  const Device d = device_of("logical_not", {&m});
  Tensor out = Tensor::empty(m.shape(), DType::boolean, d);
  QKV_DISPATCH("logical_not", d,
               k::map1(m.shape(), out.data<uint8_t>(), m.data<uint8_t>(), m.strides(), kernels::LogicalNot{}));
  return out;
}

Tensor logical_and(const Tensor& a, const Tensor& b) { return logic(a, b, true, "logical_and"); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return logic(a, b, false, "logical_or"); }

}  // namespace qkv
