// The residual half of the fused add + norm ops (ops/layer_norm.h's add_layer_norm, ops/rms_norm.h's
// add_rms_norm and their _with_sum forms), one mechanism for both norms: the residual's checks, its
// dropout, and which tensors the norm's node takes as inputs once the kernel has written
// s = x + Dropout(residual).
#pragma once

#include <vector>

#include "kernels/dropout_mask.h"
#include "qkv/core/rng.h"
#include "qkv/ops/tensor.h"

namespace qkv::ops_detail {

// residual: defined, x's shape, f32; dropout_p in [0, 1] — else an error naming `op`.
void check_residual(const char* op, const Tensor& x, const Tensor& residual, float dropout_p);

// The residual's dropout mask, its counters reserved from `generator` (default_generator() when null)
// as dropout() reserves them: p = 0, none and nothing reserved.
kernels::DropoutMask residual_dropout(const Tensor& residual, float p, Generator* generator);

// The residual's gradient from the sum's: ds · m / (1 − p) with the forward's mask (ds itself without
// dropout), on device d; `op` names the dispatch.
Tensor residual_gradient(const char* op, const Tensor& ds, const kernels::DropoutMask& drop, Device d);

// The norm node's inputs, its parameters (γ, β, …) after the first:
//   no residual:        {x, params…}
//   residual, sum kept: {s, params…}, s recorded as its own node (add's backward: ds to x, ds dropped
//                       by `drop` to residual) and returned in *sum_out, so that s may take gradients
//                       of its own
//   residual, no sum:   {x, params…, residual} — residual_last: the backward appends
//                       residual_gradient(dx) for it
struct NormInputs {
  std::vector<Tensor> inputs;
  bool residual_last = false;
};
NormInputs norm_inputs(const char* op, const Tensor& x, const Tensor& residual, const kernels::DropoutMask& drop,
                       const Tensor& sum, Tensor* sum_out, const std::vector<Tensor>& params);

}  // namespace qkv::ops_detail
