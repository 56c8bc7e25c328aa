// Embedding(num_embeddings, embedding_dim, padding_idx) and LayerNorm(normalized_shape, eps,
// elementwise_affine, bias), as torch.nn: the weight of Embedding is drawn from N(0, 1) (PyTorch's
// default; the padding row is zero), LayerNorm starts at weight 1, bias 0.
#pragma once

#include "qkv/core/rng.h"
#include "qkv/nn/module.h"
#include "qkv/nn/residual_stream.h"
#include "qkv/ops/layer_norm.h"

namespace qkv::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1, Generator* gen = nullptr);
  // ids: i32 of any shape → [..., embedding_dim]
  Tensor forward(const Tensor& ids) const;

  int64_t num_embeddings, embedding_dim, padding_idx;
  Tensor weight;  // [num_embeddings, embedding_dim]
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_shape, float eps = 1e-5f, bool elementwise_affine = true, bool bias = true);
  Tensor forward(const Tensor& x) const;
  // LN(x + Dropout_p(residual)) in one pass (ops/layer_norm.h's add_layer_norm): a post-LN sublayer's
  // ending. dropout_p: 0 outside training.
  Tensor forward(const Tensor& x, const Tensor& residual, float dropout_p = 0.f, Generator* gen = nullptr) const;
  // {s, LN(s)}, s = x + Dropout_p(residual), in one pass: a pre-LN layer's residual stream and the next
  // sublayer's input.
  SumAndNorm forward_with_sum(const Tensor& x, const Tensor& residual, float dropout_p = 0.f,
                              Generator* gen = nullptr) const;
  // A residual stream's sum and its norm (nn/residual_stream.h): one pass when a delta is pending.
  SumAndNorm forward_with_sum(const ResidualStream& x) const;
  // LN of a residual stream's sum, the sum made in the norm's pass: a pre-LN stack's final norm.
  Tensor forward(const ResidualStream& x) const;

  int64_t normalized_shape;
  float eps;
  Tensor weight, bias;  // [normalized_shape]; undefined when not affine / without bias
};

}  // namespace qkv::nn
