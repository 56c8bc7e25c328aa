// qkv serve -m MODEL… --port 8080 — translation models over HTTP (cpp-httplib from Debian):
//
//   POST /v1/translate  {"sentences": [...], "model"?, "beam_size"?, "length_penalty"?, "n_best"?}
//                       → {"model", "translations": [{"text", "hypotheses", "scores"}]}
//   GET  /v1/models     the loaded models        GET /health      {"status": "ok"}
//   GET  /metrics       Prometheus text: requests by route and status, latency, sentences and
//                       target tokens translated, queue length
//
// Requests that arrive together are translated as one batch: each model has a queue, and its
// worker takes every waiting request with the same decoding options — waiting up to --max-wait-ms
// for more — up to --max-batch sentences, so throughput under load approaches the batched CLI's.
// Limits are checked before any work and answered with a JSON error naming the limit (4xx); the
// server reads no file a request names. SIGINT/SIGTERM stop accepting, finish what is in flight,
// and exit 0.
#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/decode/translator.h"
#include "qkv/models/load.h"

namespace qkv::cli {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct ServeArgs {
  std::vector<std::string> models = {kDefaultTranslator};
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t max_request_bytes = 1 << 20, max_sentences = 64, max_sentence_bytes = 2000, max_batch = 64;
  int64_t max_beam = 16;
  double max_wait_ms = 5, timeout_s = 60;
  int http_threads = 16, threads = 0;
};

// A request's error: its HTTP status and a message naming what was wrong.
struct HttpError {
  int status;
  std::string message;
};

// ---- batching ----------------------------------------------------------------------------------

// One translation model and the queue in front of it.
class TranslationService {
 public:
  struct Options {
    int64_t beam_size = 4;
    float length_penalty = 0.6f;
    bool operator==(const Options&) const = default;
  };
  using Result = std::vector<std::vector<decode::Hypothesis>>;  // per sentence, best first

  TranslationService(std::string name, models::LoadedSeq2Seq loaded, int64_t max_batch, double max_wait_ms)
      : name_(std::move(name)), loaded_(std::move(loaded)), translator_(*loaded_.model, *loaded_.tokenizer),
        max_batch_(max_batch), max_wait_(std::chrono::microseconds(static_cast<int64_t>(max_wait_ms * 1000))) {
    worker_ = std::thread([this] { run(); });
  }
  ~TranslationService() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  const std::string& name() const { return name_; }
  const models::LoadedSeq2Seq& loaded() const { return loaded_; }
  const decode::Translator& translator() const { return translator_; }
  size_t queued() const {
    std::lock_guard lock(mu_);
    return queue_.size();
  }

  // Queues the sentences and returns when their batch is translated.
  std::future<Result> submit(std::vector<std::string> lines, Options opt) {
    auto job = std::make_shared<Job>(Job{std::move(lines), opt, {}});
    auto f = job->done.get_future();
    {
      std::lock_guard lock(mu_);
      queue_.push_back(job);
    }
    cv_.notify_all();
    return f;
  }

 private:
  struct Job {
    std::vector<std::string> lines;
    Options opt;
    std::promise<Result> done;
  };

  // Sentences waiting with options `o`.
  int64_t waiting(const Options& o) const {
    int64_t n = 0;
    for (auto& j : queue_)
      if (j->opt == o) n += static_cast<int64_t>(j->lines.size());
    return n;
  }

  void run() {
    for (;;) {
      std::vector<std::shared_ptr<Job>> batch;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        const Options o = queue_.front()->opt;
        // the first request waits at most max_wait for others to join it
        const auto deadline = Clock::now() + max_wait_;
        cv_.wait_until(lock, deadline, [&] { return stop_ || waiting(o) >= max_batch_; });
        int64_t n = 0;
        for (auto it = queue_.begin(); it != queue_.end();) {
          const auto k = static_cast<int64_t>((*it)->lines.size());
          if ((*it)->opt == o && (batch.empty() || n + k <= max_batch_)) {
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
        decode::TranslateOptions to;
        to.beam_size = batch[0]->opt.beam_size, to.length_penalty = batch[0]->opt.length_penalty;
        to.batch_size = std::max<int64_t>(1, static_cast<int64_t>(lines.size()));
        to.on_warning = [](const std::string&) {};  // over-long lines were refused before
        Result all = translator_.translate_nbest(lines, to);
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

  std::string name_;
  models::LoadedSeq2Seq loaded_;
  decode::Translator translator_;
  int64_t max_batch_;
  Clock::duration max_wait_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::thread worker_;
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
  std::string text(const std::vector<std::unique_ptr<TranslationService>>& services) const {
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
    s += "# HELP qkv_sentences_total Sentences translated.\n# TYPE qkv_sentences_total counter\nqkv_sentences_total " +
         std::to_string(sentences_.load()) + "\n";
    s += "# HELP qkv_target_tokens_total Target tokens produced (best hypotheses).\n"
         "# TYPE qkv_target_tokens_total counter\nqkv_target_tokens_total " +
         std::to_string(tokens_.load()) + "\n";
    s += "# HELP qkv_requests_in_flight Requests being answered.\n# TYPE qkv_requests_in_flight gauge\n"
         "qkv_requests_in_flight " + std::to_string(in_flight_.load()) + "\n";
    s += "# HELP qkv_queue_requests Requests waiting for a batch, per model.\n# TYPE qkv_queue_requests gauge\n";
    for (auto& sv : services)
      s += "qkv_queue_requests{model=\"" + sv->name() + "\"} " + std::to_string(sv->queued()) + "\n";
    return s;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::map<std::string, double> latency_sum_;
  std::map<std::string, int64_t> latency_count_;
  std::atomic<int64_t> sentences_{0}, tokens_{0}, in_flight_{0};
};

// ---- the server --------------------------------------------------------------------------------

class Server {
 public:
  Server(const ServeArgs& a, std::vector<std::unique_ptr<TranslationService>> services)
      : a_(a), services_(std::move(services)) {
    http_.new_task_queue = [n = a.http_threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    http_.set_payload_max_length(static_cast<size_t>(a.max_request_bytes));
    http_.set_read_timeout(10, 0);
    http_.set_write_timeout(10, 0);
    http_.set_keep_alive_max_count(1000);
    // httplib's own refusals (too large, unknown route, bad method) as JSON errors too
    http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string why = res.status == 413 ? "request larger than --max-request-bytes " +
                                                      std::to_string(a_.max_request_bytes)
                              : res.status == 404 ? "no route " + req.method + " " + req.path
                                                  : "HTTP " + std::to_string(res.status);
      error(res, {res.status, why});
    });
    http_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status": "ok"})", "application/json");
    });
    http_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { timed(req, res, [&] { models(res); }); });
    http_.Post("/v1/translate",
               [this](const httplib::Request& req, httplib::Response& res) { timed(req, res, [&] { translate(req, res); }); });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.text(services_), "text/plain; version=0.0.4");
    });
  }

  // Binds (port 0: any free port) and returns the port; then listen() serves until stop().
  int bind() {
    const int port = a_.port == 0 ? http_.bind_to_any_port(a_.host) : (http_.bind_to_port(a_.host, a_.port) ? a_.port : -1);
    QKV_CHECK(port > 0, "serve: cannot listen on ", a_.host, ":", a_.port, " (in use, or not an address of this machine)");
    return port;
  }
  void listen() { http_.listen_after_bind(); }  // returns after stop(), once in-flight requests are done
  void stop() { http_.stop(); }

 private:
  static void error(httplib::Response& res, const HttpError& e) {
    res.status = e.status;
    res.set_content(json{{"error", {{"code", e.status}, {"message", e.message}}}}.dump(), "application/json");
  }
  template <class F>
  void timed(const httplib::Request& req, httplib::Response& res, F f) {
    const auto t0 = Clock::now();
    metrics_.begin();
    try {
      f();
      if (res.status == -1) res.status = 200;  // (httplib fills it in after the handler otherwise)
    } catch (const HttpError& e) {
      error(res, e);
    } catch (const std::exception& e) {
      error(res, {500, e.what()});
    }
    metrics_.end();
    metrics_.request(req.path, res.status, std::chrono::duration<double>(Clock::now() - t0).count());
  }

  void models(httplib::Response& res) {
    json list = json::array();
    for (auto& s : services_)
      list.push_back({{"id", s->name()}, {"kind", "translation"}, {"type", s->loaded().meta.value("model_type", "")},
                      {"path", s->loaded().path}, {"model", s->loaded().meta.value("model", json::object())}});
    res.set_content(json{{"models", list}}.dump(), "application/json");
  }

  TranslationService& service(const json& body) {
    if (!body.contains("model")) {
      if (services_.size() == 1) return *services_[0];
      throw HttpError{400, "\"model\" is required: this server has " + std::to_string(services_.size()) + " models"};
    }
    if (!body["model"].is_string()) throw HttpError{400, "\"model\" must be a string"};
    const std::string name = body["model"].get<std::string>();
    for (auto& s : services_)
      if (s->name() == name) return *s;
    throw HttpError{404, "unknown model \"" + name + "\" (GET /v1/models lists them)"};
  }

  void translate(const httplib::Request& req, httplib::Response& res) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      throw HttpError{400, std::string("the body is not JSON: ") + e.what()};
    }
    if (!body.is_object()) throw HttpError{400, "the body must be a JSON object"};
    for (auto& [k, v] : body.items())
      if (k != "sentences" && k != "model" && k != "beam_size" && k != "length_penalty" && k != "n_best")
        throw HttpError{400, "unknown field \"" + k + "\" (sentences, model, beam_size, length_penalty, n_best)"};
    TranslationService& s = service(body);
    if (!body.contains("sentences") || !body["sentences"].is_array())
      throw HttpError{400, "\"sentences\" must be an array of strings"};
    const json& in = body["sentences"];
    if (in.empty()) throw HttpError{400, "\"sentences\" is empty"};
    if (static_cast<int64_t>(in.size()) > a_.max_sentences)
      throw HttpError{413, std::to_string(in.size()) + " sentences, more than --max-sentences " +
                               std::to_string(a_.max_sentences)};
    std::vector<std::string> lines;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].is_string()) throw HttpError{400, "sentence " + std::to_string(i) + " is not a string"};
      lines.push_back(in[i].get<std::string>());
      if (static_cast<int64_t>(lines.back().size()) > a_.max_sentence_bytes)
        throw HttpError{413, "sentence " + std::to_string(i) + " has " + std::to_string(lines.back().size()) +
                                 " bytes, more than --max-sentence-bytes " + std::to_string(a_.max_sentence_bytes)};
    }
    TranslationService::Options o;
    auto integer = [&](const char* key, int64_t def, int64_t lo, int64_t hi) {
      if (!body.contains(key)) return def;
      if (!body[key].is_number_integer() || body[key].get<int64_t>() < lo || body[key].get<int64_t>() > hi)
        throw HttpError{400, std::string("\"") + key + "\" must be an integer from " + std::to_string(lo) + " to " +
                                 std::to_string(hi)};
      return body[key].get<int64_t>();
    };
    o.beam_size = integer("beam_size", 4, 1, a_.max_beam);
    const int64_t n_best = integer("n_best", 1, 1, o.beam_size);
    if (body.contains("length_penalty")) {
      if (!body["length_penalty"].is_number() || body["length_penalty"].get<double>() < 0 ||
          body["length_penalty"].get<double>() > 10)
        throw HttpError{400, "\"length_penalty\" must be a number from 0 to 10"};
      o.length_penalty = body["length_penalty"].get<float>();
    }
    auto f = s.submit(std::move(lines), o);
    if (f.wait_for(std::chrono::duration<double>(a_.timeout_s)) != std::future_status::ready)
      throw HttpError{503, "not translated within --timeout " + std::to_string(a_.timeout_s) + " s (the server is overloaded)"};
    const TranslationService::Result r = f.get();
    json out = json::array();
    int64_t tokens = 0;
    for (const auto& nbest : r) {
      json hyps = json::array(), scores = json::array();
      for (size_t k = 0; k < nbest.size() && static_cast<int64_t>(k) < n_best; ++k) {
        hyps.push_back(s.translator().decode(nbest[k].tokens));
        scores.push_back(nbest[k].score);
      }
      if (!nbest.empty()) tokens += static_cast<int64_t>(nbest[0].tokens.size()) + 1;  // + EOS
      out.push_back({{"text", hyps.empty() ? "" : hyps[0].get<std::string>()}, {"hypotheses", hyps}, {"scores", scores}});
    }
    metrics_.translated(static_cast<int64_t>(r.size()), tokens);
    res.set_content(json{{"model", s.name()}, {"translations", out}}.dump(), "application/json");
  }

  const ServeArgs& a_;
  std::vector<std::unique_ptr<TranslationService>> services_;
  httplib::Server http_;
  Metrics metrics_;
};

int run_serve(const ServeArgs& a) {
  // SIGINT and SIGTERM are taken by a thread of their own (sigwait), never by a handler that could
  // interrupt a request: blocked here, before any thread starts, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  use_threads(a.threads);

  std::vector<std::unique_ptr<TranslationService>> services;
  for (const std::string& m : a.models) {
    const std::string path = find_model(m);
    QKV_CHECK(models::model_file_kind(path) == models::Kind::seq2seq, "serve: '", path,
              "' is not a translation model (qkv serve serves translation models)");
    std::string name = std::filesystem::path(path).stem().string();
    for (auto& s : services)
      QKV_CHECK(s->name() != name, "serve: two models named \"", name, "\" (", s->loaded().path, " and ", path, ")");
    services.push_back(std::make_unique<TranslationService>(name, models::load_seq2seq(path), a.max_batch, a.max_wait_ms));
  }
  Server server(a, std::move(services));
  const int port = server.bind();
  std::fprintf(stderr, "qkv serve: listening on http://%s:%d (%zu model%s; Ctrl-C stops)\n", a.host.c_str(), port,
               a.models.size(), a.models.size() > 1 ? "s" : "");
  std::fflush(stderr);
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::fprintf(stderr, "qkv serve: %s — finishing the requests in flight\n", sig == SIGINT ? "interrupted" : "terminated");
    server.stop();
  });
  server.listen();
  // listen() returned: either a signal stopped it (the watcher is done) or it failed; wake the
  // watcher in the second case so it can be joined
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  std::fprintf(stderr, "qkv serve: stopped\n");
  return 0;
}

}  // namespace

void add_serve(CLI::App& app) {
  auto* sub = app.add_subcommand("serve", "Serve translation models over HTTP (JSON API, batching of concurrent requests)");
  auto a = std::make_shared<ServeArgs>();
  sub->add_option("-m,--model", a->models, "translation model file(s); each is served under its file name's stem")
      ->capture_default_str()
      ->allow_extra_args(false);
  sub->add_option("--host", a->host, "address to listen on (default 127.0.0.1: this machine only)")->capture_default_str();
  sub->add_option("-p,--port", a->port, "port (0: any free port, printed at start)")->capture_default_str()->check(CLI::Range(0, 65535));
  sub->add_option("--max-request-bytes", a->max_request_bytes, "largest request body")->capture_default_str()->check(greater_than_zero());
  sub->add_option("--max-sentences", a->max_sentences, "most sentences in one request")->capture_default_str()->check(greater_than_zero());
  sub->add_option("--max-sentence-bytes", a->max_sentence_bytes, "longest sentence, in bytes")->capture_default_str()->check(greater_than_zero());
  sub->add_option("--max-batch", a->max_batch, "most sentences translated together (across requests)")->capture_default_str()->check(greater_than_zero());
  sub->add_option("--max-wait-ms", a->max_wait_ms, "how long a request waits for others to share its batch")->capture_default_str()->check(CLI::Range(0.0, 10000.0));
  sub->add_option("--timeout", a->timeout_s, "seconds a request may wait for its translation (503 after)")->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--http-threads", a->http_threads, "connections handled at once")->capture_default_str()->check(CLI::Range(1, 1024));
  add_threads_option(sub, a->threads);
  register_runner(sub, [a] { return run_serve(*a); });
}

}  // namespace qkv::cli
