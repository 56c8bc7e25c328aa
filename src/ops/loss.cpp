#include "qkv/ops/loss.h"

#include <cmath>

#include "qkv/autograd/node.h"
#include "qkv/kernels/cpu/cross_entropy.h"

namespace qkv {

using autograd::record;
namespace k = kernels::cpu;

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
  const int64_t N = logits.size(0), C = logits.size(1);
  Tensor x = logits.is_contiguous() ? logits.detach() : logits.contiguous_copy();
  std::vector<int32_t> y = target.to_ints();
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (y[n] == ignore_index) continue;
    QKV_CHECK(y[n] >= 0 && y[n] < C, "cross_entropy: target ", y[n], " at row ", n, " is outside [0, ", C, ")");
    ++count;
  }
  // Fused: the forward keeps each row's log-sum-exp; the backward recomputes p from it.
  Tensor lse = Tensor::empty({N});
  std::vector<float> per_row(N, 0.f);
  const float eps = label_smoothing;
  k::cross_entropy_forward(x.data(), y.data(), N, C, eps, ignore_index, lse.data(), per_row.data());
  Tensor out;
  if (reduction == "none") {
    out = Tensor::from_vector(per_row, {N});
  } else {
    double s = 0;
    for (float v : per_row) s += v;
    // PyTorch: a mean over zero counted rows is NaN; we return 0 with zero gradients instead.
    out = Tensor::scalar(reduction == "sum" ? static_cast<float>(s) : count ? static_cast<float>(s / count) : 0.f);
  }
  return record(out, "cross_entropy", {logits, target}, [x, lse, y, N, C, eps, ignore_index, count, reduction](const Tensor& g) {
    // dlogits_n = (p_n − ε/C − (1 − ε) onehot(y_n)) · scale_n
    std::vector<float> gv = g.to_vector(), scale(N);
    for (int64_t n = 0; n < N; ++n)
      scale[n] = reduction == "none" ? gv[n] : reduction == "sum" ? gv[0] : count ? gv[0] / count : 0.f;
    Tensor dx = Tensor::empty({N, C});
    k::cross_entropy_backward(x.data(), y.data(), lse.data(), scale.data(), N, C, eps, ignore_index, dx.data());
    return std::vector<Tensor>{dx, Tensor()};
  });
}

}  // namespace qkv
