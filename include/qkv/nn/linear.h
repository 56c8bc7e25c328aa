// Linear(in_features, out_features, bias): y = x Wᵀ + b, W: [out, in], as torch.nn.Linear
// (initialized as PyTorch does: W, b ~ U(−1/√in, 1/√in)).
#pragma once

#include "qkv/core/rng.h"
#include "qkv/nn/module.h"

namespace qkv::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }

  int64_t in_features, out_features;
  Tensor weight, bias;
};

}  // namespace qkv::nn
