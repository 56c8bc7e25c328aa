// Convolution, with PyTorch's torch.nn.functional.conv2d semantics (formulas in kernels/cpu/conv.h).
#pragma once

#include <cstdint>

#include "qkv/ops/tensor.h"

namespace qkv {

// A pair of sizes (height, width), or one size for both — PyTorch's `int or tuple` arguments:
// conv2d(x, w, b, /*stride=*/2) or conv2d(x, w, b, {2, 1}).
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor): as PyTorch's int
  Size2(int64_t h, int64_t w) : h(h), w(w) {}
  bool operator==(const Size2&) const = default;
};

// input [N, C, H, W] (or [C, H, W], unbatched), weight [O, C / groups, kH, kW], bias [O] or
// undefined → [N, O, H', W'] with H' = ⌊(H + 2·padding − dilation·(kH − 1) − 1) / stride⌋ + 1.
// Differentiable in input, weight and bias.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), Size2 stride = 1,
              Size2 padding = 0, Size2 dilation = 1, int64_t groups = 1);

}  // namespace qkv
