// The captioner (Show, Attend and Tell, issue 24): teacher forcing equals step-by-step decoding,
// cached and recomputed decoding choose the same tokens, the attention over the grid is a
// distribution, the doubly stochastic term and its gradient match their formula, the image gradient
// passes finite differences, a small captioner learns a one-object caption set, and bad configs are
// clear errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qkv/decode/search.h"
#include "qkv/decode/translator.h"
#include "qkv/models/registry.h"
#include "qkv/nn/captioner.h"
#include "qkv/ops.h"
#include "qkv/ops/gradcheck.h"
#include "qkv/train/optim.h"
#include "testing.h"

namespace qkv::nn {
namespace {

using nlohmann::json;

// 8×8 one-channel images, a two-stage trunk (8×8 → a 4×4 grid of 4-vectors), a small decoder.
json tiny(json extra = json::object()) {
  json j = {{"image_height", 8}, {"image_width", 8}, {"channels", {3, 4}}, {"blocks", {1, 1}},
            {"vocab_size", 11}, {"embedding_dim", 6},  {"hidden_size", 7},  {"dropout", 0.0},
            {"max_len", 8}};
  j.update(extra);
  return j;
}

Tensor images(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n * 64));
  for (size_t i = 0; i < v.size(); ++i) v[i] = Generator::uniform(seed, i);
  return Tensor::from_vector(v, {n, 1, 8, 8});
}

Tensor tgt_in() { return Tensor::from_ints({2, 5, 6, 7, 2, 8, 9, 0}, {2, 4}); }
Tensor tgt_out() { return Tensor::from_ints({5, 6, 7, 3, 8, 9, 3, 0}, {2, 4}); }

TEST(Captioner, TeacherForcingEqualsStepByStepDecodingAndAttentionIsADistribution) {
  for (json extra : {json::object(), json{{"gate", false}}, json{{"attention", "none"}, {"gate", false}},
                     json{{"grid_positions", true}}}) {
    SCOPED_TRACE(extra.dump());
    Generator g(5);
    auto m = models::build_seq2seq("captioner", tiny(extra), &g);
    EXPECT_EQ(m->source_image().height, 8);
    m->module().eval();
    NoGradGuard no_grad;
    AttentionMaps maps;
    const Tensor x = images(2, 1);
    const Tensor full = log_softmax(m->forward(x, tgt_in(), &maps), -1);  // [2, 4, V]
    auto state = m->start_decoding(x);
    const std::vector<int32_t> t = tgt_in().to_ints();
    for (int64_t i = 0; i < 4; ++i) {
      const Tensor lp = m->step({t[static_cast<size_t>(i)], t[static_cast<size_t>(4 + i)]}, *state);
      EXPECT_TENSOR_NEAR(lp, full.select(1, i), 2e-5);
    }
    if (extra.contains("attention")) {
      EXPECT_TRUE(maps.cross.empty());
      continue;
    }
    // α: [B, 1, T, L] over the 4×4 grid, every row a distribution
    ASSERT_EQ(maps.cross.size(), 1u);
    EXPECT_EQ(maps.cross[0].shape(), (Shape{2, 1, 4, 16}));
    ASSERT_EQ(maps.image_grids.size(), 1u);
    const ImageGrid& grid = maps.image_grids[0];
    EXPECT_EQ(grid.height, 4);
    EXPECT_EQ(grid.width, 4);
    EXPECT_EQ(grid.key_height * grid.key_width, 16);
    const std::vector<float> w = maps.cross[0].contiguous().to_vector();
    for (int64_t row = 0; row < 8; ++row) {
      double s = 0;
      for (int64_t j = 0; j < 16; ++j) {
        s += w[static_cast<size_t>(row * 16 + j)];
        EXPECT_GT(w[static_cast<size_t>(row * 16 + j)], 0.f);
      }
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
  }
}

TEST(Captioner, CachedAndRecomputedDecodingChooseTheSameTokens) {
  Generator g(3);
  auto m = models::build_seq2seq("captioner", tiny(), &g);
  m->module().eval();
  const Tensor x = images(3, 2);
  for (int64_t beam : {1, 3}) {
    decode::SearchOptions o;
    o.beam_size = beam;
    std::vector<std::vector<int32_t>> got[2];
    std::vector<double> scores[2];
    for (int cached = 0; cached < 2; ++cached) {
      decode::Seq2SeqStepModel sm(*m, x, cached == 1);
      const auto hyps = beam == 1 ? decode::greedy_search(sm, {7, 7, 7}, o) : decode::beam_search(sm, {7, 7, 7}, o);
      for (const auto& h : hyps) got[cached].push_back(h.tokens), scores[cached].push_back(h.score);
    }
    EXPECT_EQ(got[0], got[1]) << "beam " << beam;
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(scores[0][i], scores[1][i], 1e-4);
  }
}

// λ · mean_{b,j} (1 − Σ_t α_btj)², t over the real words, against the formula written out
TEST(Captioner, DoublyStochasticPenaltyMatchesItsFormulaAndGradient) {
  const int64_t B = 2, T = 3, L = 4;
  Tensor alpha = softmax(testing::param({B, T, L}, 9), -1).detach();
  alpha.requires_grad_(true);
  const Tensor real = Tensor::from_vector({1, 1, 0, 1, 0, 0}, {B, T});
  const std::vector<float> a = alpha.to_vector(), r = real.to_vector();
  double want = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < L; ++j) {
      double seen = 0;
      for (int64_t t = 0; t < T; ++t) seen += r[b * T + t] * a[(b * T + t) * L + j];
      want += (1 - seen) * (1 - seen);
    }
  want /= B * L;
  Tensor p = Captioner::doubly_stochastic_penalty(alpha, real);
  EXPECT_NEAR(p.item(), want, 1e-6);
  // d/dα_btj = −2 (1 − Σ_t α_btj) · real_bt / (B·L)
  p.backward();
  const std::vector<float> grad = alpha.grad().to_vector();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < L; ++j) {
      double seen = 0;
      for (int64_t t = 0; t < T; ++t) seen += r[b * T + t] * a[(b * T + t) * L + j];
      for (int64_t t = 0; t < T; ++t)
        EXPECT_NEAR(grad[(b * T + t) * L + j], -2 * (1 - seen) * r[b * T + t] / (B * L), 1e-6);
    }
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return Captioner::doubly_stochastic_penalty(in[0], real); },
                   (std::vector<Tensor>{testing::param({B, T, L}, 4, 0.3f)}));
}

// The loss's gradient with respect to the pixels runs back through every part: the output layer,
// the GRU, the gate, the attention, the grid's keys and mean, the ConvNet (batch norm in eval mode).
TEST(Captioner, LossGradientPassesFiniteDifferences) {
  for (json extra : {json{{"doubly_stochastic", 2.0}}, json{{"attention", "none"}, {"gate", false}}}) {
    SCOPED_TRACE(extra.dump());
    Generator g(8);
    auto m = models::build_seq2seq("captioner", tiny(extra), &g);
    m->module().eval();
    EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return m->loss(in[0], tgt_in(), tgt_out(), 0.1f); },
                     (std::vector<Tensor>{testing::param({2, 1, 8, 8}, 6, 0.5f)}));
  }
}

// The grid's learned positions P [L, D]: a_j + P_j is what the decoder attends over, so the loss's
// gradient in P (through attention, the mean feature and the initial state) passes finite differences.
TEST(Captioner, GridPositionsGradientPassesFiniteDifferences) {
  Generator g(4);
  auto m = models::build_seq2seq("captioner", tiny(json{{"grid_positions", true}}), &g);
  m->module().eval();
  auto* cap = dynamic_cast<const Captioner*>(&m->module());
  ASSERT_NE(cap, nullptr);
  ASSERT_EQ(cap->positions.shape(), (Shape{16, 4}));  // a 4×4 grid of 4-vectors
  const Tensor x = images(2, 3);
  Tensor p = cap->positions;
  {
    Generator r(2);
    p.copy_(Tensor::randn({16, 4}, r, 0.f, 0.3f));  // away from the 0.02 initialisation
  }
  m->module().zero_grad();
  m->loss(x, tgt_in(), tgt_out()).backward();
  const std::vector<float> grad = p.grad().to_vector();
  NoGradGuard no_grad;
  float* v = p.data<float>();
  const float h = 1e-2f;
  for (int64_t k : {0, 5, 22, 37, 63}) {
    const float keep = v[k];
    v[k] = keep + h;
    const double up = m->loss(x, tgt_in(), tgt_out()).item();
    v[k] = keep - h;
    const double down = m->loss(x, tgt_in(), tgt_out()).item();
    v[k] = keep;
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(grad[static_cast<size_t>(k)], fd, 2e-3 + 2e-2 * std::abs(fd)) << "P[" << k << "]";
  }
}

// A one-object caption set: a bright 4×4 square (solid or hollow) in one of nine places of a 12×12
// image, captioned "<place> <kind>": the captioner gets all 18 captions right.
TEST(Captioner, LearnsAOneObjectCaptionSet) {
  Generator g(21);
  const json cfg = {{"image_height", 12}, {"image_width", 12}, {"channels", {8, 16}}, {"blocks", {1, 1}},
                    {"vocab_size", 15},   {"embedding_dim", 16}, {"hidden_size", 32},  {"dropout", 0.0},
                    {"max_len", 6},       {"mean", {0.1}},       {"std", {0.3}}};
  auto m = models::build_seq2seq("captioner", cfg, &g);
  auto scene = [](int64_t k, float* px) {  // k = 2·place + kind
    const int64_t place = k / 2, y0 = (place / 3) * 4, x0 = (place % 3) * 4;
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 4; ++x)
        px[(y0 + y) * 12 + x0 + x] = (k % 2 == 0 || y == 0 || y == 3 || x == 0 || x == 3) ? 1.f : 0.f;
  };
  auto batch = [&](const std::vector<int64_t>& ks, Tensor& x, Tensor& tin, Tensor& tout) {
    const auto B = static_cast<int64_t>(ks.size());
    std::vector<float> px(static_cast<size_t>(B * 144), 0.f);
    std::vector<int32_t> ti, to;
    for (int64_t b = 0; b < B; ++b) {
      scene(ks[b], px.data() + b * 144);
      const int32_t w1 = 4 + static_cast<int32_t>(ks[b] / 2), w2 = 13 + static_cast<int32_t>(ks[b] % 2);
      ti.insert(ti.end(), {2, w1, w2}), to.insert(to.end(), {w1, w2, 3});
    }
    x = Tensor::from_vector(px, {B, 1, 12, 12}), tin = Tensor::from_ints(ti, {B, 3}), tout = Tensor::from_ints(to, {B, 3});
  };
  train::AdamOptions ao;
  ao.lr = 1e-2f;
  train::Adam opt({{m->module().named_parameters(), 0.f}}, ao);
  for (int step = 0; step < 400; ++step) {
    std::vector<int64_t> ks;
    for (int64_t b = 0; b < 18; ++b) ks.push_back(static_cast<int64_t>(Generator::bits(step, b) % 18));
    Tensor x, ti, to;
    batch(ks, x, ti, to);
    Tensor loss = m->loss(x, ti, to);
    loss.backward();
    train::clip_grad_norm_(m->module().parameters(), 1.0);
    opt.step();
    opt.zero_grad();
  }
  m->module().eval();
  std::vector<int64_t> all(18);
  for (int64_t k = 0; k < 18; ++k) all[k] = k;
  Tensor x, ti, to;
  batch(all, x, ti, to);
  decode::Seq2SeqStepModel sm(*m, x);
  decode::SearchOptions o;
  o.beam_size = 1;
  const auto hyps = decode::greedy_search(sm, std::vector<int64_t>(18, 5), o);
  const std::vector<int32_t> want = to.to_ints();
  int right = 0;
  for (size_t k = 0; k < 18; ++k)
    right += hyps[k].tokens == std::vector<int32_t>(want.begin() + 3 * k, want.begin() + 3 * k + 2);
  EXPECT_EQ(right, 18) << "captions right after 400 steps";
}

TEST(Captioner, BadConfigsAreClearErrors) {
  auto err = [](json extra) {
    return testing::error_of([&] { models::build_seq2seq("captioner", tiny(std::move(extra))); });
  };
  EXPECT_NE(err({{"attention", "none"}}).find("gate"), std::string::npos);
  EXPECT_NE(err({{"channels", {3, 4, 5}}}).find("\"channels\" (3 stages) and \"blocks\" (2)"), std::string::npos);
  EXPECT_NE(err({{"channels", {1, 1, 1, 1, 1}}, {"blocks", {1, 1, 1, 1, 1}}, {"image_height", 4}}).find("to nothing"),
            std::string::npos);
  EXPECT_NE(err({{"eos_id", 11}}).find("eos_id 11 is outside the vocabulary of 11"), std::string::npos);
  EXPECT_NE(err({{"attention", "dot"}}).find("\"dot\""), std::string::npos);
  // the pieces of a captioner's image interface
  Generator g(1);
  EXPECT_EQ(models::build_seq2seq("captioner", tiny(), &g)->source_image().width, 8);
  EXPECT_EQ(models::build_seq2seq("rnn-attention", json{{"vocab_size", 9}}, &g)->source_image().height, 0);
  // a wrongly sized image is named
  auto m = models::build_seq2seq("captioner", tiny(), &g);
  EXPECT_NE(testing::error_of([&] { m->forward(Tensor::zeros({1, 1, 9, 8}), tgt_in().select(0, 0).unsqueeze(0)); })
                .find("expected images [N, 1, 8, 8]"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::nn
