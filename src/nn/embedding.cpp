#include "qkv/nn/embedding.h"

#include "qkv/core/error.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

Embedding::Embedding(int64_t n, int64_t d, int64_t pad, Generator* gen)
    : num_embeddings(n), embedding_dim(d), padding_idx(pad) {
  QKV_CHECK(n > 0 && d > 0, "Embedding: num_embeddings and embedding_dim must be positive, got ", n, " and ", d);
  QKV_CHECK(pad >= -1 && pad < n, "Embedding: padding_idx ", pad, " out of range for ", n, " embeddings");
  weight = Tensor::empty({n, d});
  init::normal_(weight, gen ? *gen : default_generator(), 0.f, 1.f);
  if (pad >= 0) weight.select(0, pad).fill_(0.f);
  weight = register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(ids, weight, padding_idx); }

LayerNorm::LayerNorm(int64_t n, float e, bool affine, bool has_bias) : normalized_shape(n), eps(e) {
  QKV_CHECK(n > 0, "LayerNorm: normalized_shape must be positive, got ", n);
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({n}));
    if (has_bias) bias = register_parameter("bias", Tensor::zeros({n}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, {normalized_shape}, weight, bias, eps); }

Tensor LayerNorm::forward(const Tensor& x, const Tensor& residual, float dropout_p, Generator* gen) const {
  return add_layer_norm(x, residual, {normalized_shape}, weight, bias, eps, dropout_p, gen);
}

SumAndNorm LayerNorm::forward_with_sum(const Tensor& x, const Tensor& residual, float dropout_p, Generator* gen) const {
  return add_layer_norm_with_sum(x, residual, {normalized_shape}, weight, bias, eps, dropout_p, gen);
}

SumAndNorm LayerNorm::forward_with_sum(const ResidualStream& x) const {
  if (x.delta.defined()) return forward_with_sum(x.base, x.delta, x.delta_dropout, x.generator);
  return {x.base, forward(x.base)};
}

Tensor LayerNorm::forward(const ResidualStream& x) const { return forward_with_sum(x).normalized; }

}  // namespace qkv::nn
