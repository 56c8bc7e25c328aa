// Adam/AdamW, gradient clipping and the learning-rate schedules against torch.optim's formulas:
// golden values computed with PyTorch 1.13 (torch.optim.AdamW / Adam, clip_grad_norm_) by hand
// below, and the schedules' defining points.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <memory>

#include "qkv/ops/adam.h"
#include "qkv/ops/activation.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/autocast.h"
#include "qkv/ops/clip.h"
#include "qkv/ops/matmul.h"
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

// Parameters of many sizes (the empty one, vector tails, more than one launch's 64 on a GPU), a
// gradient of each, some of them strided views.
struct Params {
  std::vector<Tensor> p, g, m, v;
};
Params many_params(uint64_t seed, float grad_scale) {
  Generator gen(seed);
  Params s;
  const int64_t sizes[] = {0, 1, 3, 16, 17, 33, 100, 1000, 4099};
  for (int i = 0; i < 70; ++i) {
    const int64_t n = sizes[i % 9];
    s.p.push_back(Tensor::randn({n}, gen));
    Tensor g = mul(Tensor::randn({n, 2}, gen), grad_scale);
    s.g.push_back(i % 3 == 0 ? g.select(1, 0) : g.select(1, 1).contiguous());  // every third strided
    s.m.push_back(mul(Tensor::rand({n}, gen), 0.1f));
    s.v.push_back(mul(Tensor::rand({n}, gen), 0.01f));
  }
  return s;
}
Params clone(const Params& s) {
  Params c;
  for (size_t i = 0; i < s.p.size(); ++i)
    c.p.push_back(s.p[i].clone()), c.g.push_back(s.g[i].clone()), c.m.push_back(s.m[i].clone()),
        c.v.push_back(s.v[i].clone());
  return c;
}
void expect_bits_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const char* what) {
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> x = a[i].to_vector(), y = b[i].to_vector();
    ASSERT_EQ(x.size(), y.size());
    for (size_t j = 0; j < x.size(); ++j)
      ASSERT_EQ(std::bit_cast<uint32_t>(x[j]), std::bit_cast<uint32_t>(y[j])) << what << " " << i << "[" << j << "]";
  }
}

// A training step's clipping and update as the trainer queues them (clip_coefficient's numbers left
// where the gradients are, then one list update with the factor) give the bits of the step they
// replace: ‖g‖ summed tensor by tensor in double, the gradients scaled in place by the factor, then
// each parameter's own update. With the norm far under max_norm (factor 1) and far over it.
TEST(AdamTest, ListUpdateWithTheClipFactorIsClippingThenEachParametersUpdate) {
  for (float grad_scale : {0.001f, 3.f}) {
    Params a = many_params(7, grad_scale), b = clone(a);
    AdamUpdate u;
    u.lr = 0.01f, u.beta1 = 0.9f, u.beta2 = 0.99f, u.weight_decay = 0.1f;
    for (int step = 1; step <= 3; ++step) {
      u.step = step;
      // the step before: every sum to the host, the gradients scaled in place, an update a parameter
      double squares = 0;
      for (const Tensor& g : a.g) squares += sum_of_squares(g);
      const double norm = std::sqrt(squares), coef = 1.0 / (norm + 1e-6);
      std::vector<Tensor> scaled;
      for (const Tensor& g : a.g) scaled.push_back(g.contiguous().clone());
      if (coef < 1.0)
        for (Tensor& g : scaled) mul_(g, static_cast<float>(coef));
      for (size_t i = 0; i < a.p.size(); ++i) adam_update_(a.p[i], scaled[i], a.m[i], a.v[i], u);
      // the list form
      const Tensor clip = clip_coefficient(b.g, 1.0);
      ASSERT_EQ(clip.shape(), Shape({2}));
      EXPECT_EQ(clip.to_vector()[0], static_cast<float>(norm));
      EXPECT_EQ(clip.to_vector()[1], coef < 1.0 ? static_cast<float>(coef) : 1.f);
      adam_update_(b.p, b.g, b.m, b.v, u, clip.slice(0, 1, 2));
      expect_bits_equal(a.p, b.p, "param");
      expect_bits_equal(a.m, b.m, "exp_avg");
      expect_bits_equal(a.v, b.v, "exp_avg_sq");
    }
    if (grad_scale > 1) {
      EXPECT_LT(clip_coefficient(b.g, 1.0).to_vector()[1], 1.f) << "the factor was never below 1";
    }
  }
}

// The trainer's step with grad_clip: Adam::step(factor) against clip_grad_norm_ then Adam::step().
TEST(AdamTest, StepWithTheClipFactorIsClipGradNormThenStep) {
  Params a = many_params(9, 2.f), b = clone(a);
  auto optimizer = [](Params& s) {
    std::vector<std::pair<std::string, Tensor>> named;
    for (size_t i = 0; i < s.p.size(); ++i) named.emplace_back("p" + std::to_string(i), s.p[i].requires_grad_());
    return Adam(decay_matrices_only(named, 0.1f), AdamOptions{});
  };
  Adam oa = optimizer(a), ob = optimizer(b);
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < a.p.size(); ++i) a.p[i].set_grad(a.g[i].contiguous().clone()), b.p[i].set_grad(b.g[i]);
    const double norm = clip_grad_norm_(a.p, 0.5);
    oa.step();
    const Tensor clip = clip_coefficient(gradients(b.p), 0.5);
    ob.step(clip.slice(0, 1, 2));
    EXPECT_EQ(clip.to_vector()[0], static_cast<float>(norm));
    expect_bits_equal(a.p, b.p, "param");
  }
}

// bf16 autocast's weight copies written by the update (Adam::step(…, &casts)): the next scope lends
// them without casting — the same bits, step after step, as casting at every scope's start — and a
// weight changed outside the optimizer is cast again, alone.
TEST(AdamTest, StepWritesTheBf16CopiesTheNextScopeLends) {
  auto make = [] {
    return std::vector<Tensor>{testing::param({16, 8}, 61), testing::param({16}, 62), testing::param({4, 16}, 63)};
  };
  const Tensor x = testing::param({5, 8}, 64).detach();
  struct Run {
    std::vector<Tensor> w;
    Adam adam;
    AutocastWeights casts;
    std::vector<float> losses;
    Run(std::vector<Tensor> weights, std::vector<ParamGroup> groups)
        : w(weights), adam(std::move(groups), AdamOptions{}), casts(std::move(weights)) {}
  };
  auto run = [&](bool written_by_adam) {
    std::vector<Tensor> w = make();
    std::vector<std::pair<std::string, Tensor>> named = {{"w1", w[0]}, {"b1", w[1]}, {"w2", w[2]}};
    auto r = std::make_unique<Run>(w, decay_matrices_only(named, 0.1f));
    auto step = [&r, &x, written_by_adam] {
      {
        const AutocastWeights::Scope s = r->casts.scope(AutocastDType::bf16);
        Autocast autocast(AutocastDType::bf16);
        Tensor loss = sum(mul(linear(relu(linear(x, r->w[0], r->w[1])), r->w[2]), 0.5f));
        loss.backward();
        r->losses.push_back(loss.item());
      }
      r->adam.step(Tensor(), written_by_adam ? &r->casts : nullptr);
      r->adam.zero_grad();
    };
    for (int i = 0; i < 4; ++i) step();
    const int64_t before = r->casts.casts_made();
    r->w[2].detach().copy_(mul(r->w[2].detach(), 0.5f));  // a change outside the optimizer
    step();
    EXPECT_EQ(r->casts.casts_made() - before, written_by_adam ? 1 : 2) << "the changed weight cast again";
    return r;
  };
  const auto cast = run(false), written = run(true);
  EXPECT_EQ(cast->casts.cast_count(), 2) << "the two matrices";
  EXPECT_EQ(cast->casts.casts_made(), 2 * 4) << "every scope after the first casts both";
  EXPECT_EQ(written->casts.casts_made(), 1) << "only the weight changed outside the optimizer";
  EXPECT_EQ(written->losses, cast->losses);
  expect_bits_equal(written->w, cast->w, "param");
}

TEST(ClipGradNorm, ListErrorsNameTheirInput) {
  Tensor x = Tensor::ones({3}), nan = Tensor::from_vector({1.f, NAN}, {2});
  auto error_of = [](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of([&] { clip_coefficient({x}, NAN); }).find("max_norm"), std::string::npos);
  EXPECT_NE(error_of([&] { clip_coefficient({x}, -1); }).find("max_norm"), std::string::npos);
  EXPECT_NE(error_of([&] { clip_coefficient({x, Tensor()}, 1); }).find("gradient 1"), std::string::npos);
  EXPECT_NE(error_of([&] { clip_coefficient({x.to(DType::bf16)}, 1); }).find("f32"), std::string::npos);
  // a NaN gradient: its norm is NaN and nothing is scaled (the trainer stops on the NaN loss)
  const std::vector<float> c = clip_coefficient({x, nan}, 1.0).to_vector();
  EXPECT_TRUE(std::isnan(c[0]));
  EXPECT_EQ(c[1], 1.f);
  EXPECT_EQ(clip_coefficient({}, 1.0).to_vector(), (std::vector<float>{0.f, 1.f}));
  EXPECT_EQ(clip_coefficient({x}, INFINITY).to_vector()[1], 1.f);  // inf: no clipping
  Tensor p = Tensor::ones({3}), m = Tensor::zeros({3}), v = Tensor::zeros({3});
  EXPECT_NE(error_of([&] { adam_update_({p}, {x, x}, {m}, {v}, AdamUpdate{}); }).find("2 gradients"),
            std::string::npos);
  EXPECT_NE(error_of([&] { adam_update_({p}, {x}, {m}, {v}, AdamUpdate{}, Tensor::ones({2})); }).find("clip_factor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { adam_update_({p}, {Tensor::ones({4})}, {m}, {v}, AdamUpdate{}); }).find("gradient"),
            std::string::npos);
  // bf16 copies: one a parameter (or none), each bf16 of its shape
  EXPECT_NE(error_of([&] {
              adam_update_({p}, {x}, {m}, {v}, AdamUpdate{}, Tensor(), {Tensor::zeros({3}, DType::bf16), Tensor()});
            }).find("2 bf16 copies"),
            std::string::npos);
  for (const Tensor& bad : {Tensor::zeros({3}), Tensor::zeros({4}, DType::bf16)})
    EXPECT_NE(error_of([&] { adam_update_({p}, {x}, {m}, {v}, AdamUpdate{}, Tensor(), {bad}); }).find("bf16 copy"),
              std::string::npos)
        << bad.str();
  EXPECT_EQ(p.to_vector(), std::vector<float>(3, 1.f)) << "a refused update wrote to the parameter";
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
