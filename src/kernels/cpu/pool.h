// 2-D pooling on the CPU, NCHW, with PyTorch's semantics; every (n, c) plane on its own.
//
// max_pool2d:  y[i, j] = max over the window rows i·s_h − p_h + u·d_h (u < k_h) and columns likewise
//              that fall inside the image (padding never wins; a NaN does, as in PyTorch);
//              backward: dy[i, j] goes to the position that won (argmax, saved as an index into the plane).
// avg_pool2d:  y[i, j] = Σ_window x / divisor, the window clipped to the padded image [−p, H + p); divisor =
//              its size in the padded image (count_include_pad) or its count of real pixels;
//              backward: dy[i, j] / divisor to each real pixel of the window.
// adaptive_avg_pool2d: output cell i covers rows ⌊i·H/OH⌋ … ⌈(i + 1)·H/OH⌉ − 1 (columns likewise): the mean.
//
// Output sizes: ⌊(H + 2p − d(k − 1) − 1) / s⌋ + 1, or ⌈·⌉ + 1 with ceil_mode, less one if the last
// window would then start in the right padding (PyTorch's pooling_output_shape).
#pragma once

#include <cstdint>

#include "kernels/pool.h"

namespace qkv::kernels::cpu {


// x [planes, H, W] → y [planes, OH, OW], argmax [planes, OH, OW] (index h·W + w in the plane; may be null).
void max_pool2d_forward(const Pool2dProblem& p, const float* x, float* y, int32_t* argmax);
// dy → dx [planes, H, W] (overwritten).
void max_pool2d_backward(const Pool2dProblem& p, const float* dy, const int32_t* argmax, float* dx);

void avg_pool2d_forward(const Pool2dProblem& p, const float* x, float* y);
void avg_pool2d_backward(const Pool2dProblem& p, const float* dy, float* dx);

// x [planes, H, W] → y [planes, OH, OW]
void adaptive_avg_pool2d_forward(const float* x, float* y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW);
void adaptive_avg_pool2d_backward(const float* dy, float* dx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                  int64_t OW);

}  // namespace qkv::kernels::cpu
