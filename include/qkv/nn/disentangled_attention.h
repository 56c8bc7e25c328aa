// DeBERTa's disentangled attention (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled
// Attention"; v2 and v3 as transformers' DebertaV2): a token is two vectors, its content and its
// position relative to the other token, and the score of query i over key j sums three products —
//
//   score(i, j) = ( q_i·k_j  +  q_i·Pᴷ[δ(i, j)]  +  k_j·Pᵠ[δ(i, j)] ) / √(D·f)
//                   content→content  content→position (c2p)  position→content (p2c)
//
//   Pᴷ = R W_Kᵀ + b_K,  Pᵠ = R W_Qᵀ + b_Q   the layer's own key and query projections of the relative
//                                            embeddings R [2k, E] (share_att_key), LayerNorm'd once a forward
//   δ(i, j) = clamp(bucket(i − j) + k, 0, 2k − 1)      k: the span (position_buckets, else max_relative_positions)
//   f = 1 + [c2p] + [p2c]                               (pos_att_type's terms)
//   bucket(r) = r                                                     |r| ≤ m = position_buckets / 2 (or no buckets)
//             = sign(r) · (m + ⌈ln(|r| / m) / ln((M − 1) / m) · (m − 1)⌉)    beyond, M = max_relative_positions
//
// (the logarithms in float32, as transformers computes them). Both position terms read the same
// δ(i, j): p2c's gather k_j·Pᵠ[clamp(−bucket(j − i) + k)] is it, since bucket(−r) = −bucket(r).
//
// Computed as two products and two gathers a layer (c2p: Q Pᴷᵀ [B, H, T, R], then row i's columns
// δ(i, ·); p2c: K Pᵠᵀ, then column j's δ(·, j)), over only the R rows of R that δ reaches (2T − 1
// of 2k when T ≤ m): the term handed to MultiheadAttention (ScoreTerm) with the scale 1/√(D·f).
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/nn/multihead_attention.h"

namespace qkv::nn {

// DeBERTa's make_log_bucket_position for one relative position r (bucket(r) above); bucket_size ≤ 0:
// r itself.
int64_t deberta_relative_bucket(int64_t r, int64_t bucket_size, int64_t max_position);

struct DisentangledOptions {
  int64_t span = 256;                    // k: R holds 2k rows
  int64_t position_buckets = 256;        // ≤ 0: no log buckets
  int64_t max_relative_positions = 512;  // M
  bool c2p = true, p2c = true;
};

// The positions' side of one forward, for an input of T tokens: the rows of R that δ reaches and
// the gather indices, shared by the layers.
class DisentangledPositions {
 public:
  // rel_embeddings [2k, E]: R after its LayerNorm (and dropout, in training)
  DisentangledPositions(const Tensor& rel_embeddings, int64_t T, const DisentangledOptions& options);
  // The term for a layer's attention: (c2p + p2c) / √(D·f) from its own W_Q, W_K and biases, read as
  // forward reads them (inference: the int8 rows or copies set_inference_weights made).
  ScoreTerm term(const MultiheadAttention& attention, bool inference) const;
  float scale(int64_t head_dim) const;  // 1/√(D·f)

 private:
  Tensor rel_;  // [R, E]: rows lo … lo + R − 1 of R
  int64_t T_ = 0, R_ = 0;
  DisentangledOptions options_;
  std::vector<int64_t> c2p_index_;  // [T·T]: i·R + δ(i, j) − lo
  std::vector<int64_t> p2c_index_;  // [T·T]: j·R + δ(i, j) − lo
};

}  // namespace qkv::nn
