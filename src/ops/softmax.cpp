#include "qkv/ops/softmax.h"

#include "qkv/autograd/node.h"
#include "qkv/kernels/cpu/softmax.h"

namespace qkv {

using autograd::record;
namespace k = kernels::cpu;

namespace {
// Runs a row kernel along `dim` by moving that dim last (a copy only when it is not already).
template <typename Fwd, typename Bwd>
Tensor along_dim(const Tensor& x, int64_t dim, const char* name, Fwd fwd, Bwd bwd) {
  QKV_CHECK(x.dtype() == DType::f32, name, ": expected an f32 tensor, got ", dtype_name(x.dtype()));
  if (x.dim() == 0) return along_dim(x.reshape({1}), 0, name, fwd, bwd).reshape({});
  dim = x.wrap_dim(dim);
  const int64_t last = x.dim() - 1;
  if (dim != last) return along_dim(x.transpose(dim, last), last, name, fwd, bwd).transpose(dim, last);
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  Tensor xc = x.is_contiguous() ? x.detach() : x.contiguous_copy();
  Tensor out = Tensor::empty(x.shape());
  fwd(xc.data(), out.data(), rows, n);
  Tensor saved = out.detach();
  return record(out, name, {x}, [saved, rows, n, bwd](const Tensor& g) {
    Tensor gc = g.contiguous(), dx = Tensor::empty(saved.shape());
    bwd(saved.data(), gc.data(), dx.data(), rows, n);
    return std::vector<Tensor>{dx};
  });
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return along_dim(x, dim, "softmax", k::softmax_forward, k::softmax_backward);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return along_dim(x, dim, "log_softmax", k::log_softmax_forward, k::log_softmax_backward);
}

}  // namespace qkv
