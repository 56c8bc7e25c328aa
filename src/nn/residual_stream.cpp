#include "qkv/nn/residual_stream.h"

#include "qkv/ops/activation.h"
#include "qkv/ops/arith.h"

namespace qkv::nn {

Tensor ResidualStream::sum() const {
  return delta.defined() ? base + dropout(delta, delta_dropout, true, generator) : base;
}

ResidualStream ResidualStream::select(int64_t dim, int64_t t) const {
  if (delta.defined() && delta_dropout > 0.f) return {sum().select(dim, t), Tensor()};
  return {base.select(dim, t), delta.defined() ? delta.select(dim, t) : Tensor()};
}

}  // namespace qkv::nn
