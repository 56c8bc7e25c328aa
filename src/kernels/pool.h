// The 2-D pooling problem every device's pooling kernels solve (kernels/<device>/pool.h declares them
// and gives the semantics, PyTorch's): N·C planes, window, stride, padding, dilation, ceil_mode, and
// the average's divisor rules.
#pragma once

#include <cstdint>

#include "qkv/core/host_device.h"

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

// The avg window of output (i, j): its real rows [h0, h1) and columns [w0, w1), and its divisor —
// the window's size in the padded image [−p, H + p) (count_include_pad), its count of real pixels,
// or divisor_override.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  float divisor;
};
QKV_HOST_DEVICE inline AvgWindow avg_window(const Pool2dProblem& p, int64_t i, int64_t j) {
  int64_t h0 = i * p.stride_h - p.pad_h, w0 = j * p.stride_w - p.pad_w;
  int64_t h1 = h0 + p.KH < p.H + p.pad_h ? h0 + p.KH : p.H + p.pad_h;
  int64_t w1 = w0 + p.KW < p.W + p.pad_w ? w0 + p.KW : p.W + p.pad_w;
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0;
  h1 = h1 < p.H ? h1 : p.H, w1 = w1 < p.W ? w1 : p.W;
  const int64_t real = (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
  const int64_t div = p.divisor > 0 ? p.divisor : p.count_include_pad ? padded : real;
  return {h0, h1, w0, w1, static_cast<float>(div)};
}

// adaptive_avg_pool2d: output cell i of `out` covers input rows [start_of, end_of) of `in`.
QKV_HOST_DEVICE inline int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
QKV_HOST_DEVICE inline int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

}  // namespace qkv::kernels
