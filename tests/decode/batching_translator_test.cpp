// decode::BatchingTranslator (qkv serve's /v1/translate): requests submitted from many threads at
// once come back as the Translator alone gives them, in their own order; requests of different
// options never share a batch; requests that arrive together do; a batch's error reaches its
// requests and the next batch runs; the destructor finishes what is queued.
#include "qkv/decode/batching_translator.h"

#include <gtest/gtest.h>

#include <thread>

#include "qkv/models/load.h"
#include "testing.h"

namespace qkv::decode {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kLines = {"The cat sleeps.", "I like tea.", "Where is the station?", "Go!",
                                         "We are happy.", "It is raining today.", "He reads a book.", "Thank you."};

TEST(BatchingTranslator, ConcurrentRequestsGetWhatTheTranslatorGivesThemAndShareBatches) {
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  const Translator tr(*t.model, *t.tokenizer);
  TranslateOptions greedy, beam;
  greedy.beam_size = 1, beam.beam_size = 3, beam.num_hypotheses = 2;
  const auto want_greedy = tr.translate_nbest(kLines, greedy), want_beam = tr.translate_nbest(kLines, beam);

  int runs = 0;
  BatchingTranslator b(tr, 64, 200ms, [&](const std::function<void()>& work) { ++runs, work(); });
  std::vector<std::future<BatchingTranslator::Result>> f(kLines.size() * 2);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < kLines.size(); ++i)  // one line per request, greedy and beam interleaved
    clients.emplace_back([&, i] {
      f[2 * i] = b.submit({kLines[i]}, greedy);
      f[2 * i + 1] = b.submit({kLines[i]}, beam);
    });
  for (auto& c : clients) c.join();
  for (size_t i = 0; i < kLines.size(); ++i) {
    const auto g = f[2 * i].get(), m = f[2 * i + 1].get();
    ASSERT_EQ(g.size(), 1u);
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(g[0][0].tokens, want_greedy[i][0].tokens) << kLines[i];
    ASSERT_GE(m[0].size(), 2u);
    for (size_t k = 0; k < 2; ++k) EXPECT_EQ(m[0][k].tokens, want_beam[i][k].tokens) << kLines[i];
  }
  // 16 requests of two options, all queued within the 200 ms the first waits: a batch or two each
  EXPECT_GE(b.batches(), 2);
  EXPECT_LE(b.batches(), 4);
  EXPECT_EQ(runs, b.batches());
  EXPECT_EQ(b.queued(), 0u);
}

TEST(BatchingTranslator, ABatchsErrorReachesItsRequestsAndTheNextBatchRuns) {
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  const Translator tr(*t.model, *t.tokenizer);
  BatchingTranslator b(tr, 8, 0ms);
  TranslateOptions strict;
  strict.max_input_length = -1;  // an over-long line is an error
  std::string long_line;
  for (int i = 0; i < 400; ++i) long_line += "cat ";
  auto bad = b.submit({long_line}, strict);
  EXPECT_NE(testing::error_of([&] { bad.get(); }).find("tokens"), std::string::npos);
  auto good = b.submit({"The cat sleeps."}, TranslateOptions{});
  EXPECT_EQ(good.get().size(), 1u);
  // options out of range are refused at submit, in the caller's thread
  TranslateOptions wide;
  wide.beam_size = kMaxBeamSize + 1;
  EXPECT_NE(testing::error_of([&] { b.submit({"x"}, wide); }).find("beam_size"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { BatchingTranslator(tr, 0, 0ms); }).find("max_batch"), std::string::npos);
}

TEST(BatchingTranslator, TheDestructorFinishesWhatIsQueued) {
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  const Translator tr(*t.model, *t.tokenizer);
  std::vector<std::future<BatchingTranslator::Result>> f;
  {
    BatchingTranslator b(tr, 2, 10s);  // would wait 10 s for a full batch; stopping does not wait
    for (const auto& l : kLines) f.push_back(b.submit({l}, TranslateOptions{}));
  }
  for (auto& x : f) {
    ASSERT_EQ(x.wait_for(0s), std::future_status::ready);
    EXPECT_EQ(x.get().size(), 1u);
  }
}

}  // namespace
}  // namespace qkv::decode
