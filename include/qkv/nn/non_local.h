// The non-local block (Wang, Girshick, Gupta, He 2018, "embedded Gaussian"), the "non-local means"
// of seed 001 inside a ConvNet: every position's new value is a mean over all positions, weighted by
// how similar they are, where a convolution only mixes neighbours.
//
//   θ = W_θ x,  φ = W_φ x,  g = W_g x               1×1 convolutions, C → C' channels
//   y_i = Σ_j softmax_j(θ_iᵀ φ_j) g_j               over the H·W positions (j: H'·W' with sub_sample)
//   z = BN(W_z y) + x                                1×1 convolution C' → C; BN's γ starts at 0, so
//                                                    the block starts as the identity
//
// The sum is scaled_dot_product_attention over the positions (scale 1: the paper's unscaled
// θᵀφ), so the flash kernel serves long position counts; with heads > 1 the C' channels split into
// heads that attend separately. sub_sample max-pools φ and g 2×2 (a quarter of the keys).
#pragma once

#include <memory>

#include "qkv/core/rng.h"
#include "qkv/nn/conv.h"
#include "qkv/nn/module.h"

namespace qkv::nn {

struct NonLocalOptions {
  int64_t channels = 0;        // C
  int64_t inter_channels = 0;  // C' (0: C / 2)
  int64_t heads = 1;
  bool sub_sample = false;
  bool batch_norm = true;      // BN after W_z (else W_z itself starts at zero)
};

class NonLocalBlock2d : public Module {
 public:
  explicit NonLocalBlock2d(const NonLocalOptions& options, Generator* gen = nullptr);
  // x [N, C, H, W] → z [N, C, H, W]. weights, when given, receives the attention [N, heads, H·W,
  // H'·W'] (row i: where position i = h·W + w looks; no gradient).
  Tensor forward(const Tensor& x, Tensor* weights = nullptr) const;

  NonLocalOptions options;
  std::shared_ptr<Conv2d> theta, phi, g, W;
  std::shared_ptr<BatchNorm2d> bn;
};

}  // namespace qkv::nn
