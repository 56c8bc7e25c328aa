// The elementwise functions of ops/arith.cpp as function objects, shared by every device's
// elementwise kernels (kernels/cpu/elementwise.h instantiates its loops with them; a CUDA backend
// would instantiate its own with the same structs). An op names what it computes; the kernel of
// its device decides how to loop.
#pragma once

#include <cmath>
#include <cstdint>

#include "qkv/core/host_device.h"

namespace qkv::kernels {

// ---- binary: z = f(x, y) ---------------------------------------------------------------------
struct Add {
  QKV_HOST_DEVICE float operator()(float x, float y) const { return x + y; }
};
struct Sub {
  QKV_HOST_DEVICE float operator()(float x, float y) const { return x - y; }
};
struct Mul {
  QKV_HOST_DEVICE float operator()(float x, float y) const { return x * y; }
};
struct Div {
  QKV_HOST_DEVICE float operator()(float x, float y) const { return x / y; }
};
struct NegDiv {  // div's gradient for the divisor: −x / y with x = dz·a, y = b²
  QKV_HOST_DEVICE float operator()(float x, float y) const { return -x / y; }
};
struct TanhGrad {  // dz · (1 − z²)
  QKV_HOST_DEVICE float operator()(float d, float z) const { return d * (1.f - z * z); }
};
struct SigmoidGrad {  // dz · z (1 − z)
  QKV_HOST_DEVICE float operator()(float d, float z) const { return d * z * (1.f - z); }
};
struct SqrtGrad {  // dz / (2z)
  QKV_HOST_DEVICE float operator()(float d, float z) const { return d / (2.f * z); }
};
struct MaskedFill {  // mask ≠ 0 ? value : x
  float value;
  QKV_HOST_DEVICE float operator()(float x, float mask) const { return mask != 0.f ? value : x; }
};

// ---- unary: z = f(x) -------------------------------------------------------------------------
struct AddScalar {
  float s;
  QKV_HOST_DEVICE float operator()(float x) const { return x + s; }
};
struct MulScalar {
  float s;
  QKV_HOST_DEVICE float operator()(float x) const { return x * s; }
};
struct Exp {
  QKV_HOST_DEVICE float operator()(float x) const { return std::exp(x); }
};
struct Log {
  QKV_HOST_DEVICE float operator()(float x) const { return std::log(x); }
};
struct Tanh {
  QKV_HOST_DEVICE float operator()(float x) const { return std::tanh(x); }
};
struct Sigmoid {
  QKV_HOST_DEVICE float operator()(float x) const { return 1.f / (1.f + std::exp(-x)); }
};
struct Sqrt {
  QKV_HOST_DEVICE float operator()(float x) const { return std::sqrt(x); }
};

// ---- comparisons and logic (boolean results, one byte each) -----------------------------------
enum class Compare { eq, ne, lt, le, gt, ge };

template <typename T>
QKV_HOST_DEVICE inline bool compare(Compare c, T x, T y) {
  switch (c) {
    case Compare::eq: return x == y;
    case Compare::ne: return x != y;
    case Compare::lt: return x < y;
    case Compare::le: return x <= y;
    case Compare::gt: return x > y;
    case Compare::ge: return x >= y;
  }
  return false;
}

// x ∘ s against a scalar of x's type (eq, lt, … of ops/compare.h), and the boolean logic.
template <typename T>
struct CompareScalar {
  Compare c;
  T s;
  QKV_HOST_DEVICE uint8_t operator()(T x) const { return compare(c, x, s); }
};
struct LogicalNot {
  QKV_HOST_DEVICE uint8_t operator()(uint8_t x) const { return !x; }
};
struct LogicalAnd {
  QKV_HOST_DEVICE uint8_t operator()(uint8_t x, uint8_t y) const { return x && y; }
};
struct LogicalOr {
  QKV_HOST_DEVICE uint8_t operator()(uint8_t x, uint8_t y) const { return x || y; }
};

}  // namespace qkv::kernels
