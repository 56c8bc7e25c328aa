#include "qkv/ops/inference_weight.h"

#include <cstdlib>
#include <string>

#include "dispatch.h"
#include "kernels/cpu/gemm_int8.h"
#include "packed_copy.h"
#include "qkv/core/error.h"

namespace qkv {

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
  if (kind == InferenceWeights::int8) int8_ = std::make_shared<const QuantizedRows>(QuantizedRows::quantize(weight));
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
  if (!packed_->linear && ++packed_->batches >= 2) {
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
