// Pooling, with PyTorch's torch.nn.functional semantics (formulas in kernels/cpu/pool.h). Inputs
// are [N, C, H, W] or [C, H, W]; every op is differentiable in its input.
#pragma once

#include <optional>

#include "qkv/ops/conv.h"  // Size2
#include "qkv/ops/tensor.h"

namespace qkv {

// stride: the kernel size when not given. padding ≤ half the (dilated) kernel, as PyTorch requires.
Tensor max_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                  Size2 dilation = 1, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt);
// output_size [OH, OW]: each output cell averages its share of the input (F.adaptive_avg_pool2d).
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);

}  // namespace qkv
