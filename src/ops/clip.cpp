#include "qkv/ops/clip.h"

#include "dispatch.h"
#include "kernels/cpu/clip.h"

namespace qkv {

Tensor clip_coefficient(const std::vector<Tensor>& grads, double max_norm) {
  QKV_CHECK(max_norm >= 0, "clip_coefficient: max_norm must be a number ≥ 0 (inf: no clipping), got ", max_norm);
  std::vector<const TensorBase*> operands;
  for (const Tensor& g : grads) {
    QKV_CHECK(g.defined() && g.dtype() == DType::f32, "clip_coefficient: gradient ", operands.size(),
              " must be an f32 tensor, got ", g.defined() ? g.str() : std::string("an undefined tensor"));
    operands.push_back(&g);
  }
  const Device d = ops_detail::device_of("clip_coefficient", operands);
  std::vector<Tensor> dense_grads;
  std::vector<const float*> ptr;
  std::vector<int64_t> n;
  for (const Tensor& g : grads) {
    dense_grads.push_back(dense(g));
    ptr.push_back(dense_grads.back().data());
    n.push_back(g.numel());
  }
  Tensor out = Tensor::empty({2}, DType::f32, d);
  QKV_DISPATCH("clip_coefficient", d,
               k::clip_coefficient(ptr.data(), n.data(), static_cast<int64_t>(n.size()), max_norm, out.data()));
  return out;
}

}  // namespace qkv
