// The residual half of the fused add + norm ops (ops/layer_norm.h's add_layer_norm, ops/rms_norm.h's
// add_rms_norm and their _with_sum forms), one mechanism for both norms: the residual's checks, its
// dropout, and the node that takes the sum s = x + Dropout(residual) and the normalized output back
// to x, the parameters and the residual.
#pragma once

#include <functional>
#include <vector>

#include "kernels/dropout_mask.h"
#include "kernels/residual_gradient.h"
#include "qkv/core/rng.h"
#include "qkv/ops/tensor.h"

namespace qkv::ops_detail {

// residual: defined, x's shape, f32; dropout_p in [0, 1] — else an error naming `op`.
void check_residual(const char* op, const Tensor& x, const Tensor& residual, float dropout_p);

// The residual's gradient from the sum's: ds · m / (1 − p) with the forward's mask (ds itself without
// dropout), on device d; `op` names the dispatch.
Tensor residual_gradient(const char* op, const Tensor& ds, const kernels::DropoutMask& drop, Device d);

// The residual's part of a norm's backward kernel (kernels/residual_gradient.h): dsum made dense, the
// residual's gradient allocated when the mask has work to do, and its bf16 copy when the step's
// AutocastWeights scope wants one from `producer` (ops/autocast.h: the residual branch ends in a
// linear, whose backward casts this gradient). residual_grad(dx): the residual's gradient once the
// kernel has run — its own buffer, or dx itself without dropout —, its copy lent to the scope.
struct ResidualBackward {
  Tensor dsum, dres, grad16;
  const char* producer = nullptr;
  kernels::ResidualGradient args(const kernels::DropoutMask& drop) const;
  Tensor residual_grad(const Tensor& dx) const;
};
ResidualBackward residual_backward(const char* producer, const Tensor& dsum, bool has_residual,
                                   const kernels::DropoutMask& drop, const Shape& shape, Device d);

// The norm's backward at its input s, given the gradient s received from its other uses (dsum; undefined
// when none) and the normalized output's (dy): the gradients of the node's inputs — s's (ds = dsum +
// the norm's dx, x's gradient), the parameters', and with a residual the residual's — from one kernel
// (kernels/residual_gradient.h).
using NormBackward = std::function<std::vector<Tensor>(const Tensor& dsum, const Tensor& dy)>;

// Records the norm's node: `inputs` are {x, params…} and, with a residual, the residual last; its
// outputs are `out` and, when sum_out is given, `sum` (returned there) — one node, so that the sum's
// gradient and the norm's meet in its backward instead of in an addition of their own. When only the
// sum takes a gradient, ds = dsum and the residual's is dsum through the mask. Returns out.
Tensor record_norm(const char* op, const Tensor& out, const Tensor& sum, Tensor* sum_out,
                   const std::vector<Tensor>& inputs, bool has_residual, const kernels::DropoutMask& drop, Device d,
                   NormBackward backward);

}  // namespace qkv::ops_detail
