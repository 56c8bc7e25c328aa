#include "qkv/decode/batching_translator.h"

#include <algorithm>

#include "qkv/core/error.h"

namespace qkv::decode {

BatchingTranslator::BatchingTranslator(const Translator& translator, int64_t max_batch,
                                       std::chrono::microseconds max_wait, Around around)
    : translator_(translator), max_batch_(max_batch), max_wait_(max_wait), around_(std::move(around)) {
  QKV_CHECK(max_batch >= 1, "BatchingTranslator: max_batch must be ≥ 1, got ", max_batch);
  QKV_CHECK(max_wait.count() >= 0, "BatchingTranslator: max_wait must be ≥ 0");
  if (!around_) around_ = [](const std::function<void()>& work) { work(); };
  worker_ = std::thread([this] { run(); });
}

BatchingTranslator::~BatchingTranslator() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

std::future<BatchingTranslator::Result> BatchingTranslator::submit(std::vector<std::string> lines,
                                                                    const TranslateOptions& opt) {
  check_options(opt);  // (refused here, in the caller's thread, not in a batch beside others)
  auto job = std::make_shared<Job>(Job{std::move(lines), opt, {}});
  job->opt.on_batch = nullptr;
  auto f = job->done.get_future();
  {
    std::lock_guard lock(mu_);
    queue_.push_back(job);
  }
  cv_.notify_all();
  return f;
}

size_t BatchingTranslator::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

int64_t BatchingTranslator::waiting(const TranslateOptions& o) const {
  int64_t n = 0;
  for (auto& j : queue_)
    if (same_batch(j->opt, o)) n += static_cast<int64_t>(j->lines.size());
  return n;
}

void BatchingTranslator::run() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      const TranslateOptions o = queue_.front()->opt;
      // the oldest request waits at most max_wait for others to join it
      const auto deadline = std::chrono::steady_clock::now() + max_wait_;
      cv_.wait_until(lock, deadline, [&] { return stop_ || waiting(o) >= max_batch_; });
      int64_t n = 0;
      for (auto it = queue_.begin(); it != queue_.end();) {
        const auto k = static_cast<int64_t>((*it)->lines.size());
        if (same_batch((*it)->opt, o) && (batch.empty() || n + k <= max_batch_)) {
          n += k;
          batch.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    std::vector<std::string> lines;
    for (auto& j : batch) lines.insert(lines.end(), j->lines.begin(), j->lines.end());
    try {
      TranslateOptions o = batch[0]->opt;
      o.batch_size = std::max<int64_t>(1, static_cast<int64_t>(lines.size()));
      Result all;
      around_([&] { all = translator_.translate_nbest(lines, o); });
      ++batches_;
      size_t at = 0;
      for (auto& j : batch) {
        Result mine(all.begin() + static_cast<std::ptrdiff_t>(at),
                    all.begin() + static_cast<std::ptrdiff_t>(at + j->lines.size()));
        at += j->lines.size();
        j->done.set_value(std::move(mine));
      }
    } catch (...) {
      for (auto& j : batch) j->done.set_exception(std::current_exception());
    }
  }
}

}  // namespace qkv::decode
