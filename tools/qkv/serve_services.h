// What `qkv serve` serves (cmd_serve.cpp holds the HTTP side): one service per loaded model, and the
// server's Prometheus metrics.
//
//   TranslationService     a translation model behind decode::BatchingTranslator's queue: requests
//                          that arrive together are translated as one batch (up to max_batch
//                          sentences, waiting up to max_wait for more), so throughput under load
//                          approaches the batched CLI's
//   LanguageModelService   a language model: a GPT or a Llama behind decode::BatchingGenerator —
//                          continuous batching over a paged KV cache, every running generation
//                          one row of each step, requests joining and leaving between steps —
//                          other architectures one generation at a time
//   CaptionerService       an image captioner: /v1/attention only (a picture's words and where
//                          each looked on the ConvNet grid)
//
// Every computation on a model (a batch, an attention view, a generation) holds the model's
// `compute` lock: one at a time per model, each on the server's --threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/parallel.h"
#include "serve_body.h"
#include "qkv/decode/batching_generator.h"
#include "qkv/decode/batching_translator.h"
#include "qkv/decode/translator.h"
#include "qkv/models/load.h"

namespace qkv::cli {

using Clock = std::chrono::steady_clock;

// OpenMP's thread count is per calling thread: each thread that computes sets it (0: the default).
inline void compute_threads(int threads) {
  if (threads > 0) set_num_threads(threads);
}

class ModelService {
 public:
  ModelService(std::string name, std::string kind, std::string path, nlohmann::json meta, int threads)
      : name_(std::move(name)), kind_(std::move(kind)), path_(std::move(path)), meta_(std::move(meta)), threads_(threads) {}
  virtual ~ModelService() = default;
  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }  // "translation", "language_model" or "masked_language_model"
  const std::string& path() const { return path_; }
  const nlohmann::json& meta() const { return meta_; }
  virtual size_t queued() const { return 0; }
  virtual int64_t batches() const { return 0; }  // translate calls made (sentences / batches: the mean batch)
  // a language model's prompt tokens admitted, and those of them its prefix cache held
  virtual std::pair<int64_t, int64_t> prefix_cache() const { return {0, 0}; }

  // The model to compute on, after waiting at most `timeout` for it (else a 503 naming it); the
  // calling thread computes on the server's --threads.
  std::unique_lock<std::timed_mutex> hold(std::chrono::duration<double> timeout) {
    std::unique_lock lock(compute_, std::defer_lock);
    if (!lock.try_lock_for(timeout))
      throw HttpError{503, detail::concat("model \"", name_, "\" busy for longer than --timeout ", timeout.count(),
                                          " s (the server is overloaded)")};
    compute_threads(threads_);
    return lock;
  }

 protected:
  std::timed_mutex compute_;
  std::string name_, kind_, path_;
  nlohmann::json meta_;
  int threads_;
};

class TranslationService : public ModelService {
 public:
  using Result = decode::BatchingTranslator::Result;  // per sentence, best first

  TranslationService(std::string name, models::LoadedSeq2Seq loaded, int threads, int64_t max_batch, double max_wait_ms)
      : ModelService(std::move(name), "translation", loaded.path, loaded.meta, threads),
        loaded_(std::move(loaded)),
        translator_(*loaded_.model, *loaded_.tokenizer),
        batcher_(translator_, max_batch, std::chrono::microseconds(static_cast<int64_t>(max_wait_ms * 1000)),
                 [this](const std::function<void()>& work) {
                   auto held = hold(std::chrono::hours(24));  // (the model's lock, the server's --threads)
                   work();
                 }) {}
  const models::LoadedSeq2Seq& loaded() const { return loaded_; }
  const decode::Translator& translator() const { return translator_; }
  size_t queued() const override { return batcher_.queued(); }
  int64_t batches() const override { return batcher_.batches(); }

  // Queues the sentences; the future is ready when their batch is translated.
  std::future<Result> submit(std::vector<std::string> lines, const decode::TranslateOptions& opt) {
    return batcher_.submit(std::move(lines), opt);
  }

 private:
  models::LoadedSeq2Seq loaded_;
  decode::Translator translator_;
  decode::BatchingTranslator batcher_;  // (last: its worker stops before the translator goes)
};

class LanguageModelService : public ModelService {
 public:
  // batching.max_batch ≥ 1 and a model with a paged step: generations batched; else one at a time.
  LanguageModelService(std::string name, models::LoadedLanguageModel loaded, int threads,
                       const decode::BatchingGeneratorOptions& batching)
      : ModelService(std::move(name), "language_model", loaded.path, loaded.meta, threads), loaded_(std::move(loaded)) {
    if (loaded_.model->paged())
      batcher_ = std::make_unique<decode::BatchingGenerator>(*loaded_.model, batching,
                                                             [this](const std::function<void()>& work) {
                                                               auto held = hold(std::chrono::hours(24));
                                                               work();
                                                             });
    const int64_t room = batcher_ ? batcher_->cache_pages() * batcher_->cache_page_size() : 0;
    QKV_CHECK(!batcher_ || room >= loaded_.model->block_size(), "qkv serve: model \"", name_, "\": --kv-cache-mb holds ",
              room, " tokens of its KV cache in ", dtype_name(batching.kv_cache_dtype), ", fewer than its context of ",
              loaded_.model->block_size(), batching.kv_cache_dtype == DType::f32    ? " (--kv-cache-dtype bf16 holds twice as many, fp8 four times)"
              : batching.kv_cache_dtype == DType::bf16 ? " (--kv-cache-dtype fp8 holds twice as many)"
                                                       : "");
  }
  const models::LoadedLanguageModel& loaded() const { return loaded_; }
  bool batched() const { return batcher_ != nullptr; }
  size_t queued() const override { return batcher_ ? batcher_->queued() : 0; }
  int64_t batches() const override { return batcher_ ? batcher_->steps() : 0; }
  std::pair<int64_t, int64_t> prefix_cache() const override {
    return batcher_ ? std::pair{batcher_->prompt_tokens(), batcher_->prefix_hit_tokens()} : std::pair<int64_t, int64_t>{0, 0};
  }

  // What a request holds while it generates: the model itself (hold) when generations run one at a
  // time; nothing when they are batched (each step holds it). Taken before a stream starts, so that
  // a busy model is a 503, not an error event.
  std::shared_ptr<std::unique_lock<std::timed_mutex>> reserve(std::chrono::duration<double> timeout) {
    if (batcher_) return std::make_shared<std::unique_lock<std::timed_mutex>>();
    return std::make_shared<std::unique_lock<std::timed_mutex>>(hold(timeout));
  }
  // Many generations at once, on_token(i, id) as the steps make them, on_end(i) as each ends
  // (BatchingGenerator::generate_interleaved: none admitted within `timeout` is a 503); unbatched, one
  // after another on the model reserved.
  std::vector<std::vector<int32_t>> generate_interleaved(const std::vector<std::vector<int32_t>>& prompts,
                                                         const std::vector<decode::GenerateOptions>& opts,
                                                         const std::function<bool(size_t, int32_t)>& on_token,
                                                         const std::function<void(size_t)>& on_end,
                                                         std::chrono::duration<double> timeout) {
    if (!batcher_) {
      std::vector<std::vector<int32_t>> out;
      for (size_t i = 0; i < prompts.size(); ++i) {
        out.push_back(decode::generate(*loaded_.model, prompts[i], opts[i], [&](int32_t id) { return on_token(i, id); }));
        on_end(i);
      }
      return out;
    }
    try {
      return batcher_->generate_interleaved(prompts, opts, on_token, on_end, timeout);
    } catch (const decode::GeneratorBusy&) {
      throw busy(timeout);
    }
  }
  // decode::generate's tokens for `prompt`, on_token on this thread: batched with the other requests
  // (admitted within `timeout`, else a 503), or on the model this request reserved.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const decode::GenerateOptions& o,
                                const std::function<bool(int32_t)>& on_token, std::chrono::duration<double> timeout) {
    if (!batcher_) return decode::generate(*loaded_.model, prompt, o, on_token);
    try {
      return batcher_->generate(prompt, o, on_token, timeout);
    } catch (const decode::GeneratorBusy&) {
      throw busy(timeout);
    }
  }

 private:
  HttpError busy(std::chrono::duration<double> timeout) const {
    return HttpError{503, detail::concat("model \"", name_, "\" had no room for another generation within --timeout ",
                                         timeout.count(), " s (the server is overloaded)")};
  }
  models::LoadedLanguageModel loaded_;
  std::unique_ptr<decode::BatchingGenerator> batcher_;  // (last: its worker stops before the model goes)
};

// A masked language model (BERT): its attention (every request computes under the model's lock).
class MaskedLanguageModelService : public ModelService {
 public:
  MaskedLanguageModelService(std::string name, models::LoadedMaskedLanguageModel loaded, int threads)
      : ModelService(std::move(name), "masked_language_model", loaded.path, loaded.meta, threads),
        loaded_(std::move(loaded)) {}
  const models::LoadedMaskedLanguageModel& loaded() const { return loaded_; }

 private:
  models::LoadedMaskedLanguageModel loaded_;
};

// An image captioner (a sequence-to-sequence model whose source is a picture): its attention over
// the ConvNet grid as it writes each word (every request computes under the model's lock).
class CaptionerService : public ModelService {
 public:
  CaptionerService(std::string name, models::LoadedSeq2Seq loaded, int threads)
      : ModelService(std::move(name), "captioner", loaded.path, loaded.meta, threads), loaded_(std::move(loaded)) {}
  const models::LoadedSeq2Seq& loaded() const { return loaded_; }

 private:
  models::LoadedSeq2Seq loaded_;
};

// ---- metrics (Prometheus text format) ----------------------------------------------------------

class Metrics {
 public:
  void request(const std::string& route, int status, double seconds) {
    std::lock_guard lock(mu_);
    ++requests_[{route, status}];
    latency_sum_[route] += seconds;
    ++latency_count_[route];
  }
  void begin() { ++in_flight_; }
  void end() { --in_flight_; }
  void translated(int64_t sentences, int64_t tokens) {
    sentences_ += sentences;
    tokens_ += tokens;
  }
  void generated(int64_t tokens) { generated_ += tokens; }
  std::string text(const std::vector<std::unique_ptr<ModelService>>& services) const {
    std::lock_guard lock(mu_);
    std::string s = "# HELP qkv_requests_total HTTP requests by route and status.\n# TYPE qkv_requests_total counter\n";
    for (auto& [k, n] : requests_)
      s += "qkv_requests_total{route=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"} " +
           std::to_string(n) + "\n";
    s += "# HELP qkv_request_seconds Time from request to response.\n# TYPE qkv_request_seconds summary\n";
    for (auto& [route, sum] : latency_sum_) {
      s += "qkv_request_seconds_sum{route=\"" + route + "\"} " + std::to_string(sum) + "\n";
      s += "qkv_request_seconds_count{route=\"" + route + "\"} " + std::to_string(latency_count_.at(route)) + "\n";
    }
    auto counter = [&](const char* name, const char* help, int64_t v) {
      s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
           std::to_string(v) + "\n";
    };
    counter("qkv_sentences_total", "Sentences translated.", sentences_.load());
    counter("qkv_target_tokens_total", "Target tokens produced (best hypotheses).", tokens_.load());
    counter("qkv_generated_tokens_total", "Tokens generated by language models.", generated_.load());
    s += "# HELP qkv_requests_in_flight Requests being answered.\n# TYPE qkv_requests_in_flight gauge\n"
         "qkv_requests_in_flight " + std::to_string(in_flight_.load()) + "\n";
    s += "# HELP qkv_queue_requests Requests waiting for a batch, per model.\n# TYPE qkv_queue_requests gauge\n";
    for (auto& sv : services)
      s += "qkv_queue_requests{model=\"" + sv->name() + "\"} " + std::to_string(sv->queued()) + "\n";
    s += "# HELP qkv_batches_total Batches translated (sentences / batches: the mean batch), or generation steps run (each one token of every running generation), per model.\n"
         "# TYPE qkv_batches_total counter\n";
    for (auto& sv : services)
      if (sv->kind() == "translation" || sv->kind() == "language_model")
        s += "qkv_batches_total{model=\"" + sv->name() + "\"} " + std::to_string(sv->batches()) + "\n";
    // (vLLM's prefix_cache_queries / prefix_cache_hits, in tokens)
    auto per_language_model = [&](const std::string& name, const char* help, int64_t (*value)(const ModelService&)) {
      s += "# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n";
      for (auto& sv : services)
        if (sv->kind() == "language_model")
          s += name + "{model=\"" + sv->name() + "\"} " + std::to_string(value(*sv)) + "\n";
    };
    per_language_model("qkv_prefix_cache_queries_total", "Prompt tokens of the generations a language model admitted, per model.",
                       [](const ModelService& m) { return m.prefix_cache().first; });
    per_language_model("qkv_prefix_cache_hits_total",
                       "Prompt tokens whose keys and values a language model's prefix cache held (not computed again), per model.",
                       [](const ModelService& m) { return m.prefix_cache().second; });
    return s;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::map<std::string, double> latency_sum_;
  std::map<std::string, int64_t> latency_count_;
  std::atomic<int64_t> sentences_{0}, tokens_{0}, generated_{0}, in_flight_{0};
};

}  // namespace qkv::cli
