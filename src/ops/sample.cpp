#include "qkv/ops/sample.h"

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
  // the kernels' parameters, f64 [rows, 4] = (T, k, p, u), in one i32 buffer (qkv's dtypes have no f64): one upload
  std::vector<double> params;
  params.reserve(4 * rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const RowSampling& s = rows[r];
    QKV_CHECK(s.u >= 0 && s.u < 1, op, ": row ", r, "'s u = ", s.u, " is not in [0, 1)");
    QKV_CHECK(s.top_p > 0, op, ": row ", r, "'s top_p = ", s.top_p, " is not in (0, 1]");
    const int64_t k = s.top_k > 0 && s.top_k < n ? s.top_k : 0;
    params.insert(params.end(), {s.temperature, static_cast<double>(k), s.top_p < 1 ? s.top_p : 1.0, s.u});
  }
  const Device d = device_of(op, {&logits});
  Shape shape = logits.shape();
  shape.pop_back();
  Tensor out = Tensor::empty(shape, DType::i32, d);
  if (count == 0) return out;
  const Tensor bytes = Tensor::from_blob(params.data(), {8 * count}, DType::i32).to(d);
  const Tensor x = dense(logits);
  QKV_DISPATCH(op, d, k::sample_rows(x.data(), count, n, reinterpret_cast<const double*>(bytes.data<int32_t>()),
                                     out.data<int32_t>()));
  return out;
}

}  // namespace qkv
