#include "qkv/ops/sample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dispatch.h"
#include "kernels/cpu/sample.h"

namespace qkv {

using ops_detail::device_of;

Tensor sample_rows(const Tensor& logits, const std::vector<RowSampling>& rows) {
  constexpr const char* op = "sample_rows";
  QKV_CHECK(logits.dtype() == DType::f32 && logits.dim() >= 1 && logits.size(-1) >= 1, op,
            ": logits must be an f32 tensor of at least one dim and one entry a row, got ", logits.str());
  const int64_t n = logits.size(-1), count = logits.numel() / n;
  QKV_CHECK(n < (int64_t{1} << 31), op, ": rows of ", n, " logits; indices are i32");
  QKV_CHECK(static_cast<int64_t>(rows.size()) == count, op, ": ", rows.size(), " rows' sampling for ", count, " rows");
  // One pass over the rows: the kernels' parameters, f64 [rows, 4] = (T, k, p, u), in one i32 buffer (qkv's
  // dtypes have no f64: one upload); each row's penalties (r, f, p) and, for the rows that have any, their
  // seen tokens' entries (row, token, count, in prompt).
  std::vector<double> params;
  params.reserve(4 * rows.size());
  std::vector<float> penalties;
  penalties.reserve(3 * rows.size());
  std::vector<int32_t> seen, tokens;
  for (size_t r = 0; r < rows.size(); ++r) {
    const RowSampling& s = rows[r];
    QKV_CHECK(s.u >= 0 && s.u < 1, op, ": row ", r, "'s u = ", s.u, " is not in [0, 1)");
    QKV_CHECK(s.top_p > 0, op, ": row ", r, "'s top_p = ", s.top_p, " is not in (0, 1]");
    QKV_CHECK(std::isfinite(s.repetition_penalty) && s.repetition_penalty > 0 && std::isfinite(s.frequency_penalty) &&
                  std::isfinite(s.presence_penalty),
              op, ": row ", r, "'s penalties (repetition ", s.repetition_penalty, ", frequency ", s.frequency_penalty,
              ", presence ", s.presence_penalty, ") must be finite, the repetition penalty positive");
    const int64_t k = s.top_k > 0 && s.top_k < n ? s.top_k : 0;
    params.insert(params.end(), {s.temperature, static_cast<double>(k), s.top_p < 1 ? s.top_p : 1.0, s.u});
    penalties.insert(penalties.end(), {s.repetition_penalty, s.frequency_penalty, s.presence_penalty});
    if (s.repetition_penalty == 1 && s.frequency_penalty == 0 && s.presence_penalty == 0) continue;
    tokens.clear();
    for (const SeenToken& t : s.seen) {
      QKV_CHECK(t.token >= 0 && t.token < n && t.count >= 0, op, ": row ", r, " has seen token ", t.token, " ", t.count,
                " times (a vocabulary of ", n, ")");
      seen.insert(seen.end(), {static_cast<int32_t>(r), t.token, t.count, t.in_prompt ? 1 : 0});
      tokens.push_back(t.token);
    }
    std::sort(tokens.begin(), tokens.end());
    QKV_CHECK(std::adjacent_find(tokens.begin(), tokens.end()) == tokens.end(), op, ": row ", r,
              " names a seen token twice");
  }
  const Device d = device_of(op, {&logits});
  Shape shape = logits.shape();
  shape.pop_back();
  Tensor out = Tensor::empty(shape, DType::i32, d);
  if (count == 0) return out;
  const Tensor bytes = Tensor::from_blob(params.data(), {8 * count}, DType::i32).to(d);
  Tensor x = dense(logits);
  if (!seen.empty()) {  // the penalties, on a copy: the logits are the caller's
    x = x.clone();
    const auto m = static_cast<int64_t>(seen.size() / 4);
    const Tensor entries = Tensor::from_ints(seen, {m, 4}).to(d);
    const Tensor weights = Tensor::from_vector(penalties, {count, 3}).to(d);
    QKV_DISPATCH(op, d, k::apply_penalties(x.data(), n, entries.data<int32_t>(), m, weights.data()));
  }
  QKV_DISPATCH(op, d, k::sample_rows(x.data(), count, n, reinterpret_cast<const double*>(bytes.data<int32_t>()),
                                     out.data<int32_t>()));
  return out;
}

}  // namespace qkv
