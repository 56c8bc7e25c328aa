// Sampling filters on hand-made logits, seeded reproducibility, and generation with and without the
// KV cache choosing the same tokens (within and beyond block_size).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "qkv/decode/generate.h"
#include "qkv/decode/sampling.h"
#include "qkv/ops/sample.h"
#include "qkv/text/char_tokenizer.h"
#include "testing.h"

namespace qkv::decode {
namespace {

std::vector<bool> kept(const std::vector<float>& l) {
  std::vector<bool> k;
  for (float x : l) k.push_back(std::isfinite(x));
  return k;
}

TEST(SamplingTest, TopKKeepsTheKLargestAndTies) {
  std::vector<float> l = {1.f, 5.f, 3.f, 4.f, 2.f};
  top_k_filter(l, 2);
  EXPECT_EQ(kept(l), (std::vector<bool>{false, true, false, true, false}));
  EXPECT_EQ(l[1], 5.f);  // survivors unchanged
  std::vector<float> t = {2.f, 3.f, 3.f, 1.f};
  top_k_filter(t, 2);  // the 2nd largest is 3, tied: both 3s stay
  EXPECT_EQ(kept(t), (std::vector<bool>{false, true, true, false}));
  std::vector<float> all = {1.f, 2.f};
  top_k_filter(all, 5);
  EXPECT_EQ(kept(all), (std::vector<bool>{true, true}));
}

TEST(SamplingTest, TopPKeepsTheSmallestNucleus) {
  // probabilities 0.5, 0.25, 0.125, 0.125 (logits = log p)
  std::vector<float> base = {std::log(0.125f), std::log(0.5f), std::log(0.25f), std::log(0.125f)};
  auto l = base;
  top_p_filter(l, 0.5);  // 0.5 alone reaches 0.5
  EXPECT_EQ(kept(l), (std::vector<bool>{false, true, false, false}));
  l = base;
  top_p_filter(l, 0.6);  // needs 0.5 + 0.25
  EXPECT_EQ(kept(l), (std::vector<bool>{false, true, true, false}));
  l = base;
  top_p_filter(l, 0.01);  // at least one token
  EXPECT_EQ(kept(l), (std::vector<bool>{false, true, false, false}));
  l = base;
  top_p_filter(l, 1.0);
  EXPECT_EQ(kept(l), (std::vector<bool>{true, true, true, true}));
}

TEST(SamplingTest, SampleFromInvertsTheCdfAndSeedsReproduce) {
  EXPECT_EQ(sample_from({0.2, 0.3, 0.5}, 0.0), 0);
  EXPECT_EQ(sample_from({0.2, 0.3, 0.5}, 0.25), 1);
  EXPECT_EQ(sample_from({0.2, 0.3, 0.5}, 0.9999), 2);
  EXPECT_EQ(sample_from({0.0, 1.0, 0.0}, 0.9999999999), 1);  // never a zero-probability token
  std::vector<float> logits = {0.1f, 0.4f, -0.3f, 1.2f, 0.0f};
  SamplingOptions o;
  o.seed = 7;
  Sampler a(o), b(o);
  std::vector<int64_t> sa, sb;
  for (int i = 0; i < 200; ++i) sa.push_back(a.next(logits)), sb.push_back(b.next(logits));
  EXPECT_EQ(sa, sb);
  // and the empirical frequencies follow softmax (200 draws, loose bound)
  std::vector<double> p = softmax_probs(logits);
  EXPECT_NEAR(std::count(sa.begin(), sa.end(), 3) / 200.0, p[3], 0.1);
  o.seed = 8;
  Sampler c(o);
  std::vector<int64_t> sc;
  for (int i = 0; i < 200; ++i) sc.push_back(c.next(logits));
  EXPECT_NE(sa, sc);
  o.temperature = 0;  // greedy
  Sampler g(o);
  EXPECT_EQ(g.next(logits), 3);
  for (double tiny : {1e-300, 1e-6}) {  // below kGreedyTemperature: greedy, no draw (x / 1e-300 would overflow)
    o.temperature = tiny;
    Sampler t(o);
    EXPECT_EQ(t.next(logits), 3);
    EXPECT_EQ(t.draws(), 0u);
  }
  o.temperature = 1, o.top_k = 1;  // top-1 sampling = greedy
  Sampler k1(o);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.next(logits), 3);
}

RowSampling drawn(double temperature, int64_t top_k, double top_p, double u) {
  RowSampling r;
  r.temperature = temperature, r.top_k = top_k, r.top_p = top_p, r.u = u;
  return r;
}

// The reference: decode/sampling.h's filters as written, in Hugging Face's order (temperature, top-k,
// top-p, the draw).
int64_t reference_draw(std::vector<float> logits, const RowSampling& s) {
  if (s.temperature <= 0) return argmax(logits);
  for (float& x : logits) x = static_cast<float>(x / s.temperature);
  top_k_filter(logits, s.top_k);
  top_p_filter(logits, s.top_p);
  return sample_from(softmax_probs(logits), s.u);
}

// ops' sample_rows (Sampler's draw, and the batching generator's on the logits' device) takes the
// reference's tokens bit for bit on the CPU: greedy rows (ties: the first), tempered ones over
// vocabularies of 1000, 7 and 50,257, with top-k (1, 5, 40, V − 1, past V) and top-p (0.01 … 0.999,
// both with top-k), logits of −∞ never drawn, rows of few distinct values (ties at the top-k and
// top-p cuts: the lower indices stay), draws at 0 and 1 − 2⁻⁵³; Sampler::next is the same token
// for its own draw; a row without a distribution is −1 (where Sampler refuses); bad draws, top_p
// and counts are refused by name.
TEST(SamplingTest, SampleRowsDrawsTheReferenceTokens) {
  const int64_t ks[] = {0, 1, 5, 40, -1, 1 << 20};  // −1: V − 1
  const double ps[] = {1.0, 0.9, 0.5, 0.01, 0.999, 0.3};
  for (int64_t V : {1000, 7, 50257}) {
    SCOPED_TRACE(V);
    Generator g(static_cast<uint64_t>(V));
    const int64_t rows = V == 50257 ? 36 : 240;
    Tensor logits = Tensor::randn({rows, V}, g, 0.f, 2.f);
    float* x = logits.data();
    for (int64_t r = 0; r < rows; r += 7) x[r * V + 1] = x[r * V + V - 1] = 50.f;  // ties for the greedy rows
    for (int64_t r = 3; r < rows; r += 5) x[r * V + 2] = -INFINITY;
    for (int64_t r = 2; r < rows; r += 9)  // few distinct values: ties at every cut
      for (int64_t j = 0; j < V; ++j) x[r * V + j] = static_cast<float>((j * 7 + r) % 4);
    std::vector<RowSampling> params;
    std::vector<int64_t> want;
    for (int64_t r = 0; r < rows; ++r) {
      SamplingOptions o;
      o.temperature = r % 4 == 0 ? 0.0 : 0.5 + 0.25 * static_cast<double>(r % 5), o.seed = static_cast<uint64_t>(r);
      o.top_k = ks[(r / 2) % 6] < 0 ? V - 1 : ks[(r / 2) % 6], o.top_p = ps[(r / 3) % 6];
      Sampler a(o), b(o);
      const std::vector<float> row(x + r * V, x + (r + 1) * V);
      for (int skip = 0; skip < r % 3; ++skip) a.next(row), b.draw();  // (draws further along)
      RowSampling s = b.row();
      if (r == 5) s.u = 0;
      if (r == 6) s.u = 1 - 0x1.0p-53;
      params.push_back(s);
      want.push_back(reference_draw(row, s));
      const int64_t by_sampler = a.next(row);
      if (r != 5 && r != 6) {
        EXPECT_EQ(by_sampler, want.back()) << "Sampler::next, row " << r;
      }
      EXPECT_EQ(b.draws(), a.draws()) << r;
    }
    const std::vector<int32_t> got = sample_rows(logits, params).to_ints();
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << "row " << r;
  }
  const Tensor bad = Tensor::from_vector({-INFINITY, -INFINITY, 1.f, NAN}, {2, 2});
  const RowSampling t1 = drawn(1.0, 0, 1.0, 0.5), greedy{};
  EXPECT_EQ(sample_rows(bad, {t1, t1}).to_ints(), (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(sample_rows(bad, {drawn(1.0, 1, 0.5, 0.5), drawn(1.0, 1, 0.5, 0.5)}).to_ints(),
            (std::vector<int32_t>{-1, -1})) << "filtered: no distribution either";
  EXPECT_EQ(sample_rows(bad, {greedy, greedy}).to_ints(), (std::vector<int32_t>{0, 0})) << "greedy: NaN never chosen";
  EXPECT_NE(testing::error_of([&] { sample_rows(bad, {t1, drawn(1.0, 0, 1.0, 1.0)}); }).find("row 1's u = 1"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { sample_rows(bad, {t1, drawn(1.0, 0, 0.0, 0.5)}); }).find("row 1's top_p = 0"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { sample_rows(bad, {t1}); }).find("1 rows' sampling for 2 rows"), std::string::npos);
  SamplingOptions o;
  o.top_p = std::nan("");
  EXPECT_NE(testing::error_of([&] { Sampler{o}; }).find("top_p must be in (0, 1]"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { Sampler(SamplingOptions{}).next(std::vector<float>{NAN, 1.f}); }).find("no distribution"),
            std::string::npos);
}

// The penalties (kernels/penalties.h), by hand: logits {2, −1, 0.5, 3}; token 0 in the prompt under a
// repetition penalty of 2 (2 → 1), token 1 in the prompt (−1 → −2), token 3 once in the output with
// frequency 0.25 and presence 2 (3 / 2 = 1.5, (1.5 − 0.25) − 2 = −0.75): greedy now takes token 0,
// where it took 3.
// Then on random rows over 1000 and 50,257 logits, sampled with the filters, against the formula
// applied to the row before the reference's draw; the logits given are left as they were; a seen
// token outside the vocabulary, one named twice and a penalty that is not finite are refused.
std::vector<float> penalize(std::vector<float> x, const RowSampling& s) {  // (the formula, written plainly)
  for (const SeenToken& t : s.seen) {
    float& v = x[static_cast<size_t>(t.token)];
    if (t.count > 0 || t.in_prompt) v = v > 0 ? v / s.repetition_penalty : v * s.repetition_penalty;
    if (t.count > 0) v = (v - s.frequency_penalty * static_cast<float>(t.count)) - s.presence_penalty;
  }
  return x;
}

TEST(SamplingTest, PenaltiesWeighTheHistory) {
  const Tensor l = Tensor::from_vector({2.f, -1.f, 0.5f, 3.f}, {1, 4});
  RowSampling g;  // greedy
  EXPECT_EQ(sample_rows(l, {g}).to_ints()[0], 3);
  g.repetition_penalty = 2, g.frequency_penalty = 0.25f, g.presence_penalty = 2;
  g.seen = {{0, 0, true}, {1, 0, true}, {3, 1, false}};
  EXPECT_EQ(sample_rows(l, {g}).to_ints()[0], 0);
  EXPECT_EQ(penalize({2.f, -1.f, 0.5f, 3.f}, g), (std::vector<float>{1.f, -2.f, 0.5f, -0.75f}));
  EXPECT_EQ(l.to_vector(), (std::vector<float>{2.f, -1.f, 0.5f, 3.f})) << "the caller's logits untouched";
  // Sampler's history: the prompt, then each token accepted
  SamplingOptions o;
  o.temperature = 0, o.presence_penalty = 2, o.frequency_penalty = 0.25;
  Sampler s(o, {2, 2});
  EXPECT_EQ(s.next(std::vector<float>{2.f, -1.f, 0.5f, 3.f}), 3);  // (prompt tokens: no presence penalty)
  RowSampling r = s.row();
  ASSERT_EQ(r.seen.size(), 2u);
  EXPECT_EQ(r.seen[0].token, 2);
  EXPECT_EQ(r.seen[0].count, 0);
  EXPECT_TRUE(r.seen[0].in_prompt);
  EXPECT_EQ(r.seen[1].token, 3);
  EXPECT_EQ(r.seen[1].count, 1);
  EXPECT_FALSE(r.seen[1].in_prompt);
  EXPECT_EQ(s.next(std::vector<float>{2.f, -1.f, 0.5f, 3.f}), 0);
  EXPECT_TRUE(Sampler(SamplingOptions{}).row().seen.empty()) << "no penalties: no history";

  for (int64_t V : {1000, 50257}) {
    SCOPED_TRACE(V);
    Generator gen(static_cast<uint64_t>(V) + 1);
    const int64_t rows = 24;
    const Tensor logits = Tensor::randn({rows, V}, gen, 0.f, 2.f);
    const std::vector<float> before = logits.to_vector();
    std::vector<RowSampling> params;
    std::vector<int64_t> want;
    for (int64_t r = 0; r < rows; ++r) {
      RowSampling p = drawn(r % 3 == 0 ? 0.0 : 0.9, r % 4 == 1 ? 20 : 0, r % 5 == 2 ? 0.8 : 1.0,
                            Generator::uniform(9, static_cast<uint64_t>(r)));
      p.repetition_penalty = r % 2 ? 1.3f : 1.f, p.frequency_penalty = 0.1f * static_cast<float>(r % 4),
      p.presence_penalty = r % 3 == 1 ? 0.7f : -0.2f;
      for (int64_t i = 0; i < 40; ++i) {  // the row's most likely tokens among those seen, and others
        const auto t = static_cast<int32_t>((i * 37 + r * 11) % V);
        p.seen.push_back({t, static_cast<int32_t>(i % 4), i % 3 == 0});
      }
      const float* x = logits.data() + r * V;
      const auto best = static_cast<int32_t>(std::max_element(x, x + V) - x);
      if (std::none_of(p.seen.begin(), p.seen.end(), [&](const SeenToken& t) { return t.token == best; }))
        p.seen.push_back({best, 2, true});
      params.push_back(p);
      want.push_back(reference_draw(penalize(std::vector<float>(x, x + V), p), p));
    }
    const std::vector<int32_t> got = sample_rows(logits, params).to_ints();
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << "row " << r;
    EXPECT_EQ(logits.to_vector(), before);
  }
  RowSampling bad = g;
  bad.seen.push_back({4, 1, false});
  EXPECT_NE(testing::error_of([&] { sample_rows(l, {bad}); }).find("row 0 has seen token 4 1 times (a vocabulary of 4)"),
            std::string::npos);
  bad.seen.back().token = 3;
  EXPECT_NE(testing::error_of([&] { sample_rows(l, {bad}); }).find("names a seen token twice"), std::string::npos);
  bad = g, bad.repetition_penalty = 0;
  EXPECT_NE(testing::error_of([&] { sample_rows(l, {bad}); }).find("the repetition penalty positive"), std::string::npos);
  o.repetition_penalty = -1;
  EXPECT_NE(testing::error_of([&] { Sampler{o}; }).find("repetition penalty must be positive"), std::string::npos);
}

// A small GPT as the models floor sees it (built by the registry, as a model file would be).
std::unique_ptr<models::LanguageModel> tiny_gpt(int64_t block) {
  nn::GPTConfig c;
  c.vocab_size = 11, c.block_size = block, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  Generator g(3);
  auto m = models::build_language_model("gpt", c.to_json(), &g);
  // larger weights than the 0.02 init so that greedy choices are not all the same token
  for (auto& [n, p] : m->module().named_parameters()) {
    Tensor t = p.detach();
    if (p.dim() >= 2) t.copy_(Tensor::randn(p.shape(), g, 0.f, 0.5f));
  }
  m->module().eval();
  return m;
}

TEST(GenerateTest, CachedAndUncachedChooseTheSameTokens) {
  for (int64_t block : {64, 8}) {  // 8: the window restarts several times
    auto model = tiny_gpt(block);
    const models::LanguageModel& m = *model;
    for (double temperature : {0.0, 0.9}) {
      GenerateOptions o;
      o.max_new_tokens = 40;
      o.sampling.temperature = temperature;
      o.sampling.top_k = 5;
      o.sampling.seed = 11;
      o.use_cache = true;
      std::vector<int32_t> streamed;
      auto with = generate(m, {1, 2, 3}, o, [&](int32_t t) { streamed.push_back(t); return true; });
      o.use_cache = false;
      auto without = generate(m, {1, 2, 3}, o);
      EXPECT_EQ(with, without) << "block " << block << " temperature " << temperature;
      EXPECT_EQ(with, streamed);
      EXPECT_EQ(with.size(), 40u);
      std::set<int32_t> distinct(with.begin(), with.end());
      if (temperature > 0) {
        EXPECT_GT(distinct.size(), 1u) << "degenerate test model";
      }
    }
  }
}

// Greedy generation under a presence penalty far above the logits' spread never repeats a token
// until the vocabulary (11) runs out; without it the same model repeats.
TEST(GenerateTest, APresencePenaltyKeepsTokensFromRepeating) {
  auto model = tiny_gpt(64);
  GenerateOptions o;
  o.max_new_tokens = 11, o.sampling.temperature = 0;
  const std::vector<int32_t> plain = generate(*model, {1, 2, 3}, o);
  EXPECT_LT(std::set<int32_t>(plain.begin(), plain.end()).size(), 11u) << "the test model repeats without it";
  o.sampling.presence_penalty = 1000;
  const std::vector<int32_t> out = generate(*model, {1, 2, 3}, o);
  EXPECT_EQ(std::set<int32_t>(out.begin(), out.end()).size(), 11u);
}

TEST(GenerateTest, BadPromptsAreRejected) {
  auto model = tiny_gpt(16);
  const models::LanguageModel& m = *model;
  GenerateOptions o;
  EXPECT_THROW(generate(m, {}, o), Error);
  EXPECT_THROW(generate(m, {1, 99}, o), Error);
  // a prompt longer than block_size is cropped, not an error
  std::vector<int32_t> long_prompt(40, 3);
  o.max_new_tokens = 3;
  EXPECT_EQ(generate(m, long_prompt, o).size(), 3u);
}

TEST(CharTokenizerTest, VocabularyEncodeDecodeAndErrors) {
  auto t = text::CharTokenizer::from_text("hello, world\ncafé");
  EXPECT_EQ(t.vocab_size(), 14);  // \n space , a c d e f h l o r w é
  EXPECT_EQ(t.encode("\n")[0], 0);  // sorted by code point, as nanoGPT
  auto ids = t.encode("café hello");
  EXPECT_EQ(t.decode(ids), "café hello");
  EXPECT_EQ(ids.size(), 10u);  // characters, not bytes
  try {
    t.encode("hello!");
    FAIL() << "no error for '!'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'!'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("position 5"), std::string::npos) << e.what();
  }
  auto back = text::CharTokenizer::from_json(t.to_json());
  EXPECT_EQ(back.encode("café"), t.encode("café"));
  EXPECT_THROW(text::CharTokenizer::from_text("\xff"), Error);
  EXPECT_THROW(text::CharTokenizer::from_json(nlohmann::json{{"type", "char"}, {"chars", {"b", "a"}}}), Error);
}

}  // namespace
}  // namespace qkv::decode

namespace qkv::decode {
namespace {

// bf16 decoding weights: the product equals linear() with the weight rounded to bf16 (the only
// difference is the weight's rounding), for 1 and several rows, with and without bias; more than
// 16 rows take the f32 weight.
TEST(Bf16Decoding, LinearInferenceEqualsLinearOnRoundedWeights) {
  Generator g(5);
  Tensor w = Tensor::randn({37, 70}, g), b = Tensor::randn({37}, g);
  InferenceWeight w_bf16(w, InferenceWeights::bf16);
  Tensor w_rounded = w_bf16.bf16().to(DType::f32);
  for (int64_t rows : {1, 3, 16}) {
    Tensor x = Tensor::randn({rows, 70}, g);
    EXPECT_TENSOR_NEAR(linear_inference(x, w, w_bf16, b), linear(x, w_rounded, b), 1e-5);
    EXPECT_TENSOR_NEAR(linear_inference(x, w, w_bf16), linear(x, w_rounded), 1e-5);
  }
  Tensor big = Tensor::randn({17, 70}, g);
  EXPECT_TENSOR_NEAR(linear_inference(big, w, w_bf16, b), linear(big, w, b), 1e-6);
}

TEST(Bf16Decoding, GptLogitsStayCloseToF32) {
  auto m = tiny_gpt(64);
  auto c32 = m->start_decoding(), c16 = m->start_decoding();
  Tensor ids = Tensor::from_ints({1, 2, 3, 4, 5}, {1, 5});
  Tensor a = m->step(ids, *c32);  // prefill: 5 rows, also on the bf16 path
  m->set_inference_weights(nn::InferenceWeights::bf16);
  Tensor b = m->step(ids, *c16);
  EXPECT_TENSOR_NEAR(b, a, 2e-2);
  EXPECT_GT(testing::rel_error(b.to_vector(), a.to_vector()), 0.0) << "the bf16 copies were not used";
  m->set_inference_weights(nn::InferenceWeights::f32);
  auto c = m->start_decoding();
  EXPECT_TENSOR_NEAR(m->step(ids, *c), a, 0.0);
}

}  // namespace
}  // namespace qkv::decode
