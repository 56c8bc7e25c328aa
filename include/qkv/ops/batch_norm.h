// Batch and group normalization, with PyTorch's torch.nn.functional semantics (formulas in
// kernels/cpu/batch_norm.h and kernels/cpu/group_norm.h). input [N, C, *] (images: [N, C, H, W]).
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

// training: normalizes by the batch's statistics and, when running_mean/running_var are given,
// updates them in place (momentum m: new = (1 − m)·old + m·batch; the variance unbiased);
// eval: normalizes by running_mean/running_var (required). weight γ and bias β [C] are optional.
// Differentiable in input, weight and bias.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  float momentum = 0.1f, float eps = 1e-5f);

// Statistics per sample over groups of C / num_groups channels; weight and bias [C] optional.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), float eps = 1e-5f);

}  // namespace qkv
