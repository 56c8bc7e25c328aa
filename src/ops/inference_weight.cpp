#include "qkv/ops/inference_weight.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "dispatch.h"
#include "kernels/cpu/gemm_int8.h"
#include "packed_copy.h"
#include "qkv/core/error.h"

namespace qkv {

int int8_activation_bits() { return kernels::cpu::int8_activation_bits(); }
bool int8_full_range_available() { return kernels::cpu::int8_full_range_available(); }
void set_int8_activation_bits(int bits) { kernels::cpu::set_int8_activation_bits(bits); }

QuantizedRows QuantizedRows::quantize(const Tensor& weight) {
  QKV_CHECK(weight.dim() == 2 && weight.dtype() == DType::f32, "QuantizedRows::quantize: needs an f32 matrix, got ",
            shape_str(weight.shape()), " ", dtype_name(weight.dtype()));
  Tensor w = dense(weight);
  QuantizedRows q;
  q.rows = w.size(0), q.cols = w.size(1);
  q.values.resize(static_cast<size_t>(q.rows * q.cols));
  q.scales.resize(static_cast<size_t>(q.rows));
  q.sums.resize(static_cast<size_t>(q.rows));
  QKV_DISPATCH_CPU("quantize", w.device(),
                   k::quantize_rows_int8(q.rows, q.cols, w.data(), q.values.data(), q.scales.data(), q.sums.data()));
  return q;
}

QuantizedRows QuantizedRows::from_tensors(const Tensor& values, const Tensor& scales, const std::string& what) {
  QKV_CHECK(values.dim() == 2 && values.dtype() == DType::i8 && values.device().is_cpu(), what,
            ": the int8 rows must be an i8 matrix [N, K], got ", values.str());
  QKV_CHECK(scales.dim() == 1 && scales.dtype() == DType::f32 && scales.size(0) == values.size(0), what,
            ": the scales must be f32 [", values.size(0), "] (one per row), got ", scales.str());
  QuantizedRows q;
  q.rows = values.size(0), q.cols = values.size(1);
  const Tensor v = values.is_contiguous() ? values : Tensor(values.host_contiguous_copy());
  const auto* w8 = v.data<int8_t>();
  q.values.assign(w8, w8 + q.rows * q.cols);
  q.scales = scales.to_vector();
  q.sums.assign(static_cast<size_t>(q.rows), 0);
  for (int64_t n = 0; n < q.rows; ++n) {
    const float s = q.scales[static_cast<size_t>(n)];
    QKV_CHECK(std::isfinite(s) && s >= 0.f, what, ": row ", n, "'s scale is ", s, " (a scale is finite and >= 0)");
    int32_t sum = 0;
    for (int64_t k = 0; k < q.cols; ++k) {
      const int8_t x = q.values[static_cast<size_t>(n * q.cols + k)];
      // -128 is outside what quantize writes, and outside the kernels' exact-sum bound
      QKV_CHECK(x != -128, what, ": value -128 at [", n, ", ", k, "] (int8 rows hold -127..127)");
      sum += x;
    }
    q.sums[static_cast<size_t>(n)] = sum;
  }
  return q;
}

Tensor QuantizedRows::values_tensor() const {
  return Tensor::from_blob(const_cast<int8_t*>(values.data()), {rows, cols}, DType::i8);
}

Tensor QuantizedRows::scales_tensor() const { return Tensor::from_vector(scales, {rows}); }

namespace {
thread_local GivenInt8Rows* t_given = nullptr;
}

GivenInt8Rows::GivenInt8Rows(Map rows) : rows_(std::move(rows)), outer_(t_given) { t_given = this; }
GivenInt8Rows::~GivenInt8Rows() { t_given = outer_; }

std::shared_ptr<const QuantizedRows> GivenInt8Rows::find(const Tensor& weight) {
  if (!t_given || !weight.defined() || weight.dim() != 2 || weight.offset() != 0) return nullptr;
  auto it = t_given->rows_.find(weight.impl().storage.get());
  if (it == t_given->rows_.end() || it->second->rows != weight.size(0) || it->second->cols != weight.size(1))
    return nullptr;
  return it->second;
}

Tensor QuantizedRows::dequantize() const {
  Tensor out = Tensor::empty({rows, cols});
  float* o = out.data();
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t k = 0; k < cols; ++k)
      o[n * cols + k] = scales[static_cast<size_t>(n)] * static_cast<float>(values[static_cast<size_t>(n * cols + k)]);
  return out;
}

InferenceWeight::InferenceWeight(const Tensor& weight, InferenceWeights kind) : kind_(kind), rows_(weight.size(0)) {
  if (kind == InferenceWeights::bf16) bf16_ = weight.detach().to(DType::bf16);
  if (kind == InferenceWeights::int8) {
    int8_ = GivenInt8Rows::find(weight);  // a quantized file's rows, or W's own
    if (!int8_) int8_ = std::make_shared<const QuantizedRows>(QuantizedRows::quantize(weight));
  }
  if (kind != InferenceWeights::bf16 && weight.device().is_cpu()) packed_ = std::make_shared<PackedCopy>();
}

const PackedCopy* InferenceWeight::packed(const Tensor& weight) const {
  // QKV_PACKED_LINEAR=0 turns the packed copies off, for measuring them side by side
  static const bool enabled = [] {
    const char* v = std::getenv("QKV_PACKED_LINEAR");
    return !(v && std::string(v) == "0");
  }();
  if (!packed_ || !enabled) return nullptr;
  std::lock_guard<std::mutex> lock(packed_->mutex);
  if (!packed_->linear && !packed_->declined && ++packed_->batches >= 2) {
    if (int8_) {
      const int64_t K = int8_->cols;
      packed_->linear = kernels::cpu::pack_linear_s8(rows_, K, int8_->values.data() + row0_ * K, K);
    } else {  // `weight` is this slice's own rows (what linear_inference is given)
      QKV_CHECK(weight.dim() == 2 && weight.dtype() == DType::f32 && weight.device().is_cpu() &&
                    weight.size(0) == rows_,
                "InferenceWeight: the f32 weight ", shape_str(weight.shape()), " is not this copy's ", rows_, " rows");
      const Tensor w = dense(weight);
      const int64_t K = w.size(1);
      packed_->linear = kernels::cpu::pack_linear_f32(rows_, K, w.data(), K);
    }
    packed_->declined = !packed_->linear;
  }
  return packed_->linear ? packed_.get() : nullptr;
}

InferenceWeight InferenceWeight::slice_rows(int64_t begin, int64_t end) const {
  QKV_CHECK(0 <= begin && begin <= end && end <= rows_, "InferenceWeight::slice_rows: [", begin, ", ", end,
            ") outside ", rows_, " rows");
  InferenceWeight s = *this;
  if (bf16_.defined()) s.bf16_ = bf16_.slice(0, begin, end);
  if (packed_) s.packed_ = std::make_shared<PackedCopy>();
  s.row0_ = row0_ + begin, s.rows_ = end - begin;
  return s;
}

}  // namespace qkv
