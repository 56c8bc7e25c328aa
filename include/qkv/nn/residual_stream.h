// A pre-norm decoder's residual stream between sublayers, kept as its last two terms:
//
//   x = base + Dropout_p(delta)        (delta undefined: x = base; p = delta_dropout, 0: none)
//
// so that the dropout, the sum and the next sublayer's norm are one pass over the rows
// (ops/layer_norm.h's add_layer_norm_with_sum, ops/rms_norm.h's add_rms_norm_with_sum): a layer ends
// with its MLP's output as the delta, and the next layer — or the final norm — drops and adds it while
// normalizing. The sum is made where it is first needed, with the bits
// `base + dropout(delta, p, true, generator)` has; the dropout's counters are reserved there (nothing
// draws from the generator in between, so the masks are those of a dropout made at the layer's end).
#pragma once

#include "qkv/core/rng.h"
#include "qkv/ops/tensor.h"

namespace qkv::nn {

struct ResidualStream {
  Tensor base, delta;
  float delta_dropout = 0.f;  // p of the delta's dropout (0 outside training)
  Generator* generator = nullptr;  // its generator: default_generator() when null

  // base + Dropout_p(delta), made now (the stream as one tensor, e.g. for a caller that wants the
  // layer's output)
  Tensor sum() const;
  // the stream at position t of dimension dim (both terms selected and the sum left pending; with a
  // pending dropout, the sum made first, so that the mask is drawn over the whole delta)
  ResidualStream select(int64_t dim, int64_t t) const;
};

}  // namespace qkv::nn
