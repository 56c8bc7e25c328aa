// embedding(ids, weight): rows of weight [V, E] picked by i32 ids of any shape → [..., E].
// Backward scatter-adds into dweight; the padding_idx row (if ≥ 0) gets no gradient.
#pragma once

#include "qkv/ops/inference_weight.h"
#include "qkv/ops/tensor.h"

namespace qkv {

Tensor embedding(const Tensor& ids, const Tensor& weight, int64_t padding_idx = -1);

// Decoding's lookup (no tape): from the int8 rows when `w` has them, out[…, :] = s[id] · W8[id, :]
// (exactly QuantizedRows::dequantize's rows, so `weight`'s f32 values are never read); from
// `weight` as embedding() otherwise.
Tensor embedding_inference(const Tensor& ids, const Tensor& weight, const InferenceWeight& w);

}  // namespace qkv
