// Differentiable views and copies. Views share storage (no copy); their backward maps the
// gradient back onto the input's shape (reshape back, inverse permutation, zero-padded slice).
// The Tensor methods reshape/view/transpose/permute/slice/select/unsqueeze/squeeze/expand/
// contiguous/clone are defined here too.
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

// Concatenates along `dim` (all other dims equal). Backward: the matching slices.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
// Stacks along a new dim.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);
// Splits into chunks of `size` along dim (the last may be smaller), as views.
std::vector<Tensor> split(const Tensor& t, int64_t size, int64_t dim);
// Splits into n equal chunks along dim.
std::vector<Tensor> chunk(const Tensor& t, int64_t n, int64_t dim);

}  // namespace qkv
