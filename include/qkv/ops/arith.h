// Differentiable arithmetic with NumPy/PyTorch broadcasting, and reductions.
//   z = x ∘ y:  dx = sum_to(dz ∘ ∂z/∂x, shape(x)),  dy likewise — a broadcast input's gradient
//   is summed over the dims it was broadcast along.
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, float s);
Tensor mul(const Tensor& a, float s);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor sqrt(const Tensor& a);

// Sum / mean over `dims` (all when empty), keeping them as size 1 when keepdim.
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// In place, no tape (gradient accumulation, clipping): a += b, a *= b (b broadcast to a), a *= s.
Tensor& add_(Tensor& a, const Tensor& b);
Tensor& mul_(Tensor& a, const Tensor& b);
Tensor& mul_(Tensor& a, float s);
// Σ a², accumulated in double and returned to the host (a gradient's squared norm).
double sum_of_squares(const Tensor& a);

// The gradient helper: sums `a` down to `shape` (which must broadcast to a's shape).
Tensor sum_to(const Tensor& a, const Shape& shape);

// Where mask (boolean, broadcast to a) is true, `value`; elsewhere a. Gradient flows where false.
Tensor masked_fill(const Tensor& a, const Tensor& mask, float value);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, float s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, float s) { return add(a, -s); }
inline Tensor operator*(const Tensor& a, float s) { return mul(a, s); }
inline Tensor operator*(float s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, float s) { return mul(a, 1.f / s); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace qkv
