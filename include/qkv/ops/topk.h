// The k largest entries along the last dim, as torch.topk(x, k, dim=-1, largest=True, sorted=True):
//
//   values[…, j] = x[…, indices[…, j]],   j < k, best first
//
// best: the larger value, NaN above every number (as PyTorch), −0 equal to +0, and of equal values
// the lower index (kernels/topk.h: the CPU and the GPU pick the same entries). Beam search on a GPU
// takes each hypothesis's 2K best continuations with it, so that K·2K numbers a sentence come back
// to the host instead of K·V.
//
//   backward:  dx[…, indices[…, j]] = dvalues[…, j], 0 elsewhere
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv {

struct TopK {
  Tensor values;   // f32 [..., k]
  Tensor indices;  // i32 [..., k]
};

// x: f32, at least 1-D, its last dim n < 2³¹; 0 ≤ k ≤ n.
TopK topk(const Tensor& x, int64_t k);

}  // namespace qkv
