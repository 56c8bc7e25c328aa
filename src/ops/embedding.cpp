#include "qkv/ops/embedding.h"

#include "qkv/autograd/node.h"
#include "qkv/kernels/cpu/embedding.h"

namespace qkv {

using autograd::record;
namespace k = kernels::cpu;

Tensor embedding(const Tensor& ids, const Tensor& weight, int64_t padding_idx) {
  QKV_CHECK(ids.dtype() == DType::i32, "embedding: ids must be i32, got ", dtype_name(ids.dtype()));
  QKV_CHECK(weight.dim() == 2 && weight.dtype() == DType::f32, "embedding: weight must be an f32 [num_embeddings, dim], got ",
            weight.str());
  const int64_t V = weight.size(0), E = weight.size(1);
  Tensor idc = ids.is_contiguous() ? ids.detach() : ids.contiguous_copy();
  Tensor w = weight.is_contiguous() ? weight.detach() : weight.contiguous_copy();
  Shape out_shape = ids.shape();
  out_shape.push_back(E);
  Tensor out = Tensor::empty(out_shape);
  k::embedding_forward(w.data(), V, E, idc.data<int32_t>(), ids.numel(), out.data());
  return record(out, "embedding", {ids, weight}, [idc, V, E, padding_idx](const Tensor& g) {
    Tensor gc = g.contiguous(), dw = Tensor::zeros({V, E});
    k::embedding_backward(gc.data(), idc.data<int32_t>(), idc.numel(), E, padding_idx, dw.data());
    return std::vector<Tensor>{Tensor(), dw};
  });
}

}  // namespace qkv
