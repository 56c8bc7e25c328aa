// linear_cross_entropy (ops/loss.h) against the form it replaces, cross_entropy(linear(x, W, b), y):
// one chunk gives its bits, forward and backward, in f32 and under Autocast(bf16); chunks of a few
// rows give its numbers within rounding; the logits are never whole (the peak of live bytes); a loss
// gradient other than 1, an all-ignored batch, no rows, and the refusals. (Golden cases against
// PyTorch, finite differences and the GPU against the CPU: the op table, tests/ops/op_table.cpp.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/qkv.h"
#include "testing.h"

namespace qkv {
namespace {

struct Result {
  std::vector<float> loss, dx, dw, db;
};

// One forward and backward of the fused or the unfused form (`scale`: the loss's gradient).
Result run(bool fused, int64_t N, int64_t d, int64_t C, const std::vector<int32_t>& y, float eps,
           const std::string& reduction, int64_t chunk_rows, float scale = 1.f, bool bias = true) {
  Tensor x = testing::param({N, d}, 41), w = testing::param({C, d}, 42, 0.3f);
  Tensor b = bias ? testing::param({C}, 43) : Tensor();
  const Tensor t = Tensor::from_ints(y, {N});
  Tensor loss = fused ? linear_cross_entropy(x, w, t, b, -100, eps, reduction, chunk_rows)
                      : cross_entropy(linear(x, w, b), t, -100, eps, reduction);
  (scale == 1.f ? loss : mul(loss, scale)).backward();
  return {loss.to_vector(), x.grad().to_vector(), w.grad().to_vector(), bias ? b.grad().to_vector() : std::vector<float>{}};
}

std::vector<int32_t> targets(int64_t N, int64_t C) {  // every seventh ignored
  std::vector<int32_t> y(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) y[static_cast<size_t>(n)] = n % 7 == 3 ? -100 : static_cast<int32_t>((n * 37 + 5) % C);
  return y;
}

TEST(LinearCrossEntropy, OneChunkIsTheLinearThenTheLossBitForBit) {
  const int64_t N = 61, d = 24, C = 1003;  // C: vector loops and a tail
  for (const char* reduction : {"mean", "sum"})
    for (float eps : {0.f, 0.1f})
      for (bool bf16 : {false, true}) {
        Autocast autocast(bf16 ? AutocastDType::bf16 : AutocastDType::f32);
        const Result want = run(false, N, d, C, targets(N, C), eps, reduction, 0);
        const Result got = run(true, N, d, C, targets(N, C), eps, reduction, 0);  // 61 rows < 512: one chunk
        const std::string at = std::string(reduction) + " ε " + std::to_string(eps) + (bf16 ? " bf16" : " f32");
        EXPECT_EQ(got.loss, want.loss) << at;
        EXPECT_EQ(got.dx, want.dx) << at;
        EXPECT_EQ(got.dw, want.dw) << at;
        EXPECT_EQ(got.db, want.db) << at;
      }
}

TEST(LinearCrossEntropy, ChunksGiveTheSameNumbers) {
  const int64_t N = 83, d = 16, C = 517;
  for (bool bf16 : {false, true}) {
    Autocast autocast(bf16 ? AutocastDType::bf16 : AutocastDType::f32);
    const Result want = run(false, N, d, C, targets(N, C), 0.1f, "mean", 0);
    for (int64_t chunk : {1, 7, 40, 82}) {
      const Result got = run(true, N, d, C, targets(N, C), 0.1f, "mean", chunk);
      const std::string at = "chunks of " + std::to_string(chunk) + (bf16 ? " bf16" : " f32");
      EXPECT_LT(testing::rel_error(got.loss, want.loss), 1e-6) << at;
      EXPECT_LT(testing::rel_error(got.dx, want.dx), 1e-5) << at;
      EXPECT_LT(testing::rel_error(got.dw, want.dw), 1e-5) << at;
      EXPECT_LT(testing::rel_error(got.db, want.db), 1e-5) << at;
    }
  }
}

// The backward multiplies the gradients the forward made by the loss's gradient.
TEST(LinearCrossEntropy, TheLossGradientScalesTheGradients) {
  const int64_t N = 29, d = 8, C = 40;
  const Result want = run(false, N, d, C, targets(N, C), 0.f, "sum", 0, -2.5f, false);
  const Result got = run(true, N, d, C, targets(N, C), 0.f, "sum", 5, -2.5f, false);
  EXPECT_LT(testing::rel_error(got.dx, want.dx), 1e-5);
  EXPECT_LT(testing::rel_error(got.dw, want.dw), 1e-5);
}

// The logits are never whole: at 4,096 rows × 8,000 classes (131 MB of them, as much again for their
// gradient) the live bytes peak near a chunk's (2²³ elements, rounded up to 64 rows: 1,088 rows, 35 MB)
// and the gradients' (no second copy of dW: the backward scales the forward's in place).
TEST(LinearCrossEntropy, TheLogitsAreNeverWhole) {
  const int64_t N = 4096, d = 64, C = 8000;
  Tensor x = testing::param({N, d}, 44), w = testing::param({C, d}, 45, 0.1f);
  const Tensor y = Tensor::from_ints(targets(N, C), {N});
  const int64_t logits_bytes = N * C * 4, inputs = allocated_bytes();
  reset_peak_bytes();
  linear_cross_entropy(x, w, y).backward();
  const int64_t peak = peak_allocated_bytes() - inputs;
  // the gradients of x and W, a chunk's logits
  const int64_t chunk_rows = ((int64_t{1} << 23) / C + 63) / 64 * 64;
  const int64_t expected = (N * d + C * d) * 4 + chunk_rows * C * 4;
  EXPECT_LT(peak, logits_bytes / 3) << peak;
  EXPECT_LT(peak, expected + (int64_t{1} << 20)) << peak;
}

// No gradient wanted (no grad mode): the loss alone, the same number.
TEST(LinearCrossEntropy, WithoutGradientsTheLossAlone) {
  const int64_t N = 50, d = 12, C = 300;
  Tensor x = testing::param({N, d}, 46), w = testing::param({C, d}, 47, 0.3f);
  const Tensor y = Tensor::from_ints(targets(N, C), {N});
  const float want = cross_entropy(linear(x, w), y).item();
  NoGradGuard no_grad;
  const Tensor loss = linear_cross_entropy(x, w, y, Tensor(), -100, 0.f, "mean", 9);
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_NEAR(loss.item(), want, 1e-6 * std::abs(want));
}

// Every target ignored: loss 0 and zero gradients (cross_entropy's convention); no rows at all too.
TEST(LinearCrossEntropy, EveryRowIgnoredAndNoRows) {
  for (int64_t N : {5, 0}) {
    Tensor x = testing::param({N, 4}, 48), w = testing::param({6, 4}, 49), b = testing::param({6}, 50);
    linear_cross_entropy(x, w, Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(N), -100), {N}), b, -100,
                         0.1f, "mean", 2)
        .backward();
    for (const Tensor& g : {x.grad(), w.grad(), b.grad()})
      for (float v : g.to_vector()) EXPECT_EQ(v, 0.f) << "N " << N;
  }
}

// The gradients the forward made go to the first backward (scaled in place: no second copy of dW); a
// second one through the same graph is an error, not gradients scaled twice.
TEST(LinearCrossEntropy, ASecondBackwardIsRefused) {
  Tensor x = testing::param({6, 4}, 55), w = testing::param({5, 4}, 56);
  const Tensor loss = mul(linear_cross_entropy(x, w, Tensor::from_ints({0, 1, 4, 2, 3, 1}, {6})), 3.f);
  autograd::backward(loss, Tensor(), /*retain_graph=*/true);
  const std::vector<float> first = w.grad().to_vector();
  const std::string e = testing::error_of([&] { autograd::backward(loss, Tensor(), true); });
  EXPECT_NE(e.find("linear_cross_entropy: a second backward through it (retain_graph)"), std::string::npos) << e;
  EXPECT_EQ(w.grad().to_vector(), first);
}

TEST(LinearCrossEntropy, RefusesWhatItCannotDo) {
  const Tensor x = testing::param({3, 4}, 51), w = testing::param({5, 4}, 52), y = Tensor::from_ints({0, 1, 4}, {3});
  auto refused = [](const std::function<void()>& f, const std::string& want) {
    const std::string e = testing::error_of(f);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  refused([&] { linear_cross_entropy(x, w, y, Tensor(), -100, 0.f, "none"); },
          "linear_cross_entropy: reduction must be mean or sum, got none");
  refused([&] { linear_cross_entropy(x, testing::param({5, 3}, 53), y); }, "linear_cross_entropy: weight must be f32 [C, 4]");
  refused([&] { linear_cross_entropy(x, w, Tensor::from_ints({0, 1}, {2})); }, "linear_cross_entropy: target must be i32 [3]");
  refused([&] { linear_cross_entropy(x, w, y, testing::param({4}, 54)); }, "linear_cross_entropy: bias must be f32 [5]");
  refused([&] { linear_cross_entropy(x, w, Tensor::from_ints({0, 5, 1}, {3})); },
          "cross_entropy: target 5 at row 1 is outside [0, 5)");
  refused([&] { linear_cross_entropy(x, w, y, Tensor(), -100, 0.f, "mean", -1); }, "chunk_rows must be ≥ 0");
}

}  // namespace
}  // namespace qkv
