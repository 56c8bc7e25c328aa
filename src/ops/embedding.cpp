#include "qkv/ops/embedding.h"

#include "dispatch.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm_int8.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

// out[…, :] = weight[ids[…], :];  dweight[v, :] = Σ_{ids[…] = v} dout[…, :]  (none for padding_idx)
Tensor embedding(const Tensor& ids, const Tensor& weight, int64_t padding_idx) {
  QKV_CHECK(ids.dtype() == DType::i32, "embedding: ids must be i32, got ", dtype_name(ids.dtype()));
  QKV_CHECK(weight.dim() == 2 && weight.dtype() == DType::f32, "embedding: weight must be an f32 [num_embeddings, dim], got ",
            weight.str());
  const Device d = device_of("embedding", {&ids, &weight});
  const int64_t V = weight.size(0), E = weight.size(1);
  Tensor idc = dense(ids);
  Tensor w = dense(weight);
  Shape out_shape = ids.shape();
  out_shape.push_back(E);
  Tensor out = Tensor::empty(out_shape, DType::f32, d);
  QKV_DISPATCH("embedding", d, k::embedding_forward(w.data(), V, E, idc.data<int32_t>(), ids.numel(), out.data()));
  return record(out, "embedding", {ids, weight}, [idc, V, E, padding_idx, d](const Tensor& g) {
    Tensor gc = g.contiguous(), dw = Tensor::zeros({V, E}, DType::f32, d);
    QKV_DISPATCH("embedding", d,
                 k::embedding_backward(gc.data(), idc.data<int32_t>(), idc.numel(), E, V, padding_idx, dw.data()));
    return std::vector<Tensor>{Tensor(), dw};
  });
}

Tensor embedding_inference(const Tensor& ids, const Tensor& weight, const InferenceWeight& w) {
  const QuantizedRows* q = w.int8();
  if (!q) return embedding(ids, weight);
  QKV_CHECK(ids.dtype() == DType::i32, "embedding: ids must be i32, got ", dtype_name(ids.dtype()));
  QKV_CHECK(weight.dim() == 2 && q->rows == weight.size(0) && q->cols == weight.size(1) && w.row_begin() == 0,
            "embedding_inference: the int8 rows ", q->rows, "x", q->cols, " are not weight ", shape_str(weight.shape()));
  const Device d = ops_detail::cpu_device_of("embedding", {&ids});
  Tensor idc = dense(ids);
  Shape out_shape = ids.shape();
  out_shape.push_back(q->cols);
  Tensor out = Tensor::empty(out_shape, DType::f32, d);  // [..., E]
  QKV_DISPATCH_CPU("embedding", d,
                   k::embedding_int8(q->values.data(), q->scales.data(), q->rows, q->cols, idc.data<int32_t>(),
                                     idc.numel(), out.data()));
  return out;
}

}  // namespace qkv
