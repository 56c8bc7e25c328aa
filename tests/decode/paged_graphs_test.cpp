// The decoder-only models' decoding steps in buckets (decode/paged_graphs.h): the same sequences
// decoded over two pools, one by PagedKVCache::plan and step_paged as written, the other by
// PagedDecodeGraphs — padded to buckets of 1, 2, 4, 8, 16 … tokens over block tables of 1, 2, 4, 8
// pages, every step run under the CPU's emulated capture (a host read would be an Error) — give the
// same logits at every step, as the batch shrinks and grows across buckets and the contexts cross
// widths: GPT (f32 and int8 weights: activations quantized per row, so padding rows change no other
// row) and Llama (grouped queries, a sliding window, a bf16 cache; its rotary rows gathered on the
// device by position). On a lent GPU the same with CUDA graphs: each bucket captured once, replayed
// after. A padding token's slot −1 writes nothing; −2 is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/autograd/grad_mode.h"
#include "qkv/decode/paged_graphs.h"
#include "qkv/ops.h"
#include "random_language_model.h"
#include "testing.h"

namespace qkv::decode {
namespace {

using testing::lm;
using testing::random_model;

nlohmann::json paged_gpt_config() {
  return {{"vocab_size", 23}, {"block_size", 32}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 16}, {"bias", true}};
}
nlohmann::json llama_config() {
  return {{"vocab_size", 23},         {"hidden_size", 16},        {"intermediate_size", 24},
          {"num_hidden_layers", 2},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"max_position_embeddings", 32}, {"sliding_window", 6}};
}

TEST(PagedDecodeGraphs, BucketsAreOneTwoFourThenMultiplesOfEight) {
  std::vector<int64_t> got;
  for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 17, 24, 25, 63, 64}) got.push_back(PagedDecodeGraphs::bucket_tokens(n, 64));
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 4, 4, 8, 8, 16, 24, 24, 32, 64, 64}));
  EXPECT_EQ(PagedDecodeGraphs::bucket_tokens(5, 5), 5) << "at most the batch's limit";
  EXPECT_EQ(PagedDecodeGraphs::bucket_tokens(3, 5), 4);
  got.clear();
  for (int64_t p : {1, 2, 3, 5, 8, 9}) got.push_back(PagedDecodeGraphs::bucket_pages(p, 12));
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 4, 8, 8, 12})) << "powers of two, at most a sequence's most pages";
}

// Nine sequences (prompts of 1 … 11 tokens) prefilled together in both pools, then 14 decoding steps
// over changing sets of them — 3 (bucket 4), all 9 (16), 5 (8), 1 (1) — the tokens fed the plain
// steps' greedy choices.
void expect_graph_steps_are_the_plain_ones(const models::LanguageModel& m, Device device, PagedDecodeGraphs::Mode mode,
                                           DType kv_dtype, double tol) {
  NoGradGuard no_grad;
  const int64_t V = m.vocab_size();
  nn::PagedKVCache plain = m.make_paged_cache(80, 4, device, kv_dtype), bucketed = m.make_paged_cache(80, 4, device, kv_dtype);
  PagedDecodeGraphs graphs(m, bucketed, 16, mode);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 9; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j <= (i * 5) % 11; ++j) p.push_back(static_cast<int32_t>((i * 7 + j * 3 + 1) % V));
    prompts.push_back(p);
  }
  std::vector<nn::PagedSequence> a(9), b(9);
  std::vector<int32_t> next(9);
  {
    std::vector<nn::PagedSequence*> pa, pb;
    std::vector<int64_t> n;
    std::vector<int32_t> ids;
    for (size_t i = 0; i < 9; ++i) {
      ASSERT_TRUE(plain.reserve(a[i], static_cast<int64_t>(prompts[i].size()) + 14));
      ASSERT_TRUE(bucketed.reserve(b[i], static_cast<int64_t>(prompts[i].size()) + 14));
      pa.push_back(&a[i]), pb.push_back(&b[i]);
      n.push_back(static_cast<int64_t>(prompts[i].size()));
      ids.insert(ids.end(), prompts[i].begin(), prompts[i].end());
    }
    const Tensor x = Tensor::from_ints(ids, {static_cast<int64_t>(ids.size())}).to(device);
    const nn::PagedStep sa = plain.plan(pa, n), sb = bucketed.plan(pb, n);
    const std::vector<float> la = m.step_paged(x, sa, plain).to(Device::cpu()).to_vector();
    m.step_paged(x, sb, bucketed);
    for (size_t i = 0; i < 9; ++i)
      next[i] = static_cast<int32_t>(std::max_element(la.begin() + static_cast<std::ptrdiff_t>(i) * V,
                                                      la.begin() + static_cast<std::ptrdiff_t>(i + 1) * V) -
                                     (la.begin() + static_cast<std::ptrdiff_t>(i) * V));
  }
  const std::vector<std::vector<size_t>> sets = {{0, 1, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8}, {8, 6, 4, 2, 0}, {5}};
  for (int k = 0; k < 14; ++k) {
    const std::vector<size_t>& which = sets[static_cast<size_t>(k < 4 ? 0 : k < 8 ? 1 : k < 12 ? 2 : 3)];
    std::vector<nn::PagedSequence*> pa, pb;
    std::vector<int32_t> ids;
    for (size_t i : which) pa.push_back(&a[i]), pb.push_back(&b[i]), ids.push_back(next[i]);
    const auto n = static_cast<int64_t>(which.size());
    const Tensor x = Tensor::from_ints(ids, {n}).to(device);
    const nn::PagedStep sa = plain.plan(pa, std::vector<int64_t>(which.size(), 1));
    const std::vector<float> want = m.step_paged(x, sa, plain).to(Device::cpu()).to_vector();
    const std::vector<float> got = graphs.step(pb, ids).to(Device::cpu()).to_vector();
    SCOPED_TRACE("step " + std::to_string(k));
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TENSOR_NEAR(Tensor::from_vector(got, {n, V}), Tensor::from_vector(want, {n, V}), tol);
    for (size_t j = 0; j < which.size(); ++j) {
      EXPECT_EQ(b[which[j]].length, a[which[j]].length);
      next[which[j]] = static_cast<int32_t>(std::max_element(want.begin() + static_cast<std::ptrdiff_t>(j) * V,
                                                             want.begin() + static_cast<std::ptrdiff_t>(j + 1) * V) -
                                            (want.begin() + static_cast<std::ptrdiff_t>(j) * V));
    }
  }
  EXPECT_EQ(graphs.replayed() + graphs.captured(), 14);
  if (mode == PagedDecodeGraphs::Mode::graph) {
    EXPECT_TRUE(graphs.graphs()) << "a capture failed (its reason is on stderr)";
    EXPECT_GE(graphs.captured(), 4);  // tokens 4, 16, 8, 1 over widths 4 and 8
  }
}

TEST(PagedDecodeGraphs, BucketedStepsAreThePlainStepsGpt) {
  auto gpt = random_model("gpt", paged_gpt_config(), 3);
  expect_graph_steps_are_the_plain_ones(lm(gpt), Device::cpu(), PagedDecodeGraphs::Mode::emulated, DType::f32, 1e-5);
  lm(gpt).set_inference_weights(nn::InferenceWeights::int8);
  expect_graph_steps_are_the_plain_ones(lm(gpt), Device::cpu(), PagedDecodeGraphs::Mode::emulated, DType::f32, 1e-5);
}

TEST(PagedDecodeGraphs, BucketedStepsAreThePlainStepsLlama) {
  auto llama = random_model("llama", llama_config(), 5);
  expect_graph_steps_are_the_plain_ones(lm(llama), Device::cpu(), PagedDecodeGraphs::Mode::emulated, DType::bf16, 1e-5);
}

// longrope (Phi-3.5's): a bucket's graph serves a sequence on the short factors beside one fed again on
// the long ones, each reading its tables' rows from the buffer (PagedStep::rope_rows) — the plain steps'
// logits, whose long_rope flags choose the rows on the host
TEST(PagedDecodeGraphs, LongropeStepsReadEachSequencesFactorsFromTheBuffer) {
  nlohmann::json c = llama_config();
  c.erase("sliding_window");
  c["rope_scaling"] = "longrope", c["rope_original_max_position_embeddings"] = 8;
  c["rope_short_factor"] = {1.5, 2.0}, c["rope_long_factor"] = {5.0, 9.0}, c["rope_attention_factor"] = 1.2;
  auto llama = random_model("llama", c, 5);
  const models::LanguageModel& m = lm(llama);
  ASSERT_EQ(m.refeed_at(), 8);
  nn::PagedKVCache plain = m.make_paged_cache(40, 4, Device::cpu(), DType::f32),
                   bucketed = m.make_paged_cache(40, 4, Device::cpu(), DType::f32);
  PagedDecodeGraphs graphs(m, bucketed, 4, PagedDecodeGraphs::Mode::emulated);
  NoGradGuard no_grad;
  // sequence 0: 5 tokens on the short factors; sequence 1: 12 fed from position 0 on the long ones
  std::vector<nn::PagedSequence> a(2), b(2);
  const std::vector<uint8_t> factors = {0, 1};
  std::vector<int32_t> ids;
  std::vector<uint8_t> flags;
  for (size_t i = 0; i < 2; ++i) {
    const int64_t n = i == 0 ? 5 : 12;
    ASSERT_TRUE(plain.reserve(a[i], n + 4));
    ASSERT_TRUE(bucketed.reserve(b[i], n + 4));
    for (int64_t j = 0; j < n; ++j)
      ids.push_back(static_cast<int32_t>((j * 3 + 1 + i) % 23)), flags.push_back(factors[i]);
  }
  const Tensor x = Tensor::from_ints(ids, {static_cast<int64_t>(ids.size())});
  nn::PagedStep sa = plain.plan({&a[0], &a[1]}, {5, 12}), sb = bucketed.plan({&b[0], &b[1]}, {5, 12});
  sa.long_rope = sb.long_rope = flags;
  m.step_paged(x, sa, plain);
  m.step_paged(x, sb, bucketed);
  std::vector<int32_t> next = {3, 7};
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE("step " + std::to_string(k));
    nn::PagedStep step = plain.plan({&a[0], &a[1]}, {1, 1});
    step.long_rope = factors;
    const Tensor want = m.step_paged(Tensor::from_ints(next, {2}), step, plain);
    const Tensor got = graphs.step({&b[0], &b[1]}, next, factors);
    EXPECT_TENSOR_NEAR(got, want, 1e-5);
    next = {static_cast<int32_t>((next[0] + 5) % 23), static_cast<int32_t>((next[1] + 2) % 23)};
  }
  EXPECT_EQ(graphs.replayed(), 3);
  // the long sequence without its flag: refused by name (its position is past the short factors)
  EXPECT_NE(testing::error_of([&] {
              graphs.step({&b[0], &b[1]}, next, {0, 0});
            }).find("longrope's short factors"),
            std::string::npos);
}

TEST(PagedDecodeGraphs, GraphsNeedAGpuAndOneTokenASequence) {
  auto gpt = random_model("gpt", paged_gpt_config(), 3);
  nn::PagedKVCache cache = lm(gpt).make_paged_cache(8, 4, Device::cpu(), DType::f32);
  EXPECT_NE(testing::error_of([&] { PagedDecodeGraphs(lm(gpt), cache, 4, PagedDecodeGraphs::Mode::graph); }).find("need a GPU"),
            std::string::npos);
  PagedDecodeGraphs g(lm(gpt), cache, 4, PagedDecodeGraphs::Mode::emulated);
  EXPECT_TRUE(g.takes({1, 1, 1}));
  EXPECT_FALSE(g.takes({1, 2})) << "a prompt chunk runs as written";
  EXPECT_FALSE(g.takes({1, 1, 1, 1, 1})) << "past the batch's limit";
  nn::PagedSequence s;
  ASSERT_TRUE(cache.reserve(s, 4));
  s.length = 4;
  EXPECT_NE(testing::error_of([&] { g.step({&s}, {1}); }).find("too few for one more"), std::string::npos);
}

TEST(PagedDecodeGraphs, APaddingTokensSlotWritesNothing) {
  const Tensor kc = Tensor::zeros({2, 1, 4, 4}), vc = Tensor::zeros({2, 1, 4, 4});
  NoGradGuard no_grad;
  paged_kv_write(kc, vc, Tensor::ones({2, 1, 4}), Tensor::ones({2, 1, 4}), Tensor::from_ints({-1, 5}, {2}));
  const std::vector<float> k = kc.to_vector();
  EXPECT_EQ(std::count(k.begin(), k.end(), 1.f), 4) << "slot 5's 4 dims alone";
  EXPECT_EQ(k[(1 * 4 + 1) * 4], 1.f);
  EXPECT_NE(testing::error_of([&] {
              paged_kv_write(kc, vc, Tensor::ones({1, 1, 4}), Tensor::ones({1, 1, 4}), Tensor::from_ints({-2}, {1}));
            }).find("slots[0] = -2"),
            std::string::npos);
}

// On a lent GPU (docs/CUDA.md): CUDA graphs, each bucket captured once and replayed, against the
// plain steps on the GPU.
TEST(PagedDecodeGraphsOnAGpu, ReplaysFollowThePlainSteps) {
  if (!cuda::is_available()) GTEST_SKIP() << "this machine shows no CUDA GPU";
  auto gpt = random_model("gpt", paged_gpt_config(), 3);
  gpt->module().to(Device::cuda());
  expect_graph_steps_are_the_plain_ones(lm(gpt), Device::cuda(), PagedDecodeGraphs::Mode::graph, DType::f32, 1e-5);
  auto llama = random_model("llama", llama_config(), 5);
  llama->module().to(Device::cuda());
  expect_graph_steps_are_the_plain_ones(lm(llama), Device::cuda(), PagedDecodeGraphs::Mode::graph, DType::bf16, 1e-5);
}

// Gemma 2's soft-capped scores on a lent GPU (the CUDA-core attention kernels for the prompt and the
// gradient — the tensor-core kernels take no cap —, the paged decoding kernels for the steps): the loss
// and every parameter's gradient as the CPU's, and the graphs' steps as the plain ones
TEST(PagedDecodeGraphsOnAGpu, SoftCappedScoresAsOnTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "this machine shows no CUDA GPU";
  nlohmann::json config = llama_config();
  config["attn_logit_softcapping"] = 0.5;
  auto cpu = random_model("llama", config, 9), gpu = random_model("llama", config, 9);
  gpu->module().to(Device::cuda());
  std::vector<int32_t> ids, next;
  for (int i = 0; i < 24; ++i) ids.push_back((i * 5 + 2) % 23), next.push_back((i * 5 + 7) % 23);
  const Tensor idx = Tensor::from_ints(ids, {2, 12}), targets = Tensor::from_ints(next, {2, 12});
  const Tensor loss_cpu = lm(cpu).loss(idx, targets);
  const Tensor loss_gpu = lm(gpu).loss(idx.to(Device::cuda()), targets.to(Device::cuda()));
  loss_cpu.backward();
  loss_gpu.backward();
  EXPECT_NEAR(loss_gpu.to(Device::cpu()).to_vector()[0], loss_cpu.to_vector()[0], 1e-4);
  const auto pc = cpu->module().named_parameters(), pg = gpu->module().named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    const std::vector<float> want = pc[i].second.grad().to_vector(),
                             got = pg[i].second.grad().to(Device::cpu()).to_vector();
    double num = 0, den = 1e-6;
    for (size_t j = 0; j < want.size(); ++j)
      num = std::max(num, double{std::fabs(got[j] - want[j])}), den = std::max(den, double{std::fabs(want[j])});
    EXPECT_LT(num / den, 1e-4) << pc[i].first;
  }
  expect_graph_steps_are_the_plain_ones(lm(gpu), Device::cuda(), PagedDecodeGraphs::Mode::graph, DType::bf16, 1e-5);
}

}  // namespace
}  // namespace qkv::decode
