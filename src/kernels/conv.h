// The 2-D convolution problem every device's conv2d kernels solve (kernels/<device>/conv.h declares
// them and gives the formula): NCHW input, [O, C / groups, KH, KW] weight, stride, padding, dilation,
// groups, bias.
#pragma once

#include <cstdint>

namespace qkv::kernels {

struct Conv2dProblem {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input [N, C, H, W]
  int64_t O = 0, KH = 0, KW = 0;       // weight [O, C / groups, KH, KW]
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1, groups = 1;
  bool bias = true;
  int64_t out_h() const { return (H + 2 * pad_h - dilation_h * (KH - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (W + 2 * pad_w - dilation_w * (KW - 1) - 1) / stride_w + 1; }
};

}  // namespace qkv::kernels
