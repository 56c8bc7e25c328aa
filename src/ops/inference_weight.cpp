#include "qkv/ops/inference_weight.h"

#include "dispatch.h"
#include "kernels/cpu/gemm_int8.h"
#include "qkv/core/error.h"

namespace qkv {

QuantizedRows QuantizedRows::quantize(const Tensor& weight) {
  QKV_CHECK(weight.dim() == 2 && weight.dtype() == DType::f32, "QuantizedRows::quantize: needs an f32 matrix, got ",
            shape_str(weight.shape()), " ", dtype_name(weight.dtype()));
  Tensor w = weight.detach().contiguous();
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
}

InferenceWeight InferenceWeight::slice_rows(int64_t begin, int64_t end) const {
  QKV_CHECK(0 <= begin && begin <= end && end <= rows_, "InferenceWeight::slice_rows: [", begin, ", ", end,
            ") outside ", rows_, " rows");
  InferenceWeight s = *this;
  if (bf16_.defined()) s.bf16_ = bf16_.slice(0, begin, end);
  s.row0_ = row0_ + begin, s.rows_ = end - begin;
  return s;
}

}  // namespace qkv
