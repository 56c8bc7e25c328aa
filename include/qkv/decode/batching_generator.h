// Continuous batching for language models (vLLM's and TGI's scheduler, Orca's iteration-level
// batching): callers on any threads ask for generations; one worker runs steps, each one forward pass
// of the model over every running sequence's next token and the prompts of those just admitted (in
// chunks of at most max_step_tokens), over a paged KV cache (nn/paged_kv_cache.h). A sequence joins
// at the next step once the pool has its pages — all it can ever hold, min(its tokens, block_size),
// reserved up front, so a running sequence never waits for memory — and leaves the step it ends
// in, giving its pages to the next. Throughput under many concurrent requests approaches that of one
// batched call; a request's latency is not held to the slowest of a batch.
//
// Each request is decode::generate's, token for token: the same windows past block_size (restart at
// the last block_size/2 tokens), the same sampler and seed, the same stop tokens — up to rounding, as
// its rows share products with others (tests/decode/batching_generator_test.cpp). The tokens are
// drawn on the logits' device — greedy, temperature, top-k, top-p (ops/sample.h: each Sampler's draw,
// one number a row back to the host; QKV_DEVICE_SAMPLING=0 brings every logit back, to compare).
// Models without a paged step (LanguageModel::paged() false) are not for this: the caller runs decode::generate.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/decode/generate.h"
#include "qkv/decode/paged_graphs.h"
#include "qkv/models/model.h"

namespace qkv::decode {

struct BatchingGeneratorOptions {
  int64_t max_batch = 64;         // sequences running at once
  int64_t max_step_tokens = 512;  // tokens one step computes: a longer prompt is fed over several steps
  int64_t page_size = 16;         // tokens per page of the KV cache
  // The pool, in tokens (rounded up to whole pages); 0: room for max_batch sequences of block_size
  // tokens, at most max_cache_bytes of keys and values.
  int64_t cache_tokens = 0;
  int64_t max_cache_bytes = int64_t{1} << 30;
  // A prompt's full pages that an earlier request computed are taken from the cache, not computed
  // again (nn/paged_kv_cache.h; vLLM's automatic prefix caching): requests whose window stays within
  // block_size (prompt and new tokens) publish their pages and match earlier ones; one whose prompt
  // begins as that of a request still being fed waits for it (a step or a few) and then takes its pages.
  bool prefix_caching = true;
  // The keys and values kept: f32, or bf16 — half the bytes, so twice the tokens in max_cache_bytes,
  // each rounded as it is written (vLLM's kv_cache_dtype); the attention still computes in f32.
  DType kv_cache_dtype = DType::f32;
  // Decoding steps as CUDA graphs (decode/paged_graphs.h: a step of decoding tokens only, padded to
  // a bucket, replayed from one graph): `automatic` — on a GPU unless QKV_CUDA_GRAPHS=0 —, `off`, or
  // `on`: on a GPU, and on the CPU emulated (the bucketed steps run as written, host reads refused:
  // the tests' way to check the GPU's steps).
  enum class DecodeGraphs : uint8_t { automatic, off, on };
  DecodeGraphs decode_graphs = DecodeGraphs::automatic;
};

// A request not admitted within the time its caller gave (the pool or the batch stayed full).
class GeneratorBusy : public Error {
 public:
  using Error::Error;
};

class BatchingGenerator {
 public:
  // Runs one step's work (the caller's lock on the model, its thread count …); default: runs it.
  using Around = std::function<void(const std::function<void()>& work)>;

  BatchingGenerator(const models::LanguageModel& model, BatchingGeneratorOptions options = {}, Around around = nullptr);
  ~BatchingGenerator();  // finishes every request queued or running, then joins the worker
  BatchingGenerator(const BatchingGenerator&) = delete;
  BatchingGenerator& operator=(const BatchingGenerator&) = delete;

  // decode::generate's contract, blocking: the new tokens; on_token sees each on the calling thread
  // as the steps make it (a slow on_token delays no other request); returning false ends this
  // request. Not admitted within admit_within: GeneratorBusy. A prompt or request the model cannot
  // take (an id outside the vocabulary, more KV cache than the pool holds): qkv::Error.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                const std::function<bool(int32_t)>& on_token = nullptr,
                                std::chrono::duration<double> admit_within = std::chrono::hours(24 * 365));

  // Many requests at once, without a thread each: the prompts queued in order (each with its own
  // options; two batches' worth ahead of the one read), each one's tokens given to on_token(i, id) in
  // prompt order — request 0's as the steps make them, a later one's kept until the earlier ones end
  // — returning false ends request i alone.
  // Returns each request's new tokens. An error of any request (or thrown by on_token) ends the
  // others and is thrown, the first in prompt order.
  // Each request is admitted within admit_within of its submission, or all end with GeneratorBusy.
  std::vector<std::vector<int32_t>> generate_all(const std::vector<std::vector<int32_t>>& prompts,
                                                 const std::vector<GenerateOptions>& opts,
                                                 const std::function<bool(size_t, int32_t)>& on_token = nullptr,
                                                 std::chrono::duration<double> admit_within = std::chrono::hours(24 * 365));

  // Many requests at once, each one's tokens given to on_token(i, id) as the steps make them,
  // whichever request they belong to (interleaved: OpenAI's streamed choices), and on_end(i) once
  // request i has ended, after its last token; on_token returning false ends request i alone (its
  // on_end still comes). Returns each request's new tokens. At most two batches' worth wait or run
  // at once, the next submitted as one ends. An error of any request (or thrown by on_token or
  // on_end) ends the others and is thrown; each request is admitted within admit_within of its
  // submission, or all end with GeneratorBusy.
  std::vector<std::vector<int32_t>> generate_interleaved(
      const std::vector<std::vector<int32_t>>& prompts, const std::vector<GenerateOptions>& opts,
      const std::function<bool(size_t, int32_t)>& on_token, const std::function<void(size_t)>& on_end,
      std::chrono::duration<double> admit_within = std::chrono::hours(24 * 365));

  size_t queued() const;    // requests waiting for room
  size_t running() const { return running_count_; }  // sequences in the steps
  int64_t steps() const { return steps_; }
  int64_t step_sequences() const { return step_sequences_; }  // summed over steps (÷ steps: the mean batch)
  int64_t prompt_tokens() const { return prompt_tokens_; }  // of the requests admitted
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }  // of those, the ones found in the cache
  // steps replayed from a decoding graph (or, emulated, run in a bucket), and graphs captured
  int64_t graph_steps() const { return graph_steps_; }
  int64_t graphs_captured() const { return graphs_captured_; }
  int64_t cache_pages() const { return cache_.pages(); }
  int64_t cache_page_size() const { return cache_.page_size(); }

 private:
  struct Request;
  struct Channel;  // a lock and condition: a request's own, or shared by generate_interleaved's
  // a prompt's tokens within the vocabulary (the message begins with `where`)
  void check_prompt(const std::vector<int32_t>& prompt, const std::string& where) const;
  // as many options as prompts, each prompt checked (messages begin with `what`: "generate_all", …)
  void check_prompts(const std::vector<std::vector<int32_t>>& prompts, const std::vector<GenerateOptions>& opts,
                     const char* what) const;
  // a request queued (its prompt checked); its tokens, read as they come (the caller's thread)
  std::shared_ptr<Request> submit(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                  std::chrono::duration<double> admit_within, std::shared_ptr<Channel> ch = nullptr);
  std::vector<int32_t> collect(Request& r, const std::function<bool(int32_t)>& on_token);
  void cancel(Request& r);
  void run();
  bool admit(Request& r);                   // under mu_: its pages, or false
  bool would_share(const Request& r) const;  // takes part in prefix caching (its window never restarts)
  bool follows_prefill(const Request& r, const std::vector<std::shared_ptr<Request>>& running) const;
  void finish(Request& r, std::exception_ptr error = nullptr);  // releases its pages, wakes its caller
  void step(std::vector<std::shared_ptr<Request>>& running);

  const models::LanguageModel& model_;
  BatchingGeneratorOptions opt_;
  Around around_;
  nn::PagedKVCache cache_;
  std::unique_ptr<PagedDecodeGraphs> graphs_;  // where decode_graphs asks for them
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  std::atomic<size_t> running_count_{0};
  bool stop_ = false;
  std::atomic<int64_t> steps_{0}, step_sequences_{0}, prompt_tokens_{0}, prefix_hit_tokens_{0};
  std::atomic<int64_t> graph_steps_{0}, graphs_captured_{0};
  std::thread worker_;
};

}  // namespace qkv::decode
