// Static decoding (nn/static_decoding.h: the same shapes every step, keys in slots, for CUDA graphs)
// against the usual cache: every step's log-probabilities through beam search's expansion,
// regrouping, dropped and interleaved rows, over buckets of rows and history widths; the bundled
// translator's beam search gives the same translations batch after batch (the pools and buckets
// reused); a second batch while one decodes gets pools of its own; and what it refuses, it names.
#include <gtest/gtest.h>

#include <cstdlib>

#include "qkv/core/cuda.h"
#include "qkv/decode/translator.h"
#include "qkv/models/load.h"
#include "qkv/nn/static_decoding.h"
#include "qkv/nn/transformer.h"
#include "qkv/ops.h"
#include "testing.h"

namespace qkv::nn {
namespace {

Seq2SeqConfig tiny_config(bool norm_first) {
  Seq2SeqConfig c = Seq2SeqConfig::preset("tiny");
  c.vocab_size = 17, c.d_model = 16, c.nhead = 4, c.dim_feedforward = 24, c.dropout = 0.f, c.max_len = 48;
  c.norm_first = norm_first;
  return c;
}

using testing::ScopedEnv;

// What the bundled translator's tests translate (in batches of 3: the last batch is partial).
const std::vector<std::string> kSentences{"The cat sleeps on the mat.", "I would like a cup of coffee, please.",
                                          "Where is the station?", "She reads a book every evening.",
                                          "We have to leave before it rains.", "Tom doesn't know what to do.",
                                          "It is very cold today."};

// The usual cache and static decoding fed the same tokens and the same regroupings: equal
// log-probabilities at every step (up to the order of the attention's sums), post-LN and pre-LN.
TEST(StaticDecoding, StepsEqualTheUsualCacheThroughBeamRegrouping) {
  for (bool buckets : {false, true})  // each step's own shapes (the CPU's) and a graph's buckets (a GPU's)
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(std::string(norm_first ? "pre-LN" : "post-LN") + (buckets ? ", in buckets" : ""));
    Generator g(11);
    Seq2SeqTransformer m(tiny_config(norm_first), &g);
    m.eval();
    NoGradGuard no_grad;
    // three sources, two of them padded at the end
    const Tensor src = Tensor::from_ints({5, 6, 7, 8, 3, 9, 4, 3, 0, 0, 10, 11, 12, 3, 0}, {3, 5});
    ScopedEnv off("QKV_STATIC_DECODING", "0");
    Seq2SeqTransformer::DecoderState usual = m.start_decoding(src);
    Seq2SeqTransformer::DecoderState fixed = m.start_static_decoding(src);
    ASSERT_FALSE(usual.fixed);
    ASSERT_TRUE(fixed.fixed);
    if (buckets) fixed.fixed->use_buckets();
    int64_t t = 0;
    auto step = [&](const char* when) {
      std::vector<int32_t> tok;
      for (int64_t r = 0; r < usual.rows(); ++r) tok.push_back(static_cast<int32_t>(t == 0 ? 2 : 4 + (t * 5 + r) % 13));
      const Tensor a = m.step(tok, usual), b = m.step(tok, fixed);
      SCOPED_TRACE(std::string(when) + ", step " + std::to_string(t));
      ASSERT_EQ(b.shape(), a.shape());
      EXPECT_TENSOR_NEAR(b, a, 1e-5);
      EXPECT_EQ(fixed.length(), usual.length());
      ++t;
    };
    auto reorder = [&](const std::vector<int64_t>& index) {
      usual.reorder(index, true);
      fixed.reorder(index, true);
      ASSERT_EQ(fixed.rows(), usual.rows());
    };
    reorder({0, 0, 0, 1, 1, 1, 2, 2, 2});  // beam 3: 9 rows (in buckets: 16, 7 of them dummies)
    step("expanded");
    step("expanded");
    reorder({0, 2, 1, 4, 3, 5, 8, 7, 6});  // hypotheses regroup within their sentences
    step("regrouped");
    reorder({6, 7, 8, 3, 4, 5});  // sentence 0 finished; 1 and 2 swap places
    step("a sentence dropped");
    reorder({0, 3, 1, 4});  // interleaved sentences
    for (int i = 0; i < 3; ++i) step("interleaved");
    reorder({1, 1, 0, 3, 2, 2, 3, 0});  // repeats
    while (t < 40) step("past the first 32 positions");  // a wider history bucket
  }
}

// Static decoding by default on the CPU (QKV_STATIC_DECODING=0: the usual cache), and its refusals
// named, each falling back to the usual cache.
TEST(StaticDecoding, TheDefaultOnTheCpuAndRefusalsAreNamed) {
  Generator g(5);
  Seq2SeqTransformer m(tiny_config(false), &g);
  m.eval();
  NoGradGuard no_grad;
  const Tensor good = Tensor::from_ints({5, 6, 3, 0}, {1, 4});
  {
    ScopedEnv off("QKV_STATIC_DECODING", "0");
    EXPECT_FALSE(m.start_decoding(good).fixed);
  }
  {
    ScopedEnv unset("QKV_STATIC_DECODING", nullptr);
    EXPECT_TRUE(m.start_decoding(good).fixed);
    EXPECT_FALSE(m.start_decoding(good, /*use_cache=*/false).fixed);
    const Tensor gap = Tensor::from_ints({5, 0, 3, 0}, {1, 4}), empty = Tensor::from_ints({0, 0}, {1, 2});
    EXPECT_FALSE(m.start_decoding(gap).fixed);
    EXPECT_NE(testing::error_of([&] { m.start_static_decoding(gap); }).find("source 0 has a padding id (0) before its last token"),
              std::string::npos);
    EXPECT_NE(testing::error_of([&] { m.start_static_decoding(empty); }).find("source 0 has no token"), std::string::npos);
    m.train();
    EXPECT_FALSE(m.start_decoding(good).fixed);
    EXPECT_NE(testing::error_of([&] { m.start_static_decoding(good); }).find("training mode"), std::string::npos);
    m.eval();
  }
  // CUDA graphs need a GPU; without one the variable leaves the CPU's decoding as it is
  {
    ScopedEnv graphs("QKV_CUDA_GRAPHS", "1");
    ScopedEnv unset("QKV_STATIC_DECODING", nullptr);
    EXPECT_TRUE(m.start_decoding(good).fixed);
    EXPECT_FALSE(m.start_decoding(good).fixed->decoder().graphs());
    EXPECT_NE(testing::error_of([&] { m.start_static_decoding(good, /*graphs=*/true); }).find("CUDA graphs need the model on a GPU"),
              std::string::npos);
  }
  // a token outside the vocabulary, named before anything runs
  Seq2SeqTransformer::DecoderState s = m.start_static_decoding(good);
  EXPECT_NE(testing::error_of([&] { m.step({17}, s); }).find("outside the vocabulary of 17"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { m.step({2, 2}, s); }).find("2 tokens for 1 decoder rows"), std::string::npos);
}

// Two batches at once: the second gets pools of its own, and both decode as the usual cache.
TEST(StaticDecoding, ABatchWhileAnotherDecodesGetsItsOwnPools) {
  Generator g(3);
  Seq2SeqTransformer m(tiny_config(true), &g);
  m.eval();
  NoGradGuard no_grad;
  const Tensor a_src = Tensor::from_ints({5, 6, 7, 3}, {1, 4}), b_src = Tensor::from_ints({9, 3, 0, 10, 11, 3}, {2, 3});
  ScopedEnv off("QKV_STATIC_DECODING", "0");
  Seq2SeqTransformer::DecoderState a = m.start_static_decoding(a_src), b = m.start_static_decoding(b_src);
  Seq2SeqTransformer::DecoderState ua = m.start_decoding(a_src), ub = m.start_decoding(b_src);
  EXPECT_NE(&a.fixed->decoder(), &b.fixed->decoder());
  for (int32_t tok : {2, 7, 8, 9}) {
    EXPECT_TENSOR_NEAR(m.step({tok}, a), m.step({tok}, ua), 1e-5);
    EXPECT_TENSOR_NEAR(m.step({tok, tok}, b), m.step({tok, tok}, ub), 1e-5);
  }
  // once both are done, the next batch takes the model's own decoder again
  const StaticDecoder* own = &a.fixed->decoder();
  a = {}, b = {};
  EXPECT_EQ(&m.start_static_decoding(a_src).fixed->decoder(), own);
}

// The bundled English→French model: beam 4 through static decoding (the CPU's default) translates as the usual cache,
// in batches of 3 (the decoder's pools and buckets serve one batch after another).
TEST(StaticDecoding, TheBundledTranslatorTranslatesTheSame) {
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  const decode::Translator tr(*t.model, *t.tokenizer);
  const std::vector<std::string>& lines = kSentences;
  decode::TranslateOptions o;
  o.batch_size = 3;
  std::vector<std::string> usual, fixed;
  {
    ScopedEnv off("QKV_STATIC_DECODING", "0");
    usual = tr.translate(lines, o);
  }
  {
    ScopedEnv unset("QKV_STATIC_DECODING", nullptr);
    fixed = tr.translate(lines, o);
  }
  ASSERT_EQ(fixed.size(), usual.size());
  for (size_t i = 0; i < usual.size(); ++i) EXPECT_EQ(fixed[i], usual[i]) << lines[i];
}

// On a lent GPU (docs/CUDA.md): static decoding with CUDA graphs — each bucket's first step run and
// captured, the later ones replayed — steps as the usual cache on the GPU, through the same
// regroupings, and the bundled translator translates the same with graphs (a GPU's default) as with
// QKV_CUDA_GRAPHS=0.
TEST(StaticDecodingOnAGpu, GraphsReplayTheUsualCachesSteps) {
  if (!cuda::is_available()) GTEST_SKIP() << "this machine shows no CUDA GPU";
  ScopedEnv no_graphs("QKV_CUDA_GRAPHS", "0");  // start_decoding: the usual cache
  Generator g(11);
  Seq2SeqTransformer m(tiny_config(false), &g);
  m.eval();
  m.to(Device::cuda());
  NoGradGuard no_grad;
  const Tensor src = Tensor::from_ints({5, 6, 7, 8, 3, 9, 4, 3, 0, 0, 10, 11, 12, 3, 0}, {3, 5});
  Seq2SeqTransformer::DecoderState usual = m.start_decoding(src), fixed = m.start_static_decoding(src, /*graphs=*/true);
  int64_t t = 0;
  auto step = [&] {
    std::vector<int32_t> tok;
    for (int64_t r = 0; r < usual.rows(); ++r) tok.push_back(static_cast<int32_t>(t == 0 ? 2 : 4 + (t * 5 + r) % 13));
    const Tensor a = m.step(tok, usual).to(Device::cpu()), b = m.step(tok, fixed).to(Device::cpu());
    SCOPED_TRACE("step " + std::to_string(t));
    // (f32 GEMMs on the TF32 tensor cores: cuBLAS picks its kernel by the rows, a bucket's 16 against the
    // beams' 9, so another order of the sums — 6e-5 at step 28 on an H200, 2026-12-04)
    EXPECT_TENSOR_NEAR(b, a, 3e-4);
    ++t;
  };
  auto reorder = [&](const std::vector<int64_t>& index) { usual.reorder(index, true), fixed.reorder(index, true); };
  reorder({0, 0, 0, 1, 1, 1, 2, 2, 2});
  for (int i = 0; i < 4; ++i) step();
  reorder({0, 2, 1, 4, 3, 5, 8, 7, 6});
  step();
  reorder({6, 7, 8, 3, 4, 5});
  for (int i = 0; i < 3; ++i) step();
  while (t < 40) step();
  const StaticDecoder& d = fixed.fixed->decoder();
  EXPECT_TRUE(d.graphs()) << "a capture failed (its reason is on stderr)";
  EXPECT_GE(d.captured(), 3);  // rows 16 then 8, widths 32 then 64
  EXPECT_GE(d.replayed(), 30);
}

TEST(StaticDecodingOnAGpu, TheBundledTranslatorTranslatesTheSameWithGraphs) {
  if (!cuda::is_available()) GTEST_SKIP() << "this machine shows no CUDA GPU";
  models::LoadOptions lo;
  lo.device = Device::cuda();
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors", lo);
  const decode::Translator tr(*t.model, *t.tokenizer);
  const std::vector<std::string>& lines = kSentences;
  decode::TranslateOptions o;
  o.batch_size = 3;
  std::vector<std::string> usual;
  {
    ScopedEnv off("QKV_CUDA_GRAPHS", "0");
    usual = tr.translate(lines, o);
  }
  ScopedEnv unset("QKV_CUDA_GRAPHS", nullptr);  // a GPU's default: graphs
  for (int pass = 0; pass < 2; ++pass) {  // the second pass replays the first's graphs
    const std::vector<std::string> graphed = tr.translate(lines, o);
    ASSERT_EQ(graphed.size(), usual.size());
    for (size_t i = 0; i < usual.size(); ++i) EXPECT_EQ(graphed[i], usual[i]) << "pass " << pass << ": " << lines[i];
  }
}

}  // namespace
}  // namespace qkv::nn
