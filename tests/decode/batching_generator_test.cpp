// Continuous batching (decode/batching_generator.h): requests from many threads at once get
// decode::generate's tokens — greedy and sampled, with stop tokens, prompts longer than block_size
// and generations past it (the window restarts) — while prompts are fed in chunks beside other
// sequences' decoding tokens and a small pool makes requests wait for pages; a caller that stops
// reading gives its pages back; a request larger than the pool is refused by name, one not admitted
// in time is GeneratorBusy.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "qkv/decode/batching_generator.h"
#include "random_language_model.h"
#include "testing.h"

namespace qkv::decode {
namespace {

using testing::lm;
using testing::random_model;

struct Ask {
  std::vector<int32_t> prompt;
  GenerateOptions opt;
};

std::vector<Ask> asks() {
  std::vector<Ask> a;
  auto add = [&](std::vector<int32_t> prompt, int64_t n, float temperature, uint64_t seed, std::vector<int32_t> stops = {}) {
    Ask x{std::move(prompt), {}};
    x.opt.max_new_tokens = n, x.opt.sampling.temperature = temperature, x.opt.sampling.seed = seed, x.opt.stop_ids = stops;
    a.push_back(x);
  };
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt.push_back((i * 7 + 3) % 11);
  add({1, 2, 3}, 12, 0.f, 1);
  add({5}, 50, 1.f, 2);             // past block_size 32: the window restarts
  add(long_prompt, 6, 0.8f, 3);    // a prompt longer than block_size: its last 32 tokens
  add({4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}, 20, 1.f, 4, {3});  // may end at a stop token
  add({9, 8, 7, 6, 5, 4, 3, 2, 1}, 9, 0.f, 5);
  add({2, 7, 1, 8, 2, 8}, 15, 1.2f, 6);
  // the filters and the penalties, drawn on the logits' device: each its request's history
  a[1].opt.sampling.frequency_penalty = 0.5, a[1].opt.sampling.presence_penalty = 0.3;
  a[3].opt.sampling.repetition_penalty = 1.5;
  a[4].opt.sampling.presence_penalty = 2.0;  // (greedy)
  a[5].opt.sampling.top_k = 4, a[5].opt.sampling.top_p = 0.8, a[5].opt.sampling.repetition_penalty = 0.7;
  return a;
}

// Every request from its own thread at once, against generate alone; returns the steps run in a
// decoding graph's bucket.
int64_t expect_same_tokens(const models::LanguageModel& model, BatchingGeneratorOptions o) {
  const std::vector<Ask> a = asks();
  std::vector<std::vector<int32_t>> alone;
  for (const Ask& x : a) alone.push_back(generate(model, x.prompt, x.opt));
  BatchingGenerator batcher(model, o);
  std::vector<std::vector<int32_t>> together(a.size()), streamed(a.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < a.size(); ++i)
    threads.emplace_back([&, i] {
      together[i] = batcher.generate(a[i].prompt, a[i].opt, [&, i](int32_t id) {
        streamed[i].push_back(id);
        return true;
      });
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(together[i], alone[i]);
    EXPECT_EQ(streamed[i], alone[i]);
  }
  EXPECT_GT(batcher.step_sequences(), batcher.steps()) << "no step held two sequences";
  return batcher.graph_steps();
}

nlohmann::json gpt_config() {
  return {{"vocab_size", 11}, {"block_size", 32}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 16}, {"bias", true}};
}

TEST(BatchingGenerator, GivesEachRequestGeneratesTokens) {
  const auto gpt = random_model("gpt", gpt_config(), 3);
  BatchingGeneratorOptions o;
  o.max_step_tokens = 8, o.page_size = 4;  // prompts in chunks; pages of 4
  expect_same_tokens(lm(gpt), o);
  o.cache_tokens = 80;  // room for 2–3 requests at a time: the others wait for pages
  expect_same_tokens(lm(gpt), o);
  o.max_batch = 2, o.cache_tokens = 0;
  expect_same_tokens(lm(gpt), o);
}

TEST(BatchingGenerator, LlamaWithGroupedQueriesAndAWindow) {
  const auto llama = random_model("llama", {{"vocab_size", 11}, {"hidden_size", 16}, {"intermediate_size", 24},
                                            {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                                            {"num_key_value_heads", 2}, {"max_position_embeddings", 32},
                                            {"sliding_window", 6}},
                                  5);
  BatchingGeneratorOptions o;
  o.max_step_tokens = 5, o.page_size = 8;
  expect_same_tokens(lm(llama), o);
}

// longrope (Phi-3.5's): each request is generate's — within its original 8 tokens on the short factors,
// past them fed again from position 0 on the long ones (in chunks of 5 beside other sequences).
TEST(BatchingGenerator, LongropeFeedsASequenceAgainPastItsShortFactors) {
  const auto llama = random_model("llama",
                                  {{"vocab_size", 11},
                                   {"hidden_size", 16},
                                   {"intermediate_size", 24},
                                   {"num_hidden_layers", 2},
                                   {"num_attention_heads", 4},
                                   {"max_position_embeddings", 32},
                                   {"rope_scaling", "longrope"},
                                   {"rope_original_max_position_embeddings", 8},
                                   {"rope_short_factor", {1.5, 2.0}},
                                   {"rope_long_factor", {5.0, 9.0}},
                                   {"rope_attention_factor", 1.2}},
                                  5);
  BatchingGeneratorOptions o;
  o.max_step_tokens = 5, o.page_size = 4;
  expect_same_tokens(lm(llama), o);
  // … and its decoding steps as graphs (emulated): a bucket's graph reads each sequence's factors from its
  // buffer (PagedStep::rope_rows), so sequences on the short and the long ones share a step
  o.decode_graphs = BatchingGeneratorOptions::DecodeGraphs::on, o.max_batch = 64;
  EXPECT_GT(expect_same_tokens(lm(llama), o), 10);
}

// Decoding graphs (decode/paged_graphs.h), emulated on the CPU: the steps of decoding tokens alone
// padded to buckets, the others as written — each request still generate's. Off, none is bucketed.
TEST(BatchingGenerator, DecodingGraphsGiveEachRequestGeneratesTokens) {
  const auto gpt = random_model("gpt", gpt_config(), 3);
  BatchingGeneratorOptions o;
  o.max_step_tokens = 8, o.page_size = 4, o.max_batch = 5;  // buckets 1, 2, 4, 5
  o.decode_graphs = BatchingGeneratorOptions::DecodeGraphs::on;
  EXPECT_GT(expect_same_tokens(lm(gpt), o), 10);
  o.decode_graphs = BatchingGeneratorOptions::DecodeGraphs::off;
  EXPECT_EQ(expect_same_tokens(lm(gpt), o), 0);
  const auto llama = random_model("llama", {{"vocab_size", 11}, {"hidden_size", 16}, {"intermediate_size", 24},
                                            {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                                            {"num_key_value_heads", 2}, {"max_position_embeddings", 32},
                                            {"sliding_window", 6}},
                                  5);
  o.decode_graphs = BatchingGeneratorOptions::DecodeGraphs::on, o.max_batch = 64;
  EXPECT_GT(expect_same_tokens(lm(llama), o), 10);
}

// A request whose logits hold no distribution (its prompt's token 7 embeds as NaN in a Llama whose
// output layer is its own: only its rows turn NaN) ends alone with the error — by temperature alone
// and with top-p — while the request beside it gets generate's tokens. A temperature so small that dividing by it would overflow the logits samples greedily.
TEST(BatchingGenerator, ARowTheSamplerRefusesEndsItsRequestAlone) {
  const auto llama = random_model("llama", {{"vocab_size", 11}, {"hidden_size", 16}, {"intermediate_size", 24},
                                            {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                                            {"num_key_value_heads", 2}, {"max_position_embeddings", 32}},
                                  5);
  for (auto& [name, p] : llama->module().named_parameters())
    if (name.find("embed_tokens") != std::string::npos) p.detach().data()[7 * 16 + 3] = NAN;
  BatchingGenerator batcher(lm(llama));
  for (double top_p : {1.0, 0.9}) {
    SCOPED_TRACE(top_p);
    GenerateOptions bad, good;
    bad.max_new_tokens = 5, bad.sampling.temperature = 0.8, bad.sampling.top_p = top_p;
    good.max_new_tokens = 12, good.sampling.temperature = 1e-300, good.sampling.top_p = top_p;
    std::string error;
    std::vector<int32_t> got;
    std::thread a([&] { error = testing::error_of([&] { batcher.generate({1, 7, 3}, bad); }); });
    std::thread b([&] { got = batcher.generate({4, 5, 6}, good); });
    a.join(), b.join();
    EXPECT_NE(error.find("no distribution"), std::string::npos) << error;
    GenerateOptions greedy = good;
    greedy.sampling.temperature = 0;
    EXPECT_EQ(got, generate(lm(llama), {4, 5, 6}, greedy)) << "a temperature of 1e-300: greedy";
  }
}

// Prefix caching: requests whose prompts begin alike — a shared preamble, a chat's next turn that
// carries the last one and its answer — take the full pages computed before them and give generate's
// tokens; off, nothing is matched. Concurrent requests too, each from its own thread.
void expect_prefixes_shared(const models::LanguageModel& model) {
  std::vector<int32_t> preamble;
  for (int i = 0; i < 13; ++i) preamble.push_back((i * 5 + 1) % 11);
  std::vector<Ask> a;
  for (int i = 0; i < 4; ++i) {
    Ask x{preamble, {}};
    x.prompt.push_back(i), x.prompt.push_back(i + 3);
    x.opt.max_new_tokens = 8, x.opt.sampling.temperature = i % 2 ? 1.f : 0.f, x.opt.sampling.seed = static_cast<uint64_t>(i);
    a.push_back(x);
  }
  for (bool caching : {true, false}) {
    SCOPED_TRACE(caching);
    BatchingGeneratorOptions o;
    o.page_size = 4, o.prefix_caching = caching;
    BatchingGenerator batcher(model, o);
    // one after another: the first computes the preamble's 3 full pages, the rest take them
    for (const Ask& x : a) EXPECT_EQ(batcher.generate(x.prompt, x.opt), generate(model, x.prompt, x.opt));
    EXPECT_EQ(batcher.prefix_hit_tokens(), caching ? 3 * 12 : 0);
    // the next turn: the first request, its answer and two more tokens — its pages through the answer
    Ask turn = a[0];
    const std::vector<int32_t> answer = generate(model, a[0].prompt, a[0].opt);
    turn.prompt.insert(turn.prompt.end(), answer.begin(), answer.end());
    turn.prompt.insert(turn.prompt.end(), {2, 9});  // 15 + 8 + 2 = 25 tokens: 5 full pages fed before
    turn.opt.max_new_tokens = 6;
    const int64_t before = batcher.prefix_hit_tokens();
    EXPECT_EQ(batcher.generate(turn.prompt, turn.opt), generate(model, turn.prompt, turn.opt));
    EXPECT_EQ(batcher.prefix_hit_tokens() - before, caching ? 20 : 0) << "the answer's last token was never fed";
    // together, from their threads, in a fresh generator: whichever comes first computes the preamble
    BatchingGenerator together(model, o);
    std::vector<std::vector<int32_t>> got(a.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < a.size(); ++i) threads.emplace_back([&, i] { got[i] = together.generate(a[i].prompt, a[i].opt); });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(got[i], generate(model, a[i].prompt, a[i].opt)) << i;
    EXPECT_EQ(together.prefix_hit_tokens(), caching ? 3 * 12 : 0) << "the first fed computes the preamble; the others wait for it";
  }
}

TEST(BatchingGenerator, SharesPromptPrefixesComputedBefore) {
  const auto gpt = random_model("gpt", gpt_config(), 3);
  expect_prefixes_shared(lm(gpt));
  const auto llama = random_model("llama", {{"vocab_size", 11}, {"hidden_size", 16}, {"intermediate_size", 24},
                                            {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                                            {"num_key_value_heads", 2}, {"max_position_embeddings", 32},
                                            {"sliding_window", 6}},
                                  5);
  expect_prefixes_shared(lm(llama));
}

// generate_all: many requests without a thread each, tokens in prompt order, each as generate's.
TEST(BatchingGenerator, GeneratesAllInPromptOrder) {
  const auto gpt = random_model("gpt", gpt_config(), 3);
  BatchingGeneratorOptions o;
  o.page_size = 4, o.max_batch = 2;  // 6 requests, 4 submitted ahead of the one read
  BatchingGenerator batcher(lm(gpt), o);
  const std::vector<Ask> a = asks();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateOptions> opts;
  for (const Ask& x : a) prompts.push_back(x.prompt), opts.push_back(x.opt);
  std::vector<std::pair<size_t, int32_t>> seen;
  const auto got = batcher.generate_all(prompts, opts, [&](size_t i, int32_t id) {
    seen.emplace_back(i, id);
    return i != 4 || std::count_if(seen.begin(), seen.end(), [](const auto& p) { return p.first == 4; }) < 3;
  });
  ASSERT_EQ(got.size(), a.size());
  std::vector<std::pair<size_t, int32_t>> expected;
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<int32_t> alone = generate(lm(gpt), a[i].prompt, a[i].opt);
    if (i == 4) alone.resize(3);  // the caller stopped it at its third token
    EXPECT_EQ(got[i], alone) << i;
    for (int32_t id : alone) expected.emplace_back(i, id);
  }
  EXPECT_EQ(seen, expected) << "request by request, in order";
  prompts[2] = {1, 11};
  EXPECT_NE(testing::error_of([&] { batcher.generate_all(prompts, opts); }).find("prompt 2: token id 11 outside"),
            std::string::npos);
}

// generate_interleaved: tokens as the steps make them, any request's, each request's as generate's,
// on_end once after each one's last token (also for the one its caller stopped); at most
// 2 · max_batch submitted at once; an exception from on_end ends the others and is thrown.
TEST(BatchingGenerator, GeneratesInterleavedAsTheStepsMakeThem) {
  const auto gpt = random_model("gpt", gpt_config(), 3);
  BatchingGeneratorOptions o;
  o.page_size = 4, o.max_batch = 2;  // 6 requests, 4 submitted at once
  BatchingGenerator batcher(lm(gpt), o);
  const std::vector<Ask> a = asks();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateOptions> opts;
  for (const Ask& x : a) prompts.push_back(x.prompt), opts.push_back(x.opt);
  std::vector<std::pair<size_t, int32_t>> seen;  // (request, token); token −1: its end
  auto count = [&](size_t i) { return std::count_if(seen.begin(), seen.end(), [&](const auto& p) { return p.first == i && p.second >= 0; }); };
  const auto got = batcher.generate_interleaved(
      prompts, opts,
      [&](size_t i, int32_t id) {
        EXPECT_EQ(std::count(seen.begin(), seen.end(), std::pair<size_t, int32_t>{i, -1}), 0) << "a token of " << i << " after its end";
        seen.emplace_back(i, id);
        return i != 4 || count(4) < 3;
      },
      [&](size_t i) { seen.emplace_back(i, -1); });
  ASSERT_EQ(got.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<int32_t> alone = generate(lm(gpt), a[i].prompt, a[i].opt);
    if (i == 4) alone.resize(3);  // the caller stopped it at its third token
    EXPECT_EQ(got[i], alone) << i;
    std::vector<int32_t> mine;
    for (const auto& [j, id] : seen)
      if (j == i && id >= 0) mine.push_back(id);
    EXPECT_EQ(mine, alone) << i;
    EXPECT_EQ(std::count(seen.begin(), seen.end(), std::pair<size_t, int32_t>{i, -1}), 1) << "one end for " << i;
  }
  // interleaved: request 1's first token came before request 0 ended (they ran in the same steps);
  // request 4 (submitted once one of the first four ended) not before some request ended
  const auto at = [&](std::pair<size_t, int32_t> p) { return std::find(seen.begin(), seen.end(), p) - seen.begin(); };
  const auto first_of = [&](size_t i) {
    return std::find_if(seen.begin(), seen.end(), [&](const auto& p) { return p.first == i; }) - seen.begin();
  };
  EXPECT_LT(first_of(1), at({0, -1}));
  const auto first_end = std::find_if(seen.begin(), seen.end(), [](const auto& p) { return p.second < 0; }) - seen.begin();
  EXPECT_GT(first_of(4), first_end);
  // an exception from on_end: the others end, the exception is thrown, the batcher serves on
  EXPECT_NE(testing::error_of([&] {
              batcher.generate_interleaved(prompts, opts, nullptr, [](size_t i) {
                if (i == 0) throw Error("caller failed at 0");
              });
            }).find("caller failed at 0"),
            std::string::npos);
  EXPECT_EQ(batcher.generate_interleaved({prompts[0]}, {opts[0]}, nullptr, nullptr)[0], got[0]);
  prompts[2] = {1, 11};
  EXPECT_NE(testing::error_of([&] { batcher.generate_interleaved(prompts, opts, nullptr, nullptr); })
                .find("prompt 2: token id 11 outside"),
            std::string::npos);
}

TEST(BatchingGenerator, StopsWhenTheCallerStopsAndGivesThePagesBack) {
  const auto gpt = random_model("gpt", gpt_config(), 3);
  BatchingGeneratorOptions o;
  o.page_size = 4, o.cache_tokens = 32;  // one full context
  BatchingGenerator batcher(lm(gpt), o);
  GenerateOptions g;
  g.max_new_tokens = 29;  // 3 + 29 = 32 tokens: the whole pool
  for (int round = 0; round < 3; ++round) {
    int seen = 0;
    const auto got = batcher.generate({1, 2, 3}, g, [&](int32_t) { return ++seen < 4; });
    EXPECT_EQ(got.size(), 4u) << "the tokens up to the one the caller stopped at";
  }
  const auto all = batcher.generate({1, 2, 3}, g, nullptr, std::chrono::seconds(30));
  EXPECT_EQ(all.size(), 29u) << "the pool is whole again";
}

TEST(BatchingGenerator, RefusesWhatThePoolCannotHoldAndWhatWaitsTooLong) {
  const auto gpt = random_model("gpt", gpt_config(), 3);
  BatchingGeneratorOptions o;
  o.page_size = 4, o.cache_tokens = 16;
  // the steps wait at a gate (as the server's steps wait for the model's lock)
  std::mutex m;
  std::condition_variable cv;
  bool open = false, entered = false;
  BatchingGenerator batcher(lm(gpt), o, [&](const std::function<void()>& work) {
    std::unique_lock lock(m);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    lock.unlock();
    work();
  });
  GenerateOptions g;
  g.max_new_tokens = 20;
  EXPECT_NE(testing::error_of([&] { batcher.generate({1, 2, 3}, g); }).find("needs 23 tokens of KV cache; the pool holds 16"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { batcher.generate({1, 11}, g); }).find("token id 11 outside the vocabulary"),
            std::string::npos);
  // one request takes the whole pool (3 + 13 tokens) and its first step waits at the gate; another,
  // given 50 ms to be admitted, is GeneratorBusy once the steps go on
  g.max_new_tokens = 13;
  std::vector<int32_t> held;
  std::thread holder([&] { held = batcher.generate({1, 2, 3}, g); });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return entered; });
  }
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard lock(m);
    open = true;
    cv.notify_all();
  });
  bool busy = false;
  try {
    batcher.generate({4}, g, nullptr, std::chrono::milliseconds(50));
  } catch (const GeneratorBusy&) {
    busy = true;
  }
  EXPECT_TRUE(busy);
  opener.join();
  holder.join();
  EXPECT_EQ(held.size(), 13u);
  EXPECT_EQ(batcher.generate({4}, g).size(), 13u) << "the pool is free again";
}

}  // namespace
}  // namespace qkv::decode
