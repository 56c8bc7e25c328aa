// Comparisons and logic, elementwise with broadcasting, as torch.eq / torch.logical_not …: the
// results are boolean tensors (one byte per element, 0 or 1), with no gradient. They build masks
// from token ids (eq(ids, pad_id): where the padding is) and combine them.
//
//   eq, ne, lt, le, gt, ge (x, s):  x ∘ s for an f32, i32 or boolean x and a scalar s
//   logical_not(m), logical_and(a, b), logical_or(a, b):  on boolean tensors
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

Tensor eq(const Tensor& x, float s);
Tensor ne(const Tensor& x, float s);
Tensor lt(const Tensor& x, float s);
Tensor le(const Tensor& x, float s);
Tensor gt(const Tensor& x, float s);
Tensor ge(const Tensor& x, float s);

Tensor logical_not(const Tensor& m);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);

}  // namespace qkv
