// The rest of a fused norm's backward when its input was a sum s = x + drop(res) (add_layer_norm,
// add_rms_norm; kernels/dropout_mask.h): the norm's kernel, having computed its dx at s, also
//
//   ds   = dsum + dx        (dsum: the gradient s received from its other uses — the residual
//                            stream's next sum; null: none), written to dx: x's gradient
//   dres = drop(ds)          (the residual's gradient through the mask; null: not wanted)
//   grad16 = bf16(dres or ds) (the residual's gradient, rounded for its next GEMM; null: not wanted)
//
// in the same pass, each rounded as its own addition and dropout_apply would round it. Where there
// were three kernels (the norm's dx, autograd's sum of the two gradients of s, dropout's backward),
// there is one.
#pragma once

#include "kernels/dropout_mask.h"
#include "qkv/core/dtype.h"

namespace qkv::kernels {

struct ResidualGradient {
  const float* dsum = nullptr;
  float* dres = nullptr;
  DropoutMask drop;
  // bf16(the residual's gradient) — of dres, or without dres of ds (then the residual's gradient) —,
  // for the GEMM it goes to next (ops/autocast.h's activation copies); null: not wanted
  bf16* grad16 = nullptr;
};

}  // namespace qkv::kernels
