// A language model's perplexity (eval/perplexity.h) against its definition, computed here from the
// model's logits position by position: exp of the mean −log p(x_t | x_<t) over windows of T + 1
// tokens that share one; a chosen subset of windows scores only theirs; bad inputs name themselves.
#include "qkv/eval/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/models/registry.h"
#include "qkv/nn/gpt.h"
#include "qkv/ops.h"
#include "testing.h"

namespace qkv::eval {
namespace {

std::unique_ptr<models::LanguageModel> tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 11, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  Generator g(3);
  auto m = models::build_language_model("gpt", c.to_json(), &g);
  m->module().eval();
  return m;
}

// Σ −log p over window w's T predictions, from the logits [1, len, V] of its len inputs.
double window_nll(const models::LanguageModel& m, const std::vector<int32_t>& ids, int64_t T, int64_t w, int64_t* n) {
  NoGradGuard no_grad;
  const int64_t start = w * T, len = std::min<int64_t>(T, static_cast<int64_t>(ids.size()) - 1 - start);
  const std::vector<int32_t> x(ids.begin() + start, ids.begin() + start + len);
  const std::vector<float> lp = log_softmax(m.forward(Tensor::from_ints(x, {1, len})), -1).to_vector();
  const int64_t V = static_cast<int64_t>(lp.size()) / len;
  double nll = 0;
  for (int64_t t = 0; t < len; ++t) nll -= lp[static_cast<size_t>(t * V + ids[static_cast<size_t>(start + t + 1)])];
  *n += len;
  return nll;
}

TEST(Perplexity, IsTheExpOfTheMeanNextTokenLossOverWindowsSharingOneToken) {
  auto m = tiny_gpt();
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 7 + 3) % 11);  // 39 predictions: windows of 16, 16, 7
  EXPECT_EQ(perplexity_windows(40, 16), 3);
  int64_t n = 0;
  double nll = 0;
  for (int64_t w = 0; w < 3; ++w) nll += window_nll(*m, ids, 16, w, &n);
  const Perplexity p = perplexity(*m, ids);  // block 0: the model's context, 16
  EXPECT_EQ(p.block, 16);
  EXPECT_EQ(p.tokens, 39);
  EXPECT_NEAR(p.loss, nll / 39, 1e-5);
  EXPECT_NEAR(p.perplexity, std::exp(nll / 39), 1e-4 * p.perplexity);
  // a sample of windows: only theirs; on_window once each
  int calls = 0;
  n = 0;
  const double last = window_nll(*m, ids, 5, 7, &n);  // block 5: 8 windows, the last of 4 predictions
  const Perplexity one = perplexity(*m, ids, 5, {7}, [&] { ++calls; });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(one.tokens, 4);
  EXPECT_NEAR(one.loss, last / 4, 1e-5);
}

TEST(Perplexity, InputsThatCannotWorkNameThemselves) {
  auto m = tiny_gpt();
  EXPECT_NE(testing::error_of([&] { perplexity(*m, {3}); }).find("at least 2"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { perplexity(*m, {1, 2, 3}, 17); }).find("block_size must be between 1 and the model's 16"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { perplexity(*m, {1, 2, 3}, 1, {2}); }).find("window 2 of a text of 2 windows"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::eval
