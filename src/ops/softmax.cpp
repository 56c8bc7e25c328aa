#include "qkv/ops/softmax.h"

#include "dispatch.h"
#include "kernels/cpu/softmax.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

namespace {
// softmax (log = false) or log_softmax (log = true) along `dim`: the row kernels run along the last
// dim, so another dim is moved last first (a copy only when it is not already).
Tensor along_dim(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  QKV_CHECK(x.dtype() == DType::f32, name, ": expected an f32 tensor, got ", dtype_name(x.dtype()));
  if (x.dim() == 0) return along_dim(x.reshape({1}), 0, log).reshape({});
  dim = x.wrap_dim(dim);
  const int64_t last = x.dim() - 1;
  if (dim != last) return along_dim(x.transpose(dim, last), last, log).transpose(dim, last);
  const Device d = device_of(name, {&x});
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.shape(), DType::f32, d);
  QKV_DISPATCH(name, d,
               (log ? k::log_softmax_forward : k::softmax_forward)(xc.data(), out.data(), rows, n));
  Tensor saved = out.detach();
  return record(out, name, {x}, [saved, rows, n, log, name, d](const Tensor& g) {
    Tensor gc = g.contiguous(), dx = Tensor::empty(saved.shape(), DType::f32, d);
    QKV_DISPATCH(name, d,
                 (log ? k::log_softmax_backward : k::softmax_backward)(saved.data(), gc.data(), dx.data(), rows, n));
    return std::vector<Tensor>{dx};
  });
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return along_dim(x, dim, false); }

Tensor log_softmax(const Tensor& x, int64_t dim) { return along_dim(x, dim, true); }

Tensor& log_softmax_(Tensor& x) {
  QKV_CHECK(x.dtype() == DType::f32 && x.dim() > 0 && x.is_contiguous() && !x.requires_grad(),
            "log_softmax_: expected a dense f32 tensor that does not require grad, got ", x.str());
  const Device d = device_of("log_softmax_", {&x});
  ++x.impl().storage->writes;
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  QKV_DISPATCH("log_softmax_", d, k::log_softmax_forward(x.data(), x.data(), rows, n));
  return x;
}

// log((1/n) Σ_i exp(x_i)) = m + log Σ_i exp(x_i − m) − log n,  m = max_i x_i   (elementwise)
Tensor log_mean_exp(const std::vector<Tensor>& xs) {
  QKV_CHECK(!xs.empty(), "log_mean_exp: no tensors");
  if (xs.size() == 1) return xs[0];
  const Device d = device_of("log_mean_exp", {&xs[0]});
  std::vector<Tensor> operands;
  for (const Tensor& t : xs) {
    QKV_CHECK(t.dtype() == DType::f32 && t.shape() == xs[0].shape(), "log_mean_exp: tensors ", xs[0].str(), " and ",
              t.str(), " differ");
    device_of("log_mean_exp", {&xs[0], &t});
    operands.push_back(dense(t));
  }
  Tensor out = Tensor::empty(xs[0].shape(), DType::f32, d);
  std::vector<const float*> in;
  for (const Tensor& t : operands) in.push_back(t.data<float>());
  QKV_DISPATCH("log_mean_exp", d,
               k::log_mean_exp(in.data(), static_cast<int64_t>(in.size()), out.data<float>(), out.numel()));
  return out;
}

}  // namespace qkv
