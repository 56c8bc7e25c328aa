#include "qkv/ops/sample.h"

#include <cmath>
#include <vector>

#include "dispatch.h"
#include "kernels/cpu/sample.h"

namespace qkv {

using ops_detail::device_of;

Tensor sample_rows(const Tensor& logits, const std::vector<double>& temperature, const std::vector<double>& u) {
  constexpr const char* op = "sample_rows";
  QKV_CHECK(logits.dtype() == DType::f32 && logits.dim() >= 1 && logits.size(-1) >= 1, op,
            ": logits must be an f32 tensor of at least one dim and one entry a row, got ", logits.str());
  const int64_t n = logits.size(-1), rows = logits.numel() / n;
  QKV_CHECK(n < (int64_t{1} << 31), op, ": rows of ", n, " logits; indices are i32");
  QKV_CHECK(static_cast<int64_t>(temperature.size()) == rows && static_cast<int64_t>(u.size()) == rows, op, ": ",
            temperature.size(), " temperatures and ", u.size(), " draws for ", rows, " rows");
  for (int64_t r = 0; r < rows; ++r) {
    const double T = temperature[static_cast<size_t>(r)], d = u[static_cast<size_t>(r)];
    QKV_CHECK(std::isfinite(T), op, ": temperature[", r, "] = ", T, " is not finite");
    QKV_CHECK(d >= 0 && d < 1, op, ": u[", r, "] = ", d, " is not in [0, 1)");
  }
  const Device d = device_of(op, {&logits});
  Shape shape = logits.shape();
  shape.pop_back();
  Tensor out = Tensor::empty(shape, DType::i32, d);
  if (rows == 0) return out;
  // the f64 parameters' bytes, temperature then u, in one i32 buffer (qkv's dtypes have no f64): one upload
  std::vector<double> params(temperature);
  params.insert(params.end(), u.begin(), u.end());
  const Tensor bytes = Tensor::from_blob(params.data(), {4 * rows}, DType::i32).to(d);
  const auto* p = reinterpret_cast<const double*>(bytes.data<int32_t>());
  const Tensor x = dense(logits);
  QKV_DISPATCH(op, d, k::sample_rows(x.data(), rows, n, p, p + rows, out.data<int32_t>()));
  return out;
}

}  // namespace qkv
