#include "qkv/ops/loss.h"

#include <cmath>

#include "dispatch.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "qkv/autograd/node.h"

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
  int64_t count = 0, bad = -1;
  QKV_DISPATCH("cross_entropy", d, count = k::count_targets(y.data<int32_t>(), N, C, ignore_index, &bad));
  QKV_CHECK(bad < 0, "cross_entropy: target ", bad < 0 ? 0 : y.slice(0, bad, bad + 1).to_ints()[0], " at row ", bad,
            " is outside [0, ", C, ")");
  // Fused: the forward keeps each row's log-sum-exp; the backward recomputes p from it.
  Tensor lse = Tensor::empty({N}, DType::f32, d);
  Tensor per_row = Tensor::zeros({N}, DType::f32, d);
  const float eps = label_smoothing;
  QKV_DISPATCH("cross_entropy", d,
               k::cross_entropy_forward(x.data(), y.data<int32_t>(), N, C, eps, ignore_index, lse.data(), per_row.data()));
  Tensor out;
  if (reduction == "none") {
    out = per_row;
  } else {
    double s = 0;
    QKV_DISPATCH("cross_entropy", d, s = k::sum_f64(per_row.data(), N));
    // PyTorch: a mean over zero counted rows is NaN; we return 0 with zero gradients instead.
    out = Tensor::scalar(reduction == "sum" ? static_cast<float>(s) : count ? static_cast<float>(s / count) : 0.f).to(d);
  }
  return record(out, "cross_entropy", {logits, target}, [x, lse, y, N, C, eps, ignore_index, count, reduction, d](const Tensor& g) {
    // dlogits_n = (p_n − ε/C − (1 − ε) onehot(y_n)) · scale_n
    std::vector<float> gv = g.to_vector(), sv(N);
    for (int64_t n = 0; n < N; ++n)
      sv[n] = reduction == "none" ? gv[n] : reduction == "sum" ? gv[0] : count ? gv[0] / count : 0.f;
    Tensor scale = Tensor::from_vector(sv, {N}).to(d), dx = Tensor::empty({N, C}, DType::f32, d);
    QKV_DISPATCH("cross_entropy", d,
                 k::cross_entropy_backward(x.data(), y.data<int32_t>(), lse.data(), scale.data(), N, C, eps,
                                           ignore_index, dx.data()));
    return std::vector<Tensor>{dx, Tensor()};
  });
}

}  // namespace qkv
