#include "qkv/ops/topk.h"

#include <vector>

#include "dispatch.h"
#include "kernels/cpu/index.h"
#include "kernels/cpu/topk.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

// (torch's k is `count` here: k names the device's kernels in QKV_DISPATCH)
TopK topk(const Tensor& x, int64_t count) {
  QKV_CHECK(x.dtype() == DType::f32 && x.dim() >= 1, "topk: expected an f32 tensor of at least one dim, got ", x.str());
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  QKV_CHECK(count >= 0 && count <= n, "topk: k = ", count, " is out of range for a last dim of ", n, " (", x.str(), ")");
  QKV_CHECK(n < (int64_t{1} << 31), "topk: a last dim of ", n, " entries; indices are i32");
  const Device d = device_of("topk", {&x});
  Shape shape = x.shape();
  shape.back() = count;
  Tensor xc = dense(x), values = Tensor::empty(shape, DType::f32, d), indices = Tensor::empty(shape, DType::i32, d);
  if (rows && count)
    QKV_DISPATCH("topk", d, k::topk(xc.data(), rows, n, count, values.data(), indices.data<int32_t>()));
  const Shape in_shape = x.shape();
  Tensor picked = indices.detach();
  values = record(values, "topk", {x}, [in_shape, picked, rows, n, count, d](const Tensor& g) {
    // positions r·n + indices[r, j] of the flattened x, on the host for index_add
    const Tensor at = picked.to(Device::cpu());
    std::vector<int64_t> flat(static_cast<size_t>(rows * count));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < count; ++j)
        flat[static_cast<size_t>(r * count + j)] = r * n + at.data<int32_t>()[r * count + j];
    Tensor gc = g.contiguous(), dx = Tensor::zeros(in_shape, DType::f32, d);
    if (!flat.empty())
      QKV_DISPATCH("topk", d, k::index_add(dx.data(), 1, rows * n, 1, flat.data(), rows * count, gc.data()));
    return std::vector<Tensor>{dx};
  });
  return {values, indices};
}

}  // namespace qkv
