// 2-D convolution on the CPU, NCHW as PyTorch's conv2d, computed by oneDNN's convolution
// primitives (forward, backward data, backward weights):
//
//   y[n, o, i, j] = b[o] + Σ_{c ∈ group(o)} Σ_{u, v} w[o, c, u, v] · x[n, c, i·s_h − p_h + u·d_h, j·s_w − p_w + v·d_w]
//
// (x is 0 outside the image). Backward: dx is the transposed convolution of dy with w; dw[o, c, u, v]
// = Σ_{n, i, j} dy[n, o, i, j] · x[n, c, i·s_h − p_h + u·d_h, …]; db[o] = Σ_{n, i, j} dy[n, o, i, j].
//
// The primitives run on oneDNN's blocked layouts (nChw8c on AVX2, nChw16c on AVX-512), with the
// NCHW operands reordered in and out: measured on Zen 3 at ResNet sizes that is 1.1–1.5× faster
// than oneDNN on NCHW itself, which is im2col + GEMM (`qkv bench conv2d`; docs/BENCHMARKS.md).
// A primitive is JIT-compiled once per problem and kept.
#pragma once

#include <cstdint>

#include "kernels/conv.h"

namespace qkv::kernels::cpu {


// x [N, C, H, W], w, b [O] (when p.bias) → y [N, O, OH, OW].
void conv2d_forward(const Conv2dProblem& p, const float* x, const float* w, const float* b, float* y);
// dy [N, O, OH, OW], w → dx [N, C, H, W].
void conv2d_backward_data(const Conv2dProblem& p, const float* dy, const float* w, float* dx);
// x, dy → dw [O, C / groups, KH, KW] and db [O] (when not null).
void conv2d_backward_weights(const Conv2dProblem& p, const float* x, const float* dy, float* dw, float* db);

}  // namespace qkv::kernels::cpu
