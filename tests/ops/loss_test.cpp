// The fused cross-entropy kernel at a width its vector loop covers (C = 1000 + a 7-wide tail;
// the golden cases use small C) against a double-precision reference written from the formula:
//   ℓ_n = −(1 − ε) log p_{n,y} − (ε/C) Σ_c log p_{n,c};   dx_n = (p_n − ε/C − (1 − ε) onehot(y_n)) / count
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/qkv.h"
#include "testing.h"

namespace qkv {
namespace {

TEST(CrossEntropyKernel, WideRowsMatchTheFormula) {
  const int64_t N = 6, C = 1007;
  const float eps = 0.1f;
  Tensor logits = testing::param({N, C}, 31, 4.f);
  std::vector<int32_t> y = {3, 1006, -100, 500, 0, 17};
  Tensor loss = cross_entropy(logits, Tensor::from_ints(y, {N}), -100, eps);
  loss.backward();
  std::vector<float> x = logits.to_vector(), dx = logits.grad().to_vector();
  double total = 0, worst_grad = 0;
  const int count = 5;
  for (int64_t n = 0; n < N; ++n) {
    double m = -INFINITY, s = 0, sum_logp = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max<double>(m, x[n * C + c]);
    for (int64_t c = 0; c < C; ++c) s += std::exp(x[n * C + c] - m);
    const double lse = m + std::log(s);
    for (int64_t c = 0; c < C; ++c) sum_logp += x[n * C + c] - lse;
    for (int64_t c = 0; c < C; ++c) {
      double want = 0;
      if (y[n] != -100) want = (std::exp(x[n * C + c] - lse) - eps / C - (c == y[n] ? 1 - eps : 0)) / count;
      worst_grad = std::max(worst_grad, std::abs(want - dx[n * C + c]));
    }
    if (y[n] != -100) total += -(1 - eps) * (x[n * C + y[n]] - lse) - eps / C * sum_logp;
  }
  EXPECT_NEAR(loss.item(), total / count, 1e-5 * std::abs(total / count));
  EXPECT_LT(worst_grad, 1e-7);
}

// The reduction and its divisor stay on the logits' device; a batch whose every target is ignored
// has loss 0 and zero gradients (PyTorch: NaN), under every reduction; a sum's gradient is not divided.
TEST(CrossEntropyKernel, EveryRowIgnoredAndTheSumsGradient) {
  for (const char* reduction : {"mean", "sum", "none"}) {
    Tensor logits = testing::param({3, 5}, 32);
    Tensor loss = cross_entropy(logits, Tensor::from_ints({-100, -100, -100}, {3}), -100, 0.1f, reduction);
    sum(loss).backward();
    for (float v : loss.to_vector()) EXPECT_EQ(v, 0.f) << reduction;
    for (float v : logits.grad().to_vector()) EXPECT_EQ(v, 0.f) << reduction;
  }
  Tensor a = testing::param({4, 7}, 33), b = testing::param({4, 7}, 33);
  const Tensor y = Tensor::from_ints({1, 6, -100, 0}, {4});
  mul(cross_entropy(a, y, -100, 0.f, "sum"), 2.f).backward();
  cross_entropy(b, y, -100, 0.f, "mean").backward();
  const std::vector<float> ga = a.grad().to_vector(), gb = b.grad().to_vector();
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_FLOAT_EQ(ga[i], 2.f * 3.f * gb[i]) << i;
}

// A target outside [0, C) that is not ignore_index names itself and its row.
TEST(CrossEntropyKernel, ABadTargetIsAClearError) {
  const std::string e = testing::error_of(
      [] { cross_entropy(testing::param({4, 5}, 34), Tensor::from_ints({1, -100, 5, -3}, {4}), -100); });
  EXPECT_NE(e.find("cross_entropy: target 5 at row 2 is outside [0, 5)"), std::string::npos) << e;
}

}  // namespace
}  // namespace qkv
