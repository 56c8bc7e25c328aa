#include "qkv/ops/loss.h"

#include <cmath>

#include "dispatch.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/autocast.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, float label_smoothing,
                     const std::string& reduction) {
  QKV_CHECK(logits.dim() == 2 && logits.dtype() == DType::f32, "cross_entropy: logits must be f32 [N, C], got ",
            logits.str());
  QKV_CHECK(target.dtype() == DType::i32 && target.dim() == 1 && target.size(0) == logits.size(0),
            "cross_entropy: target must be i32 [", logits.size(0), "], got ", target.str());
  QKV_CHECK(label_smoothing >= 0.f && label_smoothing <= 1.f, "cross_entropy: label_smoothing must be in [0, 1], got ",
            label_smoothing);
  QKV_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none",
            "cross_entropy: reduction must be mean, sum or none, got ", reduction);
  const Device d = device_of("cross_entropy", {&logits, &target});
  const int64_t N = logits.size(0), C = logits.size(1);
  Tensor x = dense(logits);
  Tensor y = dense(target);
  // (on a GPU a bad target is reported at the host's next wait for it: the step goes on meanwhile)
  QKV_DISPATCH("cross_entropy", d, k::check_targets(y.data<int32_t>(), N, C, ignore_index));
  // Fused: the forward keeps each row's log-sum-exp; the backward recomputes p from it.
  Tensor lse = Tensor::empty({N}, DType::f32, d);
  Tensor per_row = Tensor::zeros({N}, DType::f32, d);
  const float eps = label_smoothing;
  QKV_DISPATCH("cross_entropy", d,
               k::cross_entropy_forward(x.data(), y.data<int32_t>(), N, C, eps, ignore_index, lse.data(), per_row.data()));
  // The reduction and the backward's divisor stay on the device: no host read in a training step.
  Tensor out = per_row, divisor;
  if (reduction != "none") {
    out = Tensor::empty({}, DType::f32, d);
    divisor = Tensor::empty({1}, DType::f32, d);
    QKV_DISPATCH("cross_entropy", d,
                 k::cross_entropy_reduce(per_row.data(), y.data<int32_t>(), N, ignore_index, reduction == "mean",
                                         out.data(), divisor.data()));
  }
  return record(out, "cross_entropy", {logits, target}, [x, lse, y, N, C, eps, ignore_index, divisor, d](const Tensor& g) {
    // dlogits_n = (p_n − ε/C − (1 − ε) onehot(y_n)) · g_n / divisor   (g_n: g[n] for "none", else g[0])
    const Tensor gd = dense(g);
    Tensor dx = Tensor::empty({N, C}, DType::f32, d);
    // dx's bf16 copy, for the output layer's backward GEMMs, when the step's AutocastWeights scope wants it
    Tensor dx16 =
        AutocastWeights::copy_wanted("cross_entropy backward") ? Tensor::empty({N, C}, DType::bf16, d) : Tensor();
    QKV_DISPATCH("cross_entropy", d,
                 k::cross_entropy_backward(x.data(), y.data<int32_t>(), lse.data(), gd.data(), divisor.defined() ? 0 : 1,
                                           divisor.defined() ? divisor.data() : nullptr, N, C, eps, ignore_index,
                                           dx.data(), dx16.defined() ? dx16.data<bf16>() : nullptr));
    AutocastWeights::lend_copy("cross_entropy backward", dx, dx16);
    return std::vector<Tensor>{dx, Tensor()};
  });
}

}  // namespace qkv
