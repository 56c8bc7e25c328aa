// Conv2d, BatchNorm2d and GroupNorm with torch.nn's names, parameters and initialization.
#pragma once

#include "qkv/core/rng.h"
#include "qkv/nn/module.h"
#include "qkv/ops/conv.h"

namespace qkv::nn {

// y = conv2d(x, weight [out, in / groups, kH, kW], bias [out]); weight and bias ~ U(−1/√fan_in,
// 1/√fan_in) with fan_in = in / groups · kH · kW (PyTorch's default).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1, Size2 padding = 0,
         Size2 dilation = 1, int64_t groups = 1, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const;  // [N, in, H, W] → [N, out, H', W']

  int64_t in_channels, out_channels, groups;
  Size2 kernel_size, stride, padding, dilation;
  Tensor weight, bias;
};

// batch_norm over [N, C, H, W] with γ = 1, β = 0, running_mean = 0, running_var = 1 at the start;
// training mode normalizes by the batch and updates the running statistics (momentum), eval mode
// by the running statistics. Buffers: running_mean, running_var (saved with the parameters).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, float eps = 1e-5f, float momentum = 0.1f, bool affine = true);
  Tensor forward(const Tensor& x) const;

  int64_t num_features;
  float eps, momentum;
  Tensor weight, bias, running_mean, running_var;
};

// group_norm with γ = 1, β = 0 at the start.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, float eps = 1e-5f, bool affine = true);
  Tensor forward(const Tensor& x) const;

  int64_t num_groups, num_channels;
  float eps;
  Tensor weight, bias;
};

}  // namespace qkv::nn
