#include "qkv/ops/embedding.h"

#include "dispatch.h"
#include "kernels/cpu/embedding.h"
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
                 k::embedding_backward(gc.data(), idc.data<int32_t>(), idc.numel(), E, padding_idx, dw.data()));
    return std::vector<Tensor>{Tensor(), dw};
  });
}

}  // namespace qkv
