// The 2-D pooling problem every device's pooling kernels solve (kernels/<device>/pool.h declares them
// and gives the semantics, PyTorch's): N·C planes, window, stride, padding, dilation, ceil_mode, and
// the average's divisor rules.
#pragma once

#include <cstdint>

namespace qkv::kernels {

struct Pool2dProblem {
  int64_t planes = 0, H = 0, W = 0;  // N·C planes of H × W
  int64_t KH = 1, KW = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg
  int64_t divisor = 0;            // avg: divisor_override when > 0
  int64_t out_h() const { return pooled(H, KH, stride_h, pad_h, dilation_h, ceil_mode); }
  int64_t out_w() const { return pooled(W, KW, stride_w, pad_w, dilation_w, ceil_mode); }

  // PyTorch's pooling_output_shape for one dimension (div_rtn: division rounding towards −∞).
  static int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
    const int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t out = num / s - (num % s != 0 && num < 0 ? 1 : 0) + 1;
    if (ceil_mode && (out - 1) * s >= in + p) --out;  // the last window would start in the padding
    return out;
  }
};

}  // namespace qkv::kernels
