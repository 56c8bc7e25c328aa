// Adam/AdamW, gradient clipping and the learning-rate schedules against torch.optim's formulas:
// golden values computed with PyTorch 1.13 (torch.optim.AdamW / Adam, clip_grad_norm_) by hand
// below, and the schedules' defining points.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/train/optim.h"
#include "testing.h"

namespace qkv::train {
namespace {

// One parameter, three steps with fixed gradients; expected values from
//   p = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
//   opt = torch.optim.AdamW([p], lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
//   for g in ([0.5, -1.0, 0.0], [0.1, 0.2, -0.3], [-0.4, 0.0, 0.8]): p.grad = torch.tensor(g); opt.step()
// (and Adam with weight_decay=0.1 for the L2 variant), computed here in double from the formulas;
// the AdamW values PyTorch 2.9 printed are checked too.
std::vector<double> reference(bool decoupled) {
  std::vector<double> p = {1.0, -2.0, 0.5}, m(3, 0), v(3, 0);
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
  const double gs[3][3] = {{0.5, -1.0, 0.0}, {0.1, 0.2, -0.3}, {-0.4, 0.0, 0.8}};
  for (int t = 1; t <= 3; ++t)
    for (int i = 0; i < 3; ++i) {
      double g = gs[t - 1][i];
      if (decoupled) p[i] *= 1 - lr * wd; else g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  return p;
}

void run(bool decoupled) {
  Tensor p = Tensor::from_vector({1.f, -2.f, 0.5f}, {3}).requires_grad_();
  AdamOptions o;
  o.lr = 0.1f, o.beta1 = 0.9f, o.beta2 = 0.99f, o.eps = 1e-8f, o.decoupled_weight_decay = decoupled;
  Adam opt({ParamGroup{{{"p", p}}, 0.1f}}, o);
  const std::vector<std::vector<float>> gs = {{0.5f, -1.f, 0.f}, {0.1f, 0.2f, -0.3f}, {-0.4f, 0.f, 0.8f}};
  for (const auto& g : gs) {
    p.set_grad(Tensor::from_vector(g, {3}));
    opt.step();
  }
  std::vector<double> want = reference(decoupled);
  std::vector<float> got = p.to_vector();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  // Known values printed by PyTorch 1.13 for AdamW (decoupled) — guards the reference itself.
  if (decoupled) {
    EXPECT_NEAR(got[0], 0.78324234f, 2e-6);
    EXPECT_NEAR(got[1], -1.75221503f, 2e-6);
    EXPECT_NEAR(got[2], 0.51918018f, 2e-6);
  }
}

TEST(AdamTest, AdamWMatchesTorchFormula) { run(true); }
TEST(AdamTest, AdamL2MatchesTorchFormula) { run(false); }

TEST(AdamTest, SkipsParametersWithoutGradAndRoundTripsState) {
  Tensor a = Tensor::ones({2, 2}).requires_grad_(), b = Tensor::ones({2}).requires_grad_();
  Adam opt(decay_matrices_only({{"a", a}, {"b", b}}, 0.1f), AdamOptions{});
  a.set_grad(Tensor::ones({2, 2}));
  opt.step();
  EXPECT_EQ(b.to_vector(), std::vector<float>(2, 1.f));
  EXPECT_LT(a.to_vector()[0], 1.f);
  std::map<std::string, Tensor> st;
  for (auto& [n, t] : opt.state()) st[n] = t.clone();
  Adam opt2(decay_matrices_only({{"a", a}, {"b", b}}, 0.1f), AdamOptions{});
  opt2.load_state(st, opt.steps());
  EXPECT_EQ(opt2.steps(), 1);
  st.erase("exp_avg.a");
  EXPECT_THROW(opt2.load_state(st, 1), Error);
}

TEST(ClipGradNorm, ScalesToMaxNorm) {
  Tensor a = Tensor::zeros({2}).requires_grad_(), b = Tensor::zeros({1}).requires_grad_();
  a.set_grad(Tensor::from_vector({3.f, 0.f}, {2}));
  b.set_grad(Tensor::from_vector({4.f}, {1}));
  EXPECT_NEAR(clip_grad_norm_({a, b}, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(a.grad().to_vector()[0], 0.6f, 1e-6);
  EXPECT_NEAR(b.grad().to_vector()[0], 0.8f, 1e-6);
  EXPECT_NEAR(clip_grad_norm_({a, b}, 10.0), 1.0, 1e-5);  // below max: unchanged
  EXPECT_NEAR(b.grad().to_vector()[0], 0.8f, 1e-6);
}

TEST(LrScheduleTest, WarmupCosineAndInverseSqrt) {
  LrSchedule c{Schedule::cosine, 1e-3, 100, 1000, 1e-4, 0};
  EXPECT_NEAR(c.at(0), 1e-5, 1e-12);
  EXPECT_NEAR(c.at(99), 1e-3, 1e-12);
  EXPECT_NEAR(c.at(100), 1e-3, 1e-12);
  EXPECT_NEAR(c.at(550), 0.55e-3, 1e-9);  // half way: (lr + min_lr)/2
  EXPECT_NEAR(c.at(1000), 1e-4, 1e-12);
  EXPECT_NEAR(c.at(5000), 1e-4, 1e-12);
  LrSchedule n{Schedule::inverse_sqrt, 1.0, 4000, 0, 0, 512};
  // paper: peak at step = warmup, d^-0.5 · warmup^-0.5
  EXPECT_NEAR(n.at(3999), std::pow(512.0, -0.5) * std::pow(4000.0, -0.5), 1e-12);
  EXPECT_LT(n.at(1999), n.at(3999));
  EXPECT_LT(n.at(7999), n.at(3999));
  EXPECT_THROW((LrSchedule{Schedule::inverse_sqrt, 1, 0, 0, 0, 512}.at(5)), Error);  // no warm-up
  EXPECT_THROW(parse_enum<Schedule>("bogus"), Error);
}

}  // namespace
}  // namespace qkv::train
