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

  // Decoding (no tape): forward, reading what set_inference_weights made for the weight — a bf16
  // copy (small batches) or int8 rows (ops/inference_weight.h); after the weights are loaded; f32
  // drops them.
  Tensor forward_inference(const Tensor& x) const;
  void set_inference_weights(InferenceWeights weights);
  InferenceWeight weight_inference;

  int64_t in_features, out_features;
  Tensor weight, bias;
};

}  // namespace qkv::nn
