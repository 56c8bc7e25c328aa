// A pre-norm decoder's residual stream between sublayers, kept as its last two terms:
//
//   x = base + delta        (delta undefined: x = base)
//
// so that the sum and the next sublayer's norm are one pass over the rows (ops/layer_norm.h's
// add_layer_norm_with_sum, ops/rms_norm.h's add_rms_norm_with_sum): a layer ends with its MLP's output
// as the delta, and the next layer — or the final norm — adds it while normalizing. The sum is made
// where it is first needed, with the bits `base + delta` has.
#pragma once

#include "qkv/ops/tensor.h"

namespace qkv::nn {

struct ResidualStream {
  Tensor base, delta;

  // base + delta, made now (the stream as one tensor, e.g. for a caller that wants the layer's output)
  Tensor sum() const;
  // the stream at position t of dimension dim (both terms selected; the sum stays pending)
  ResidualStream select(int64_t dim, int64_t t) const;
};

}  // namespace qkv::nn
