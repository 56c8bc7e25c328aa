#include "qkv/nn/alignment.h"

#include <cmath>

#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

Alignment::Alignment(AlignmentScore s, int64_t q, int64_t k, int64_t a, Generator* gen)
    : score(s), query_dim(q), key_dim(k), attention_dim(a) {
  QKV_CHECK(q > 0 && k > 0, "Alignment: query_dim ", q, " and key_dim ", k, " must be positive");
  Generator& g = gen ? *gen : default_generator();
  switch (s) {
    case AlignmentScore::additive: {
      QKV_CHECK(a > 0, "Alignment: additive attention needs an attention_dim > 0");
      query_proj = register_module("query_proj", std::make_shared<Linear>(q, a, /*bias=*/false, &g));
      key_proj = register_module("key_proj", std::make_shared<Linear>(k, a, /*bias=*/true, &g));
      Tensor vv = Tensor::empty({a});
      init::uniform_(vv, g, -1.f / std::sqrt(static_cast<float>(a)), 1.f / std::sqrt(static_cast<float>(a)));
      v = register_parameter("v", vv);
      break;
    }
    case AlignmentScore::dot:
      QKV_CHECK(q == k, "Alignment: dot scores need the query and key widths equal, got ", q, " and ", k);
      break;
    case AlignmentScore::general: {
      Tensor w = Tensor::empty({q, k});
      init::xavier_uniform_(w, g);
      weight = register_parameter("weight", w);
      break;
    }
  }
}

Tensor Alignment::project_keys(const Tensor& keys) const {
  QKV_CHECK(keys.dim() == 3 && keys.size(2) == key_dim, "Alignment: keys must be [B, S, ", key_dim, "], got ",
            shape_str(keys.shape()));
  switch (score) {
    case AlignmentScore::additive: return key_proj->forward(keys);  // W_k k_j + b   [B, S, A]
    case AlignmentScore::general: return linear(keys, weight);      // W_a k_j       [B, S, q]
    case AlignmentScore::dot: return keys;
  }
  return keys;
}

Alignment::Output Alignment::forward(const Tensor& query, const Tensor& keys, const Tensor& pk,
                                     const Tensor& mask) const {
  QKV_CHECK(query.dim() == 3 && query.size(2) == query_dim && query.size(0) == keys.size(0),
            "Alignment: query must be [", keys.size(0), ", T, ", query_dim, "], got ", shape_str(query.shape()));
  Tensor e;  // [B, T, S]
  if (score == AlignmentScore::additive) {
    // e_tj = vᵀ tanh(W_q q_t + W_k k_j)
    e = additive_score(query_proj->forward(query), pk, v);  // [B, T, A], [B, S, A], [A] → [B, T, S]
  } else {
    // e_tj = scale · q_t · (W_a k_j)  (general) or scale · q_t · k_j (dot)
    e = matmul(query, pk.transpose(1, 2));  // [B, T, q] × [B, q, S]
    if (scale != 1.f) e = e * scale;
  }
  Output out;
  if (mask.defined()) {
    QKV_CHECK(mask.dtype() == DType::boolean, "Alignment: the mask must be boolean (true = may attend)");
    const Tensor blocked = logical_not(mask);
    out.weights = masked_fill(softmax(masked_fill(e, blocked, -INFINITY), -1), blocked, 0.f);  // an empty row: 0, not NaN
  } else {
    out.weights = softmax(e, -1);
  }
  out.context = matmul(out.weights, keys);  // Σ_j a_tj k_j   [B, T, k]
  return out;
}

}  // namespace qkv::nn
