#include "qkv/nn/disentangled_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "qkv/core/error.h"
#include "qkv/ops.h"

namespace qkv::nn {

// bucket(r): r within ±m, else sign(r) · (m + ⌈ln(|r| / m) / ln((M − 1) / m) · (m − 1)⌉), each step in
// float32 as transformers' make_log_bucket_position takes it
int64_t deberta_relative_bucket(int64_t r, int64_t bucket_size, int64_t max_position) {
  if (bucket_size <= 0 || max_position <= 0) return r;
  const int64_t mid = bucket_size / 2;
  const int64_t a = (r < mid && r > -mid) ? mid - 1 : std::abs(r);
  if (a <= mid) return r;
  const float ratio = static_cast<float>(static_cast<double>(max_position - 1) / static_cast<double>(mid));
  const float log_pos = std::ceil(std::log(static_cast<float>(a) / static_cast<float>(mid)) / std::log(ratio) *
                                  static_cast<float>(mid - 1)) +
                        static_cast<float>(mid);
  return r < 0 ? -static_cast<int64_t>(log_pos) : static_cast<int64_t>(log_pos);
}

DisentangledPositions::DisentangledPositions(const Tensor& rel_embeddings, int64_t T, const DisentangledOptions& o)
    : T_(T), options_(o) {
  const int64_t k = o.span;
  QKV_CHECK(k >= 1 && rel_embeddings.dim() == 2 && rel_embeddings.size(0) == 2 * k,
            "disentangled attention: ", "the relative embeddings ", shape_str(rel_embeddings.shape()), " should be [2·",
            k, ", E]");
  // δ(i, j) = clamp(bucket(i − j) + k, 0, 2k − 1): a function of i − j alone, 2T − 1 values
  std::vector<int64_t> delta(static_cast<size_t>(2 * T - 1));  // delta[i − j + T − 1]
  for (int64_t r = -(T - 1); r <= T - 1; ++r)
    delta[static_cast<size_t>(r + T - 1)] =
        std::clamp<int64_t>(deberta_relative_bucket(r, o.position_buckets, o.max_relative_positions) + k, 0, 2 * k - 1);
  const auto [lo, hi] = std::minmax_element(delta.begin(), delta.end());
  const int64_t first = *lo;
  R_ = *hi - first + 1;
  rel_ = rel_embeddings.slice(0, first, first + R_);  // the rows δ reaches
  c2p_index_.resize(static_cast<size_t>(T * T));
  p2c_index_.resize(static_cast<size_t>(T * T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) {
      const int64_t d = delta[static_cast<size_t>(i - j + T - 1)] - first;
      c2p_index_[static_cast<size_t>(i * T + j)] = i * R_ + d;  // row i of Q Pᴷᵀ, column δ(i, j)
      p2c_index_[static_cast<size_t>(i * T + j)] = j * R_ + d;  // row j of K Pᵠᵀ, column δ(i, j)
    }
}

float DisentangledPositions::scale(int64_t head_dim) const {
  const int64_t f = 1 + (options_.c2p ? 1 : 0) + (options_.p2c ? 1 : 0);
  return 1.f / std::sqrt(static_cast<float>(head_dim) * static_cast<float>(f));
}

namespace {

// out[b, h, i, j] = all[b, h, index[i·T + j] / R, index[i·T + j] % R]: all [B, H, T, R] → [B, H, T, T]
// (one index_select of rows of B·H values, the batch and heads innermost)
Tensor gather_positions(const Tensor& all, const std::vector<int64_t>& index, int64_t T, int64_t R) {
  const int64_t B = all.size(0), H = all.size(1);
  const Tensor rows = all.permute({2, 3, 0, 1}).contiguous().view({T * R, B * H});  // [T·R, B·H]
  return index_select(rows, 0, index).view({T, T, B, H}).permute({2, 3, 0, 1});
}

}  // namespace

ScoreTerm DisentangledPositions::term(const MultiheadAttention& attention, bool inference) const {
  ScoreTerm t;
  t.scale = scale(attention.head_dim);
  if (!options_.c2p && !options_.p2c) return t;  // the relative embeddings unused: content→content alone
  t.add = [this, &attention, inference, s = *t.scale](const Tensor& Qh, const Tensor& Kh) {
    // Qh, Kh [B, H, T, D]
    QKV_CHECK(Qh.size(2) == T_ && Kh.size(2) == T_, "disentangled attention: built for ", T_, " tokens, given ",
              Qh.size(2));
    const int64_t H = attention.num_heads, D = attention.head_dim;
    // P [R, E] → [1, H, D, R], the layer's projection of the relative embeddings, transposed for the product
    auto positions = [&](int i) {
      return attention.project(rel_, i, inference).view({R_, H, D}).permute({1, 2, 0}).unsqueeze(0);
    };
    Tensor sum;
    if (options_.c2p)  // q_i·Pᴷ[δ(i, j)]
      sum = gather_positions(matmul(Qh, positions(1)), c2p_index_, T_, R_);
    if (options_.p2c) {  // k_j·Pᵠ[δ(i, j)]
      const Tensor p2c = gather_positions(matmul(Kh, positions(0)), p2c_index_, T_, R_);
      sum = sum.defined() ? sum + p2c : p2c;
    }
    return sum * s;  // [B, H, T, T]
  };
  return t;
}

}  // namespace qkv::nn
