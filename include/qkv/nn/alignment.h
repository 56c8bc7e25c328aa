// Attention as the recurrent translators introduced it (seeds 003–004, "alignment"): a decoder
// state q looks at every encoder state k_j, scores it, and reads their weighted mean.
//
//   additive (Bahdanau et al. 2015):  e_j = vᵀ tanh(W_q q + W_k k_j)
//   dot      (Luong et al. 2015):     e_j = qᵀ k_j
//   general  (Luong et al. 2015):     e_j = qᵀ W_a k_j
//   a = softmax_j(e) over the positions the mask allows;   context = Σ_j a_j k_j
//
// The part of a score that depends only on the keys (W_k k_j, W_a k_j) is computed once per source
// sentence (project_keys) and reused at every decoding step. Parameters: additive — query_proj.weight
// [A, q], key_proj.weight [A, k], v [A]; general — weight [q, k]; dot — none (q and k of one width).
#pragma once

#include <cstdint>

#include "qkv/core/names.h"
#include "qkv/core/rng.h"
#include "qkv/nn/linear.h"

namespace qkv::nn {

enum class AlignmentScore : uint8_t { additive, dot, general };
constexpr EnumTable<AlignmentScore, 3> enum_table(AlignmentScore) {
  return {"attention score",
          {{{AlignmentScore::additive, "additive"}, {AlignmentScore::dot, "dot"}, {AlignmentScore::general, "general"}}}};
}

class Alignment : public Module {
 public:
  // query_dim q, key_dim k (the encoder states'), attention_dim A (additive only).
  Alignment(AlignmentScore score, int64_t query_dim, int64_t key_dim, int64_t attention_dim = 0, Generator* gen = nullptr);

  // keys [B, S, k] → what the scores need of them, once per source: W_k k (additive, [B, S, A]),
  // W_aᵀ-side product (general, [B, S, q]) or the keys themselves (dot).
  Tensor project_keys(const Tensor& keys) const;

  struct Output {
    Tensor context;  // [B, T, k]
    Tensor weights;  // [B, T, S], each row sums to 1 over the allowed positions
  };
  // query [B, T, q] (T decoder positions at once, or 1 per step); keys [B, S, k] and their
  // projection; mask in qkv's convention, broadcastable to [B, T, S] (e.g. [B, 1, S]; true = may
  // attend). A row the mask leaves empty gets zero weights.
  Output forward(const Tensor& query, const Tensor& keys, const Tensor& projected_keys, const Tensor& mask) const;

  AlignmentScore score;
  int64_t query_dim, key_dim, attention_dim;
  // dot and general: the scores are multiplied by this (1: Luong's; 1/√q: scaled as the
  // Transformer's dot products, so that a softmax over wide states does not start saturated).
  float scale = 1.f;
  std::shared_ptr<Linear> query_proj, key_proj;  // additive
  Tensor v;                                      // additive: [A]
  Tensor weight;                                 // general: [q, k]
};

}  // namespace qkv::nn
