#include "qkv/nn/residual_stream.h"

#include "qkv/ops/arith.h"

namespace qkv::nn {

Tensor ResidualStream::sum() const { return delta.defined() ? base + delta : base; }

ResidualStream ResidualStream::select(int64_t dim, int64_t t) const {
  return {base.select(dim, t), delta.defined() ? delta.select(dim, t) : Tensor()};
}

}  // namespace qkv::nn
