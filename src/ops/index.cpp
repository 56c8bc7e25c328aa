#include "qkv/ops/index.h"

#include "dispatch.h"
#include "kernels/cpu/index.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

Tensor index_select(const Tensor& t, int64_t dim, const std::vector<int64_t>& index) {
  const Device d = device_of("index_select", {&t});
  dim = t.wrap_dim(dim);
  const int64_t n = t.size(dim), n_index = static_cast<int64_t>(index.size());
  for (int64_t i : index)
    QKV_CHECK(i >= 0 && i < n, "index_select: index ", i, " is out of range for dim ", dim, " of size ", n, " (",
              t.str(), ")");
  Tensor src = dense(t);
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < dim; ++k) outer *= t.size(k);
  for (int64_t k = dim + 1; k < t.dim(); ++k) inner *= t.size(k);
  Shape out_shape = t.shape();
  out_shape[dim] = n_index;
  Tensor out = Tensor::empty(out_shape, t.dtype(), d);
  const int64_t row_bytes = inner * static_cast<int64_t>(dtype_size(t.dtype()));
  QKV_DISPATCH("index_select", d,
               k::index_select(static_cast<const uint8_t*>(src.impl().storage->ptr()) + src.offset() * dtype_size(t.dtype()),
                               outer, n, row_bytes, index.data(), n_index,
                               static_cast<uint8_t*>(out.impl().storage->data)));
  if (t.dtype() != DType::f32) return out;
  const Shape in_shape = t.shape();
  return record(out, "index_select", {t}, [in_shape, index, outer, n, inner, n_index, d](const Tensor& g) {
    Tensor gc = g.contiguous(), dt = Tensor::zeros(in_shape, DType::f32, d);
    QKV_DISPATCH("index_select", d, k::index_add(dt.data(), outer, n, inner, index.data(), n_index, gc.data()));
    return std::vector<Tensor>{dt};
  });
}

}  // namespace qkv
