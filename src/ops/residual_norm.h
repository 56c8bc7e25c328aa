// The residual half of the fused add + norm ops (ops/layer_norm.h's add_layer_norm, ops/rms_norm.h's
// add_rms_norm and their _with_sum forms), one mechanism for both norms: the residual's checks, and
// which tensors the norm's node takes as inputs once the kernel has written s = x + residual.
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv::ops_detail {

// residual: defined, x's shape, f32 — else an error naming `op`.
void check_residual(const char* op, const Tensor& x, const Tensor& residual);

// The norm node's inputs, its parameters (γ, β, …) after the first:
//   no residual:        {x, params…}
//   residual, sum kept: {s, params…}, s recorded as its own node (add's backward: ds to x and to
//                       residual) and returned in *sum_out, so that s may take gradients of its own
//   residual, no sum:   {x, params…, residual} — residual_last: the backward appends dx for it
struct NormInputs {
  std::vector<Tensor> inputs;
  bool residual_last = false;
};
NormInputs norm_inputs(const Tensor& x, const Tensor& residual, const Tensor& sum, Tensor* sum_out,
                       const std::vector<Tensor>& params);

}  // namespace qkv::ops_detail
