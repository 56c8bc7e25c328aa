// A Translator behind a queue (CTranslate2's TranslatorPool, Marian's server batching): callers
// submit sentences from any thread and get a future; one worker thread takes every waiting request
// whose options can share a batch with the oldest one (same_batch), waiting up to max_wait for more
// to arrive until max_batch sentences wait, and translates them as one batch — so throughput under
// many small requests approaches that of one large batched call. qkv serve's /v1/translate.
//
// Requests run in arrival order among those of the same options; a batch's exception (a hostile
// line the translator refuses) reaches every request of that batch. The destructor finishes the
// queued requests, then joins the worker.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qkv/decode/translator.h"

namespace qkv::decode {

class BatchingTranslator {
 public:
  using Result = std::vector<std::vector<Hypothesis>>;  // per sentence, its n-best list, best first
  // Runs one batch's work (the caller's lock on the model, its thread count …); default: runs it.
  using Around = std::function<void(const std::function<void()>& work)>;

  // max_batch ≥ 1 sentences per batch (a request larger than that is a batch of its own);
  // max_wait ≥ 0: how long the oldest request waits for others to join it.
  BatchingTranslator(const Translator& translator, int64_t max_batch, std::chrono::microseconds max_wait,
                     Around around = nullptr);
  ~BatchingTranslator();
  BatchingTranslator(const BatchingTranslator&) = delete;
  BatchingTranslator& operator=(const BatchingTranslator&) = delete;

  // Queues the lines; the future holds their n-best lists (opt.num_hypotheses of them, at least)
  // once their batch is translated. opt.batch_size and its callbacks are the batcher's own: ignored.
  std::future<Result> submit(std::vector<std::string> lines, const TranslateOptions& opt);

  size_t queued() const;                        // requests waiting
  int64_t batches() const { return batches_; }  // batches translated (sentences / batches: the mean batch)

 private:
  struct Job {
    std::vector<std::string> lines;
    TranslateOptions opt;
    std::promise<Result> done;
  };
  int64_t waiting(const TranslateOptions& o) const;  // sentences queued that can join a batch of o
  void run();

  const Translator& translator_;
  int64_t max_batch_;
  std::chrono::microseconds max_wait_;
  Around around_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::atomic<int64_t> batches_{0};
  std::thread worker_;
};

}  // namespace qkv::decode
