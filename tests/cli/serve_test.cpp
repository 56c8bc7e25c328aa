// qkv serve over loopback: the JSON API's round trips against the CLI's translations and
// generations (streamed and not; OpenAI's /v1/completions and /v1/chat/completions too), the attention views (shapes, rows summing to 1, causal masks, the
// head search's formula), an error status naming the problem for each bad request, concurrent
// requests (batched together) equal to sequential ones, the metrics, and SIGTERM finishing the
// request in flight. The viewer page in a real browser: tests/browser/viewer_test.py.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "qkv/io/base64.h"
#include "qkv/io/file.h"
#include "qkv/text/lm_tokenizer.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// `qkv serve ARGS --port 0` in the background; the port it printed; SIGTERM and wait at the end. The
// test is the server's parent (posix_spawn of `sh -c 'cd … && exec qkv serve …'`), so it reaps the
// server the moment it exits: a server started with `&` by system() is reparented to init, whose
// reaping came 1.3–2 s late in CI's containers, which each test then waited for.
class ServeProcess {
 public:
  explicit ServeProcess(const std::string& args) : dir_("serve") {
    log_ = (dir_.path / "serve.log").string();
    const std::string cmd = "cd " + std::string(QKV_SOURCE_DIR) + " && exec " + QKV_CLI_PATH + " serve --port 0 " +
                            args + " > " + log_ + " 2>&1";
    const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
    if (posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0) pid_ = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (pid_ > 0 && port_ == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
      const std::string log = fs::exists(log_) ? io::read_file(log_) : "";  // (the shell may not have made it yet)
      const auto at = log.find("listening on http://127.0.0.1:");
      if (at != std::string::npos) {
        port_ = std::atoi(log.c_str() + at + 30);
      } else if (exited()) {
        break;  // (its log says why)
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
  ~ServeProcess() { stop(); }
  int port() const { return port_; }
  std::string log() const { return fs::exists(log_) ? io::read_file(log_) : "(no log)"; }
  // SIGTERM; true when the process ended within 30 s
  bool stop() {
    if (pid_ <= 0) return true;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 3000; ++i) {
      if (exited()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
    return false;
  }

 private:
  // whether the server has ended (reaped here: pid_ 0 from then on)
  bool exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == 0) return false;
    pid_ = 0;
    return true;
  }

  testing::TempDir dir_;
  std::string log_;
  pid_t pid_ = 0;
  int port_ = 0;
};

json post(int port, const std::string& body, int* status = nullptr, const char* path = "/v1/translate") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto r = c.Post(path, body, "application/json");
  if (!r) return json{{"transport_error", httplib::to_string(r.error())}};
  if (status) *status = r->status;
  return json::parse(r->body);
}

std::vector<std::string> cli_translations(const std::vector<std::string>& lines, const std::string& flags = "") {
  std::string cmd = "cd " + std::string(QKV_SOURCE_DIR) + " && " + QKV_CLI_PATH + " translate " + flags;
  for (auto& l : lines) {
    std::string quoted;  // ' → '\''
    for (char ch : l) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    cmd += " '" + quoted + "'";
  }
  testing::ShellResult r = testing::run_shell(cmd + " 2>/dev/null");
  std::vector<std::string> out;
  for (size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1) out.push_back(r.out.substr(at, nl - at));
  return out;
}

const std::vector<std::string> kServeSentences = {"The cat sat on the mat.", "I think it is going to rain tomorrow.",
                                                  "Where is the station?", "She reads a book every week."};

TEST(Serve, TranslatesAsTheCliDoes) {
  ServeProcess s("");
  ASSERT_GT(s.port(), 0) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["models"][0]["id"], "en-fr");
  int status = 0;
  const json r = post(s.port(), json{{"sentences", kServeSentences}, {"n_best", 2}}.dump(), &status);
  ASSERT_EQ(status, 200) << r.dump();
  const auto expected = cli_translations(kServeSentences);
  ASSERT_EQ(r["translations"].size(), kServeSentences.size());
  for (size_t i = 0; i < kServeSentences.size(); ++i) {
    EXPECT_EQ(r["translations"][i]["text"], expected[i]);
    EXPECT_EQ(r["translations"][i]["hypotheses"].size(), 2u);
    EXPECT_GE(r["translations"][i]["scores"][0].get<double>(), r["translations"][i]["scores"][1].get<double>());
  }
}

// "max_decoding_length" (CTranslate2's name, the CLI's --max-length) caps every output, its EOS
// included, as the CLI's flag does: the same words, fewer than uncapped
TEST(Serve, MaxDecodingLengthCapsTheOutputAsTheCliDoes) {
  ServeProcess s("");
  ASSERT_GT(s.port(), 0) << s.log();
  int status = 0;
  const json capped = post(s.port(), json{{"sentences", kServeSentences}, {"max_decoding_length", 3}}.dump(), &status);
  ASSERT_EQ(status, 200) << capped.dump();
  const json full = post(s.port(), json{{"sentences", kServeSentences}}.dump(), &status);
  ASSERT_EQ(status, 200) << full.dump();
  const auto expected = cli_translations(kServeSentences, "--max-length 3");
  ASSERT_EQ(capped["translations"].size(), kServeSentences.size());
  for (size_t i = 0; i < kServeSentences.size(); ++i) {
    const std::string c = capped["translations"][i]["text"], f = full["translations"][i]["text"];
    EXPECT_EQ(c, expected[i]);
    EXPECT_LT(c.size(), f.size()) << c << " | " << f;
  }
}

TEST(Serve, BadRequestsGetAnErrorNamingTheProblem) {
  ServeProcess s("--max-sentences 3 --max-sentence-bytes 50 --max-request-bytes 2000");
  ASSERT_GT(s.port(), 0) << s.log();
  struct Case {
    std::string body;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"{not json", 400, "not JSON"},
      {"[1, 2]", 400, "JSON object"},
      {R"({"sentences": []})", 400, "is empty"},
      {R"({"sentences": "hello"})", 400, "array of strings"},
      {R"({"sentences": [1]})", 400, "not a string"},
      {R"({"sentences": ["a", "b", "c", "d"]})", 413, "--max-sentences 3"},
      {R"({"sentences": [")" + std::string(60, 'x') + R"("]})", 413, "--max-sentence-bytes 50"},
      {R"({"sentences": ["a"], "model": "nope"})", 404, "unknown model"},
      {R"({"sentences": ["a"], "beam_size": 0})", 400, "beam_size"},
      {R"({"sentences": ["a"], "beam_size": 2, "n_best": 3})", 400, "n_best"},
      {R"({"sentences": ["a"], "max_decoding_length": 0})", 400, "max_decoding_length"},
      {R"({"sentences": ["a"], "max_decoding_length": 1000001})", 400, "max_decoding_length"},
      {R"({"sentences": ["a"], "max_decoding_length": 18446744073709551615})", 400, "max_decoding_length"},
      {R"({"sentences": ["a"], "max_decoding_length": 2.5})", 400, "max_decoding_length"},
      {R"({"sentences": ["a"], "path": "/etc/passwd"})", 400, "unknown field"},
      {R"({"sentences": [")" + std::string(3000, 'x') + R"("]})", 413, "--max-request-bytes 2000"},
  };
  for (const Case& k : cases) {
    int status = 0;
    const json r = post(s.port(), k.body, &status);
    EXPECT_EQ(status, k.status) << k.body.substr(0, 80) << " → " << r.dump();
    ASSERT_TRUE(r.contains("error")) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(k.says), std::string::npos) << r.dump();
  }
  // the server is still well
  int status = 0;
  post(s.port(), R"({"sentences": ["Hello."]})", &status);
  EXPECT_EQ(status, 200);
}

// A sentence longer than the model takes is translated truncated, as the CLI does, and the answer
// says so (the CLI says it on stderr); attention over such a text is refused naming the model's limit
// (it was a 500), for a translation model and a language model alike.
TEST(Serve, OverLongTextIsTruncatedWithAWarningOrRefusedNamingTheModelsLimit) {
  ServeProcess s("--max-sentence-bytes 20000 --max-request-bytes 100000");
  ASSERT_GT(s.port(), 0) << s.log();
  std::string longer;
  for (int i = 0; i < 300; ++i) longer += "the cat sleeps ";
  int status = 0;
  json r = post(s.port(), json{{"sentences", {"Hello.", longer}}, {"beam_size", 1}}.dump(), &status);
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  ASSERT_TRUE(r.contains("warnings")) << r.dump().substr(0, 300);
  ASSERT_EQ(r["warnings"].size(), 1u) << r["warnings"].dump();
  const std::string w = r["warnings"][0];
  EXPECT_NE(w.find("sentence 1: "), std::string::npos) << w;
  EXPECT_NE(w.find("truncated to the first"), std::string::npos) << w;
  EXPECT_EQ(r["translations"].size(), 2u);
  r = post(s.port(), json{{"sentences", {"Hello."}}}.dump(), &status);
  EXPECT_EQ(r["warnings"], json::array()) << r.dump();
  r = post(s.port(), json{{"text", longer}, {"model", "en-fr"}}.dump(), &status, "/v1/attention");
  EXPECT_EQ(status, 413) << r.dump();
  EXPECT_NE(r.dump().find("the model's longest source"), std::string::npos) << r.dump();
  r = post(s.port(), json{{"text", longer}, {"model", "shakespeare-char"}}.dump(), &status, "/v1/attention");
  EXPECT_EQ(status, 413) << r.dump();
  EXPECT_NE(r.dump().find("the model's context"), std::string::npos) << r.dump();
}

TEST(Serve, ConcurrentRequestsEqualSequentialOnesAndAreCounted) {
  ServeProcess s("--max-wait-ms 20");
  ASSERT_GT(s.port(), 0) << s.log();
  std::vector<std::string> sequential;
  for (auto& line : kServeSentences)
    sequential.push_back(post(s.port(), json{{"sentences", {line}}}.dump())["translations"][0]["text"]);
  std::vector<std::future<json>> answers;
  for (int i = 0; i < 16; ++i)
    answers.push_back(std::async(std::launch::async, [&, i] {
      const std::string body =
          json{{"sentences", {kServeSentences[static_cast<size_t>(i) % kServeSentences.size()]}}}.dump();
      json r = post(s.port(), body);
      // a connection the loaded CI machine failed to make (it never reached the server: the
      // request counts below would show it) is made again once
      if (r.contains("transport_error")) r = post(s.port(), body);
      return r;
    }));
  for (int i = 0; i < 16; ++i) {
    const json r = answers[static_cast<size_t>(i)].get();
    ASSERT_TRUE(r.contains("translations")) << r.dump() << "\n" << s.log();
    EXPECT_EQ(r["translations"][0]["text"], sequential[static_cast<size_t>(i) % 4]);
  }
  httplib::Client c("127.0.0.1", s.port());
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("qkv_requests_total{route=\"/v1/translate\",status=\"200\"} 20"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("qkv_sentences_total 20"), std::string::npos) << m->body;
}

TEST(Serve, SigtermFinishesTheRequestInFlight) {
  ServeProcess s("");
  ASSERT_GT(s.port(), 0) << s.log();
  std::vector<std::string> many;
  for (int i = 0; i < 32; ++i) many.push_back(kServeSentences[static_cast<size_t>(i) % 4]);
  auto answer = std::async(std::launch::async, [&] {
    int status = 0;
    json r = post(s.port(), json{{"sentences", many}, {"beam_size", 8}}.dump(), &status);
    return std::make_pair(status, r);
  });
  // SIGTERM once the request is in the server's hands
  httplib::Client c("127.0.0.1", s.port());
  for (int i = 0; i < 3000; ++i) {
    auto m = c.Get("/metrics");
    if (m && m->body.find("qkv_requests_in_flight 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(s.stop()) << s.log();
  auto [status, r] = answer.get();
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["translations"].size(), 32u);
  EXPECT_NE(s.log().find("stopped"), std::string::npos) << s.log();
}

// `qkv generate`'s text for the same prompt, seed and settings (it prints the prompt first)
std::string cli_generation(const std::string& prompt, int64_t n, uint64_t seed, const std::string& more = "") {
  testing::ShellResult r = testing::run_shell("cd " + std::string(QKV_SOURCE_DIR) + " && " + QKV_CLI_PATH +
                                              " generate -m models/shakespeare-char.safetensors --prompt '" + prompt +
                                              "' --max-new-tokens " + std::to_string(n) + " --seed " +
                                              std::to_string(seed) + " --temperature 0.8 " + more + " 2>/dev/null");
  EXPECT_EQ(r.out.rfind(prompt, 0), 0u) << r.out;
  return r.out.substr(prompt.size(), r.out.size() - prompt.size() - 1);  // without the prompt and the final newline
}

TEST(Serve, GeneratesAsTheCliDoesStreamedOrNot) {
  ServeProcess s("");
  ASSERT_GT(s.port(), 0) << s.log();
  const std::string expected = cli_generation("ROMEO:", 60, 7);
  ASSERT_EQ(expected.size(), 60u);  // characters: one per token
  int status = 0;
  const json r = post(s.port(), R"({"prompt": "ROMEO:", "max_new_tokens": 60, "seed": 7, "temperature": 0.8})", &status,
                      "/v1/generate");
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["text"], expected);
  EXPECT_EQ(r["tokens"], 60);
  EXPECT_EQ(r["model"], "shakespeare-char");
  // the penalties and the filters, as the CLI has them (and they change the text)
  const std::string penalized = cli_generation(
      "ROMEO:", 60, 7, "--top-k 20 --top-p 0.9 --repetition-penalty 1.3 --frequency-penalty 0.4 --presence-penalty 0.5");
  EXPECT_NE(penalized, expected);
  const json rp = post(s.port(),
                       R"({"prompt": "ROMEO:", "max_new_tokens": 60, "seed": 7, "temperature": 0.8, "top_k": 20, "top_p": 0.9,
                           "repetition_penalty": 1.3, "frequency_penalty": 0.4, "presence_penalty": 0.5})",
                       &status, "/v1/generate");
  ASSERT_EQ(status, 200) << rp.dump();
  EXPECT_EQ(rp["text"], penalized);

  // streamed: server-sent events, one per token as it is chosen, then the whole text
  httplib::Client c("127.0.0.1", s.port());
  std::string stream;
  std::vector<std::string> chunks;
  httplib::Request req;
  req.method = "POST", req.path = "/v1/generate";
  req.body = R"({"prompt": "ROMEO:", "max_new_tokens": 60, "seed": 7, "temperature": 0.8, "stream": true})";
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    chunks.emplace_back(data, n);
    stream.append(data, n);
    return true;
  };
  auto res = c.send(req);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_GE(chunks.size(), 10u) << "sent in pieces as generated, not at the end";
  std::string joined;
  json done;
  int events = 0;
  for (size_t at = 0, end; (end = stream.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string e = stream.substr(at, end - at);
    ASSERT_EQ(e.rfind("data: ", 0), 0u) << e;
    const json j = json::parse(e.substr(6));
    if (j.contains("done")) done = j;
    else joined += j["text"].get<std::string>(), ++events;
  }
  EXPECT_EQ(events, 60);
  EXPECT_EQ(joined, expected);
  EXPECT_EQ(done["text"], expected);
  EXPECT_EQ(done["finish_reason"], "length");
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("qkv_generated_tokens_total 180"), std::string::npos) << m->body;  // 3 × 60
}

// Generations that arrive together run together (decode/batching_generator.h): each gets the CLI's
// text for its prompt and seed (300 tokens: past the model's context of 64, so each window restarts),
// and the server's steps are fewer than the tokens made.
TEST(Serve, ConcurrentGenerationsAreBatchedAndEachAsTheCliMakesIt) {
  ServeProcess s("");
  ASSERT_GT(s.port(), 0) << s.log();
  const std::vector<std::string> prompts = {"ROMEO:", "JULIET:", "KING:", "First Citizen:", "O", "What"};
  std::vector<std::future<json>> answers;
  for (size_t i = 0; i < prompts.size(); ++i)
    answers.push_back(std::async(std::launch::async, [&, i] {
      const std::string body = json{{"prompt", prompts[i]}, {"max_new_tokens", 300}, {"seed", 11 + i}, {"temperature", 0.8}}.dump();
      json r = post(s.port(), body, nullptr, "/v1/generate");
      if (r.contains("transport_error")) r = post(s.port(), body, nullptr, "/v1/generate");  // (as above)
      return r;
    }));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const json r = answers[i].get();
    ASSERT_TRUE(r.contains("text")) << r.dump() << "\n" << s.log();
    EXPECT_EQ(r["text"], cli_generation(prompts[i], 300, 11 + i)) << prompts[i];
  }
  httplib::Client c("127.0.0.1", s.port());
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  const std::string key = "qkv_batches_total{model=\"shakespeare-char\"} ";
  const size_t at = m->body.find(key);
  ASSERT_NE(at, std::string::npos) << m->body;
  const long steps = std::atol(m->body.c_str() + at + key.size());
  EXPECT_GE(steps, 300) << "a generation's tokens take a step each";
  EXPECT_LT(steps, 6 * 300) << "no step ran two generations";
}

// A prompt a generation before computed is taken from the prefix cache — the same text as the CLI's
// — and counted in the metrics, across requests of the same "cache_salt" only; --no-prefix-caching
// computes every prompt whole.
TEST(Serve, APromptComputedBeforeIsTakenFromThePrefixCache) {
  const std::string prompt = "First Citizen:\nBefore we proceed any further";  // 44 characters: 2 pages of 16
  for (bool caching : {true, false}) {
    ServeProcess s(caching ? "" : "--no-prefix-caching");
    ASSERT_GT(s.port(), 0) << s.log();
    // no salt twice (the second takes 32 tokens), then salt "u1" twice (the first takes none)
    for (const auto& [seed, salt] : std::vector<std::pair<uint64_t, std::string>>{{3, ""}, {4, ""}, {5, "u1"}, {6, "u1"}}) {
      json body = {{"prompt", prompt}, {"max_new_tokens", 16}, {"seed", seed}, {"temperature", 0.8}};
      if (!salt.empty()) body["cache_salt"] = salt;
      const json r = post(s.port(), body.dump(), nullptr, "/v1/generate");
      ASSERT_TRUE(r.contains("text")) << r.dump() << "\n" << s.log();
      EXPECT_EQ(r["text"], cli_generation(prompt, 16, seed)) << seed;
    }
    httplib::Client c("127.0.0.1", s.port());
    auto m = c.Get("/metrics");
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("qkv_prefix_cache_queries_total{model=\"shakespeare-char\"} 176\n"), std::string::npos) << m->body;
    EXPECT_NE(m->body.find(std::string("qkv_prefix_cache_hits_total{model=\"shakespeare-char\"} ") + (caching ? "64" : "0") + "\n"),
              std::string::npos)
        << m->body;
    int status = 0;
    const json bad = post(s.port(), json{{"prompt", prompt}, {"cache_salt", 7}}.dump(), &status, "/v1/generate");
    EXPECT_EQ(status, 400) << bad.dump();
    const json too_long = post(s.port(), json{{"model", "shakespeare-char"}, {"prompt", prompt}, {"cache_salt", std::string(2000, 'x')}}.dump(),
                               &status, "/v1/completions");
    EXPECT_EQ(status, 413) << too_long.dump();
  }
}

TEST(Serve, ABf16KvCacheHoldsTwiceTheTokensAndAnFp8OneFourTimes) {
  // 0.1 MiB: 32 of the Shakespeare GPT's tokens in f32, fewer than its context of 64 — refused, naming
  // the way out; in bf16 twice as many: it serves. 0.05 MiB: 32 tokens in bf16, refused, naming fp8;
  // in fp8 (e4m3) 64: it serves
  auto refused = [](const std::string& args, const std::string& says) {
    const testing::ShellResult r = testing::run_shell("cd " + std::string(QKV_SOURCE_DIR) + " && " + QKV_CLI_PATH +
                                                      " serve --port 0 " + args + " 2>&1");
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << ": " << r.out;
  };
  refused("--kv-cache-mb 0.1", "holds 32 tokens of its KV cache in f32, fewer than its context of 64 (--kv-cache-dtype bf16 "
                               "holds twice as many, fp8 four times)");
  refused("--kv-cache-mb 0.05 --kv-cache-dtype bf16",
          "holds 32 tokens of its KV cache in bf16, fewer than its context of 64 (--kv-cache-dtype fp8 holds twice as many)");
  for (const char* args : {"--kv-cache-mb 0.1 --kv-cache-dtype bf16", "--kv-cache-mb 0.05 --kv-cache-dtype fp8"}) {
    SCOPED_TRACE(args);
    ServeProcess s(args);
    ASSERT_GT(s.port(), 0) << s.log();
    for (uint64_t seed : {3, 4}) {
      const json r = post(s.port(), json{{"prompt", "First Citizen:\n"}, {"max_new_tokens", 40}, {"seed", seed}}.dump(),
                          nullptr, "/v1/generate");
      ASSERT_TRUE(r.contains("text")) << r.dump() << "\n" << s.log();
      EXPECT_EQ(r["tokens"], 40) << r.dump();
    }
    int status = 0;
    post(s.port(), json{{"prompt", "x"}}.dump(), &status, "/v1/generate");
    EXPECT_EQ(status, 200);
  }
}

// A streamed POST's server-sent events: the JSON of each "data: " line; `done` is set by "data: [DONE]".
std::vector<json> sse_events(int port, const char* path, const std::string& body, bool* done, int* status) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto res = c.Post(path, body, "application/json");
  std::vector<json> out;
  *done = false;
  if (!res) return out;
  *status = res->status;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::string& stream = res->body;
  for (size_t at = 0, end; (end = stream.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string e = stream.substr(at, end - at);
    EXPECT_EQ(e.rfind("data: ", 0), 0u) << e;
    if (e == "data: [DONE]") *done = true;
    else {
      EXPECT_FALSE(*done) << "an event after [DONE]";
      out.push_back(json::parse(e.substr(6)));
    }
  }
  return out;
}

// A generation the KV cache has no room for within --timeout is a 503 — a status before any work,
// an error event once a stream has begun — and the server goes on (a streamed one used to end it:
// the stream's exception was not one the HTTP layer caught). The pool holds one context of the
// model's 64 tokens (4 layers × 256 floats a token: 0.25 MiB), which a long generation keeps — long
// enough to outlast the three requests on a fast machine (2,000 tokens took 0.35 s on a Zen 5, and
// the third request found the pool free).
TEST(Serve, AGenerationWithNoRoomInTimeIsA503AndTheServerGoesOn) {
  ServeProcess s("--kv-cache-mb 0.25 --timeout 0.1 --max-new-tokens 15000");
  ASSERT_GT(s.port(), 0) << s.log();
  auto long_one = std::async(std::launch::async, [&] {
    int status = 0;
    const json r = post(s.port(), R"({"prompt": "ROMEO:", "max_new_tokens": 15000, "model": "shakespeare-char"})",
                        &status, "/v1/generate");
    return std::make_pair(status, r);
  });
  httplib::Client c("127.0.0.1", s.port());
  for (int i = 0; i < 3000; ++i) {  // (the long one in the server's hands: it is first in the queue)
    auto m = c.Get("/metrics");
    if (m && m->body.find("qkv_requests_in_flight 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  int status = 0;
  const json r = post(s.port(), R"({"prompt": "O", "max_new_tokens": 5, "model": "shakespeare-char"})", &status, "/v1/generate");
  EXPECT_EQ(status, 503) << r.dump();
  EXPECT_NE(r.dump().find("no room for another generation within --timeout 0.1 s"), std::string::npos) << r.dump();
  bool done = false;
  const std::vector<json> events = sse_events(
      s.port(), "/v1/generate", R"({"prompt": "O", "max_new_tokens": 5, "stream": true, "model": "shakespeare-char"})",
      &done, &status);
  ASSERT_EQ(events.size(), 1u) << s.log();
  EXPECT_EQ(events[0]["error"]["code"], 503) << events[0].dump();
  const std::vector<json> chunks = sse_events(
      s.port(), "/v1/completions", R"({"prompt": "O", "max_tokens": 5, "stream": true, "model": "shakespeare-char"})",
      &done, &status);
  ASSERT_EQ(chunks.size(), 1u) << s.log();
  EXPECT_EQ(chunks[0]["error"]["code"], 503) << chunks[0].dump();
  const auto [long_status, long_answer] = long_one.get();
  EXPECT_EQ(long_status, 200) << long_answer.dump() << s.log();
  EXPECT_EQ(long_answer["tokens"], 15000);
  EXPECT_TRUE(c.Get("/health")) << "the server went on\n" << s.log();
}

TEST(Serve, OpenAiCompletionsAndChatCompletionsStreamedOrNot) {
  ServeProcess s("");
  ASSERT_GT(s.port(), 0) << s.log();
  const std::string expected = cli_generation("ROMEO:", 60, 7);
  // /v1/completions: the CLI's text for the same seed and temperature; unknown fields and nulls ignored
  int status = 0;
  json r = post(s.port(),
                R"({"model": "shakespeare-char", "prompt": "ROMEO:", "max_tokens": 60, "seed": 7, "temperature": 0.8,
                    "logprobs": null, "echo": false, "frequency_penalty": 0, "user": "me", "stop": null})",
                &status, "/v1/completions");
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "shakespeare-char");
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["text"], expected);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 6);
  EXPECT_EQ(r["usage"]["completion_tokens"], 60);
  EXPECT_EQ(r["usage"]["total_tokens"], 66);
  // a stop string cuts the text before it, finish_reason "stop"; a list of prompts: a choice each
  const std::string stop = expected.substr(10, 2);
  r = post(s.port(), json{{"prompt", {"ROMEO:", "ROMEO:"}}, {"max_tokens", 60}, {"seed", 7}, {"temperature", 0.8},
                          {"stop", {stop, "\x01"}}}.dump(), &status, "/v1/completions");
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 2u);
  for (const json& c : r["choices"]) {
    EXPECT_EQ(c["text"], expected.substr(0, expected.find(stop)));
    EXPECT_EQ(c["finish_reason"], "stop");
  }
  EXPECT_EQ(r["choices"][1]["index"], 1);

  // streamed: text_completion chunks joining to the same text, the finish_reason, then [DONE]
  bool done = false;
  std::vector<json> events = sse_events(s.port(), "/v1/completions",
                                        R"({"prompt": "ROMEO:", "max_tokens": 60, "seed": 7, "temperature": 0.8, "stream": true})",
                                        &done, &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  std::string joined;
  for (const json& e : events) {
    EXPECT_EQ(e["object"], "text_completion");
    joined += e["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(joined, expected);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(events.front()["choices"][0]["finish_reason"].is_null());

  // n choices of a prompt, made together: the j-th the CLI's text for seed + j; streamed, the
  // choices' chunks interleaved as the steps make them (OpenAI's), each choice ending with its
  // finish_reason
  const std::vector<std::string> seeded = {cli_generation("ROMEO:", 30, 7), cli_generation("ROMEO:", 30, 8),
                                           cli_generation("ROMEO:", 30, 9)};
  r = post(s.port(), json{{"prompt", "ROMEO:"}, {"max_tokens", 30}, {"seed", 7}, {"temperature", 0.8}, {"n", 3}}.dump(),
           &status, "/v1/completions");
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(r["choices"][j]["index"], j);
    EXPECT_EQ(r["choices"][j]["text"], seeded[j]) << j;
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], 6) << "the prompt counted once";
  EXPECT_EQ(r["usage"]["completion_tokens"], 90);
  events = sse_events(s.port(), "/v1/completions",
                      R"({"prompt": "ROMEO:", "max_tokens": 30, "seed": 7, "temperature": 0.8, "stream": true, "n": 3})", &done,
                      &status);
  EXPECT_TRUE(done);
  std::vector<std::string> texts(3);
  std::vector<int> finished(3, 0);
  size_t first_text_of_1 = events.size(), finish_of_0 = events.size();
  for (size_t k = 0; k < events.size(); ++k) {
    const json& e = events[k];
    const size_t i = e["choices"][0]["index"].get<size_t>();
    ASSERT_LT(i, 3u);
    EXPECT_EQ(finished[i], 0) << "a chunk of choice " << i << " after its finish_reason";
    const std::string piece = e["choices"][0]["text"].get<std::string>();
    texts[i] += piece;
    if (i == 1 && !piece.empty()) first_text_of_1 = std::min(first_text_of_1, k);
    if (!e["choices"][0]["finish_reason"].is_null()) {
      EXPECT_EQ(e["choices"][0]["finish_reason"], "length");
      ++finished[i];
      if (i == 0) finish_of_0 = k;
    }
  }
  EXPECT_EQ(texts, seeded);
  EXPECT_EQ(finished, (std::vector<int>{1, 1, 1}));
  EXPECT_LT(first_text_of_1, finish_of_0) << "choice 1's text streams while choice 0's is still being made";

  // /v1/chat/completions: messages joined as "role: content" lines, then "assistant:"
  const std::string chat_prompt = "system: Speak.\nuser: ROMEO:\nassistant:";
  const std::string chat_expected = cli_generation(chat_prompt, 40, 3);
  const std::string messages =
      R"("messages": [{"role": "system", "content": "Speak."}, {"role": "user", "content": [{"type": "text", "text": "ROMEO:"}]}])";
  r = post(s.port(), R"({)" + messages + R"(, "max_tokens": 40, "seed": 3, "temperature": 0.8, "n": 1})", &status,
           "/v1/chat/completions");
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], chat_expected);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], static_cast<int64_t>(chat_prompt.size()));  // characters: one per token
  EXPECT_EQ(r["usage"]["completion_tokens"], 40);
  events = sse_events(s.port(), "/v1/chat/completions",
                      R"({)" + messages + R"(, "max_tokens": 40, "seed": 3, "temperature": 0.8, "stream": true})", &done,
                      &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  joined.clear();
  for (const json& e : events) {
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    if (e["choices"][0]["delta"].contains("content")) joined += e["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(joined, chat_expected);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");

  // GET /v1/models in OpenAI's shape too
  httplib::Client c("127.0.0.1", s.port());
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  bool found = false;
  for (const json& d : models["data"]) found |= d["id"] == "shakespeare-char" && d["object"] == "model";
  EXPECT_TRUE(found) << m->body;
}

TEST(Serve, OpenAiRoutesAnswerBadRequestsInOpenAisErrorShape) {
  ServeProcess s("--max-sentence-bytes 60 --max-new-tokens 100");
  ASSERT_GT(s.port(), 0) << s.log();
  struct Case {
    const char* path;
    std::string body;
    int status;
    const char* param;  // nullptr: a null param
    std::string says;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{", 400, nullptr, "not JSON"},
      {"/v1/completions", R"({"prompt": "A", "max_tokens": -1})", 400, "max_tokens", "max_tokens"},
      {"/v1/completions", R"({"prompt": "A", "max_tokens": 101})", 400, "max_tokens", "from 1 to 100"},
      {"/v1/completions", R"({"prompt": "A", "max_tokens": "10"})", 400, "max_tokens", "integer"},
      {"/v1/completions", R"({"prompt": 5})", 400, "prompt", "string"},
      {"/v1/completions", R"({"prompt": [1, 2]})", 400, "prompt", "token arrays"},
      {"/v1/completions", R"({})", 400, "prompt", "must be"},
      {"/v1/completions", R"({"prompt": "A", "temperature": 3})", 400, "temperature", "from 0 to 2"},
      {"/v1/completions", R"({"prompt": "A", "top_p": 1.5})", 400, "top_p", "top_p"},
      {"/v1/completions", R"({"prompt": "A", "frequency_penalty": 2.5})", 400, "frequency_penalty", "from -2 to 2"},
      {"/v1/completions", R"({"prompt": "A", "presence_penalty": "high"})", 400, "presence_penalty", "presence_penalty"},
      {"/v1/completions", R"({"prompt": "A", "repetition_penalty": 0})", 400, "repetition_penalty", "above 0"},
      {"/v1/completions", R"({"prompt": "A", "n": 0})", 400, "n", "\"n\""},
      {"/v1/completions", R"({"prompt": ["A", "B"], "n": 40})", 413, "n", "80 choices, more than --max-sentences 64"},
      {"/v1/completions", R"({"prompt": "A", "stop": 5})", 400, "stop", "\"stop\""},
      {"/v1/completions", R"({"prompt": "A", "stop": ["a", "b", "c", "d", "e"]})", 400, "stop", "at most 4"},
      {"/v1/completions", R"({"prompt": "A", "stream": "yes"})", 400, "stream", "true or false"},
      {"/v1/completions", R"({"prompt": "A", "model": "en-fr"})", 400, nullptr, "translation model"},
      {"/v1/completions", R"({"prompt": "A", "model": "gpt-4"})", 404, nullptr, "unknown model"},
      {"/v1/completions", R"({"prompt": ")" + std::string(70, 'A') + R"("})", 413, "prompt", "--max-sentence-bytes 60"},
      {"/v1/chat/completions", R"({"model": "shakespeare-char"})", 400, "messages", "\"messages\""},
      {"/v1/chat/completions", R"({"messages": [{"content": "hi"}]})", 400, "messages", "role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages", "content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "A"}], "max_tokens": -5})", 400, "max_tokens",
       "max_tokens"},
  };
  for (const Case& k : cases) {
    int status = 0;
    const json r = post(s.port(), k.body, &status, k.path);
    EXPECT_EQ(status, k.status) << k.path << " " << k.body.substr(0, 80) << " → " << r.dump();
    ASSERT_TRUE(r.contains("error") && r["error"].is_object()) << r.dump();
    const json& e = r["error"];
    EXPECT_EQ(e["type"], "invalid_request_error") << r.dump();
    if (k.param) EXPECT_EQ(e["param"], k.param) << r.dump();
    else EXPECT_TRUE(e["param"].is_null()) << r.dump();
    EXPECT_NE(e["message"].get<std::string>().find(k.says), std::string::npos) << k.path << " " << r.dump();
  }
  int status = 0;
  post(s.port(), R"({"prompt": "A", "max_tokens": 3})", &status, "/v1/completions");
  EXPECT_EQ(status, 200);
}

// every row of every head sums to 1; causal kinds put no weight on later keys
void expect_weights(const json& kind, bool causal, size_t layers) {
  const size_t Lq = kind["queries"]["tokens"].size(), Lk = kind["keys"]["tokens"].size();
  ASSERT_EQ(kind["layers"].size(), layers) << kind["name"];
  for (const json& heads : kind["layers"])
    for (const json& w : heads) {
      ASSERT_EQ(w.size(), Lq);
      for (size_t i = 0; i < Lq; ++i) {
        ASSERT_EQ(w[i].size(), Lk);
        double sum = 0;
        for (size_t j = 0; j < Lk; ++j) {
          sum += w[i][j].get<double>();
          if (causal && j > i) {
            EXPECT_EQ(w[i][j].get<double>(), 0.0) << kind["name"] << " " << i << "," << j;
          }
        }
        EXPECT_NEAR(sum, 1.0, 1e-4) << kind["name"];
      }
    }
}

TEST(Serve, AttentionOfATranslationEveryLayerAndHeadAndTheHeadSearch) {
  ServeProcess s("");
  ASSERT_GT(s.port(), 0) << s.log();
  const std::string sentence = "The cat didn't cross the street because it was too tired.";
  int status = 0;
  const json r = post(s.port(), json{{"model", "en-fr"}, {"text", sentence}, {"search", {{"query", "it"}, {"key", "Cat"}}}}.dump(),
                      &status, "/v1/attention");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  EXPECT_EQ(r["output"], cli_translations({sentence})[0]);
  ASSERT_EQ(r["kinds"].size(), 3u);
  EXPECT_EQ(r["kinds"][0]["name"], "encoder_self");
  EXPECT_EQ(r["kinds"][1]["name"], "decoder_self");
  EXPECT_EQ(r["kinds"][2]["name"], "cross");
  for (const json& k : r["kinds"]) {
    expect_weights(k, k["name"] == "decoder_self", 3);
    EXPECT_EQ(k["layers"][0].size(), 8u);  // heads
  }
  const json& enc = r["kinds"][0];
  EXPECT_EQ(enc["queries"]["tokens"].back(), "</s>");
  EXPECT_EQ(enc["queries"]["words"][1], "cat");
  EXPECT_EQ(r["kinds"][1]["keys"]["tokens"][0], "<s>");
  EXPECT_EQ(r["kinds"][2]["keys"], enc["keys"]);  // cross: keys are the source

  // the search: "it" and "cat" are in the source only, so every encoder layer and head is ranked,
  // best first, each by the mean over "it"'s tokens of the weight summed over "cat"'s tokens
  const json& ranked = r["search"];
  ASSERT_EQ(ranked.size(), 3u * 8u);
  for (size_t i = 0; i < ranked.size(); ++i) {
    const json& h = ranked[i];
    EXPECT_EQ(h["kind"], "encoder_self");
    if (i > 0) {
      EXPECT_LE(h["weight"].get<double>(), ranked[i - 1]["weight"].get<double>());
    }
    const json& w = enc["layers"][h["layer"].get<size_t>()][h["head"].get<size_t>()];
    double sum = 0;
    int n = 0;
    for (size_t q = 0; q < w.size(); ++q) {
      if (enc["queries"]["word"][q] != h["query_word"]) continue;
      ++n;
      for (size_t k = 0; k < w[q].size(); ++k)
        if (enc["keys"]["word"][k] == h["key_word"]) sum += w[q][k].get<double>();
    }
    EXPECT_EQ(enc["queries"]["words"][h["query_word"].get<size_t>()], "it");
    EXPECT_EQ(enc["keys"]["words"][h["key_word"].get<size_t>()], "cat");
    EXPECT_NEAR(h["weight"].get<double>(), sum / n, 1e-4);
  }
}

TEST(Serve, AttentionOfALanguageModelIsCausal) {
  ServeProcess s("-m models/shakespeare-char.safetensors");
  ASSERT_GT(s.port(), 0) << s.log();
  int status = 0;
  const json r = post(s.port(), R"({"text": "ROMEO: what light"})", &status, "/v1/attention");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  EXPECT_EQ(r["kind"], "language_model");
  ASSERT_EQ(r["kinds"].size(), 1u);
  EXPECT_EQ(r["kinds"][0]["queries"]["tokens"].size(), 17u);  // characters
  EXPECT_EQ(r["kinds"][0]["queries"]["words"], json::array({"ROMEO:", "what", "light"}));
  expect_weights(r["kinds"][0], true, 4);
}

// "detail": "flow" (attention flow, decode/inspect.h's attention_flow): each self-attention kind
// gets "flow", rows summing to 1, causal for a language model, beside the maps; a text of more than
// 128 tokens is a 413 naming the limit (rollout has none).
TEST(Serve, AttentionFlowOfALanguageModel) {
  ServeProcess s("-m models/shakespeare-char.safetensors -m models/en-fr.safetensors");
  ASSERT_GT(s.port(), 0) << s.log();
  int status = 0;
  const json r = post(s.port(), R"({"model": "shakespeare-char", "text": "ROMEO: what light", "detail": "flow"})",
                      &status, "/v1/attention");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  const json& f = r["kinds"][0]["flow"];
  ASSERT_EQ(f.size(), 17u);
  for (size_t i = 0; i < f.size(); ++i) {
    double sum = 0;
    for (size_t j = 0; j < f[i].size(); ++j) {
      sum += f[i][j].get<double>();
      if (j > i) {
        EXPECT_EQ(f[i][j].get<double>(), 0.0);
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
  EXPECT_FALSE(r["kinds"][0].contains("rollout"));
  const json u = post(s.port(), R"({"model": "shakespeare-char", "text": "ROMEO: what light", "detail": "flow",
                                     "encoding": "u8"})", &status, "/v1/attention");
  ASSERT_EQ(status, 200);
  EXPECT_EQ(u["kinds"][0]["flow"]["shape"], json::array({17, 17}));
  std::string longer;  // over 128 source tokens for the translator's encoder (the GPT's context is 64)
  for (int i = 0; i < 6; ++i)
    for (const std::string& sentence : kServeSentences) longer += sentence + " ";
  const json e = post(s.port(), json{{"model", "en-fr"}, {"text", longer}, {"detail", "flow"}, {"beam_size", 1}}.dump(),
                      &status, "/v1/attention");
  EXPECT_EQ(status, 413);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("tokens, more than the 128 attention flow"), std::string::npos)
      << e.dump();
}

// Every kind of model (issue 50 item 4): a recurrent translator's alignment is the "cross" kind with
// 1 layer × 1 head; the captioner answers a picture (base64 PNG) with its caption and each word's
// attention over the ConvNet grid ("image": words × grid cells, "grid": [rows, cols], the picture
// as the model saw it); what a kind has nothing to show for (rollout or the neuron view of a
// recurrent model, text or a detail for the captioner) is a 400 saying why by its type.
TEST(Serve, AttentionOfARecurrentTranslatorAndOfTheCaptioner) {
  testing::TempDir dir("serve-captioner");
  ASSERT_EQ(testing::run_shell("cd " + std::string(QKV_SOURCE_DIR) + " && " + QKV_CLI_PATH +
                               " scenes --split test -n 1 -o " + dir.path.string()).code, 0);
  const std::string png = io::read_file((dir.path / "test-0.png").string());
  const testing::ShellResult cli = testing::run_shell("cd " + std::string(QKV_SOURCE_DIR) + " && " + QKV_CLI_PATH +
                                                      " caption --json -b 3 " + (dir.path / "test-0.png").string());
  ASSERT_EQ(cli.code, 0) << cli.out;
  ServeProcess s("-m models/en-fr-gru.safetensors -m models/captioner.safetensors");
  ASSERT_GT(s.port(), 0) << s.log();
  int status = 0;

  // the GRU translator: its translation, and its alignment as one cross-attention head
  const std::string sentence = "The cat sat on the mat.";
  json r = post(s.port(), json{{"model", "en-fr-gru"}, {"text", sentence}}.dump(), &status, "/v1/attention");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  testing::ShellResult t = testing::run_shell("cd " + std::string(QKV_SOURCE_DIR) + " && " + QKV_CLI_PATH +
                                              " translate -m models/en-fr-gru.safetensors '" + sentence + "' 2>/dev/null");
  EXPECT_EQ(r["output"].get<std::string>() + "\n", t.out);
  ASSERT_EQ(r["kinds"].size(), 1u);
  EXPECT_EQ(r["kinds"][0]["name"], "cross");
  expect_weights(r["kinds"][0], false, 1);
  EXPECT_EQ(r["kinds"][0]["layers"][0].size(), 1u);  // one head
  EXPECT_EQ(r["kinds"][0]["keys"]["tokens"].back(), "</s>");
  for (const char* detail : {"rollout", "flow", "neuron"}) {
    json body = {{"model", "en-fr-gru"}, {"text", sentence}, {"detail", detail}};
    if (std::string(detail) == "neuron") body["neuron"] = {{"layer", 0}, {"head", 0}, {"query", 0}, {"kind", "cross"}};
    r = post(s.port(), body.dump(), &status, "/v1/attention");
    EXPECT_EQ(status, 400) << detail;
    const std::string m = r["error"]["message"].get<std::string>();
    EXPECT_NE(m.find("rnn-attention ("), std::string::npos) << m;
    EXPECT_NE(m.find("1 layer × 1 head"), std::string::npos) << m;
  }

  // the captioner: the CLI's caption, a map per word (and the end) over the 12 × 12 grid
  r = post(s.port(), json{{"model", "captioner"}, {"image", io::base64_encode(png)}}.dump(), &status, "/v1/attention");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  EXPECT_EQ(r["kind"], "captioner");
  EXPECT_EQ(r["output"], json::parse(cli.out)["caption"]);
  ASSERT_EQ(r["kinds"].size(), 1u);
  const json& k = r["kinds"][0];
  EXPECT_EQ(k["name"], "image");
  const int64_t rows = k["grid"][0], cols = k["grid"][1];
  EXPECT_EQ(k["keys"]["tokens"].size(), static_cast<size_t>(rows * cols));
  EXPECT_EQ(k["keys"]["tokens"][1], "0,1");
  const json words = k["queries"]["tokens"];
  EXPECT_EQ(words.back(), "</s>");
  std::string joined;
  for (size_t i = 0; i + 1 < words.size(); ++i) joined += (i ? " " : "") + words[i].get<std::string>();
  EXPECT_EQ(joined, r["output"]);
  expect_weights(k, false, 1);
  EXPECT_EQ(r["picture"]["height"], 96);
  EXPECT_EQ(io::base64_decode(r["picture"]["png"].get<std::string>()).substr(1, 3), "PNG");
  r = post(s.port(), json{{"model", "captioner"}, {"image", io::base64_encode(png)}, {"encoding", "u8"}}.dump(), &status,
           "/v1/attention");
  ASSERT_EQ(status, 200);
  EXPECT_EQ(r["kinds"][0]["layers"]["shape"], json::array({1, 1, words.size(), rows * cols}));

  struct Case {
    json body;
    const char* says;
  } cases[] = {
      {{{"model", "captioner"}, {"image", io::base64_encode(png)}, {"detail", "rollout"}}, "no layers of self-attention"},
      {{{"model", "captioner"}, {"text", "a cat"}}, "it reads \"image\""},
      {{{"model", "captioner"}}, "\"image\" (base64 of a PNG or JPEG) is required"},
      {{{"model", "captioner"}, {"image", io::base64_encode("not a picture")}}, "cannot read the image"},
      {{{"model", "en-fr-gru"}, {"text", "Hi."}, {"image", io::base64_encode(png)}}, "an image captioner's input"},
  };
  for (const Case& c : cases) {
    r = post(s.port(), c.body.dump(), &status, "/v1/attention");
    EXPECT_EQ(status, 400) << c.body.dump().substr(0, 100);
    EXPECT_NE(r["error"]["message"].get<std::string>().find(c.says), std::string::npos) << r.dump();
  }
  post(s.port(), json{{"model", "captioner"}, {"sentences", {"a"}}}.dump(), &status, "/v1/translate");
  EXPECT_EQ(status, 400);  // a captioner translates nothing
}

// A converted BERT: /v1/fill-mask answers as pipeline("fill-mask"); its self-attention reads both ways ([CLS] and [SEP] included; a token attends to
// tokens after it), and the head search ranks its heads; an over-long text is a 413 naming the limit.
TEST(Serve, FillMaskAndAttentionOfAMaskedLanguageModel) {
  testing::TempDir dir("serve-bert");
  const std::string model = (dir.path / "bert.safetensors").string();
  ASSERT_EQ(testing::run_shell(std::string(QKV_CLI_PATH) + " convert --from hf " + QKV_GOLDEN_DIR +
                               "/hf/bert-uncased -o " + model).code, 0);
  ServeProcess s("-m " + model);
  ASSERT_GT(s.port(), 0) << s.log();
  int status = 0;
  const json r = post(s.port(), json{{"text", "The cat sat because it was tired."}, {"search", {{"query", "it"}, {"key", "cat"}}}}.dump(),
                      &status, "/v1/attention");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  EXPECT_EQ(r["kind"], "masked_language_model");
  ASSERT_EQ(r["kinds"].size(), 1u);
  EXPECT_EQ(r["kinds"][0]["name"], "encoder_self");
  const json& tokens = r["kinds"][0]["queries"]["tokens"];
  EXPECT_EQ(tokens.front(), "[CLS]");
  EXPECT_EQ(tokens.back(), "[SEP]");
  EXPECT_EQ(r["kinds"][0]["queries"]["words"][2], "cat");  // "ca" "##t": one word
  expect_weights(r["kinds"][0], false, 2);
  double later = 0;  // weight on keys after the query: none in a causal model
  for (const json& heads : r["kinds"][0]["layers"])
    for (const json& w : heads)
      for (size_t i = 0; i < w.size(); ++i)
        for (size_t j = i + 1; j < w[i].size(); ++j) later += w[i][j].get<double>();
  EXPECT_GT(later, 1.0);
  ASSERT_EQ(r["search"].size(), 8u);  // 2 layers × 4 heads
  std::string longer;
  for (int i = 0; i < 30; ++i) longer += "the cat ";
  post(s.port(), json{{"text", longer}}.dump(), &status, "/v1/attention");
  EXPECT_EQ(status, 413);

  // /v1/fill-mask: pipeline("fill-mask")'s candidates, as the CLI prints them
  const json ref = json::parse(io::read_file(std::string(QKV_GOLDEN_DIR) + "/hf/bert-uncased/reference.json"));
  for (const json& fm : ref["fill_mask"]) {
    const json f = post(s.port(), json{{"text", fm["text"]}, {"top_k", 5}}.dump(), &status, "/v1/fill-mask");
    ASSERT_EQ(status, 200) << f.dump().substr(0, 300);
    ASSERT_EQ(f["masks"].size(), fm["masks"].size());
    for (size_t i = 0; i < fm["masks"].size(); ++i)
      for (size_t j = 0; j < fm["masks"][i].size(); ++j) {
        EXPECT_EQ(f["masks"][i][j]["token"], fm["masks"][i][j]["token"]);
        EXPECT_EQ(f["masks"][i][j]["sequence"], fm["masks"][i][j]["sequence"]);
        EXPECT_NEAR(f["masks"][i][j]["score"].get<double>(), fm["masks"][i][j]["score"].get<double>(), 1e-5);
      }
  }
  json e = post(s.port(), json{{"text", "The cat sat."}}.dump(), &status, "/v1/fill-mask");
  EXPECT_EQ(status, 400);
  EXPECT_NE(e.dump().find("has no [MASK] token"), std::string::npos) << e.dump();
  post(s.port(), json{{"text", "[MASK] " + longer}}.dump(), &status, "/v1/fill-mask");
  EXPECT_EQ(status, 413);
  e = post(s.port(), json{{"text", "The [MASK] sat."}, {"top_k", 0}}.dump(), &status, "/v1/fill-mask");
  EXPECT_EQ(status, 400);
  EXPECT_NE(e.dump().find("top_k"), std::string::npos) << e.dump();
  e = post(s.port(), json{{"text", "The [MASK] sat."}}.dump(), &status, "/v1/generate");
  EXPECT_EQ(status, 400);  // no language model here
}

// The golden Hugging Face folders converted with `qkv convert` into `dir`: "-m FILE" for each (empty
// where a conversion failed, which the test's own checks then show).
std::string converted_goldens(const testing::TempDir& dir, std::initializer_list<const char*> names) {
  std::string models;
  for (const char* name : names) {
    const std::string model = (dir.path / (std::string(name) + ".safetensors")).string();
    const auto r = testing::run_shell(std::string(QKV_CLI_PATH) + " convert --from hf " + QKV_GOLDEN_DIR + "/hf/" +
                                      name + " -o " + model);
    EXPECT_EQ(r.code, 0) << name;
    if (r.code == 0) models += " -m " + model;
  }
  return models;
}

// Extractive question answering served: /v1/answer gives transformers 4.57's pipeline("question-answering")
// answers (tests/golden/hf/qa-roberta) for one question, top_k and a batch; requests that do not fit
// are 400s and 413s naming the field or the limit.
TEST(Serve, QuestionAnsweringAsThePipeline) {
  testing::TempDir dir("serve-qa");
  ServeProcess s(converted_goldens(dir, {"qa-roberta", "bert-seqcls"}) + " --max-sentence-bytes 300");
  ASSERT_GT(s.port(), 0) << s.log();
  const json ref = json::parse(io::read_file(std::string(QKV_GOLDEN_DIR) + "/hf/qa-roberta/reference.json"));
  const json& cases = ref["question_answering"];
  auto same = [](const json& got, const json& want) {
    const json g = got.is_array() ? got : json::array({got}), w = want.is_array() ? want : json::array({want});
    ASSERT_EQ(got.is_array(), want.is_array());
    ASSERT_EQ(g.size(), w.size());
    for (size_t k = 0; k < g.size(); ++k) {
      EXPECT_EQ(g[k]["answer"], w[k]["answer"]);
      EXPECT_EQ(g[k]["start"], w[k]["start"]);
      EXPECT_EQ(g[k]["end"], w[k]["end"]);
      EXPECT_NEAR(g[k]["score"].get<double>(), w[k]["score"].get<double>(), 5e-4 * w[k]["score"].get<double>());
    }
  };
  int status = 0;
  for (size_t i :
       {size_t{0}, size_t{1}, size_t{4}, size_t{9}, size_t{12}}) {  // one, top_k, a short window, accents, a batch
    json body = {{"model", "qa-roberta"}, {"question", cases[i]["question"]}, {"context", cases[i]["context"]}};
    for (auto& [k, v] : cases[i]["args"].items()) body[k] = v;
    const json r = post(s.port(), body.dump(), &status, "/v1/answer");
    ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
    EXPECT_EQ(r["model"], "qa-roberta");
    if (cases[i]["question"].is_array()) {
      ASSERT_EQ(r["results"].size(), cases[i]["result"].size());
      for (size_t k = 0; k < r["results"].size(); ++k) same(r["results"][k], cases[i]["result"][k]);
    } else {
      ASSERT_EQ(r["results"].size(), 1u);
      same(r["results"][0], cases[i]["result"]);
    }
  }
  const std::string context = cases[0]["context"];
  const struct {
    json body;
    int status;
    const char* says;
  } bad[] = {
      {{{"model", "qa-roberta"}, {"question", "Where?"}}, 400, "must be a string or a non-empty array"},
      {{{"model", "qa-roberta"}, {"question", {"a", "b"}}, {"context", context}}, 400, "must both be strings"},
      {{{"model", "qa-roberta"}, {"question", {"a", "b"}}, {"context", {context}}}, 400, "arrays of one length"},
      {{{"model", "qa-roberta"}, {"question", "Where?"}, {"context", context}, {"doc_stride", 30}}, 400, "doc_stride"},
      {{{"model", "qa-roberta"}, {"question", "Where?"}, {"context", context}, {"max_seq_len", 1000}},
       400,
       "max_seq_len"},
      {{{"model", "qa-roberta"}, {"question", "Where?"}, {"context", context}, {"top_k", 0}}, 400, "top_k"},
      {{{"model", "qa-roberta"}, {"question", "Where?"}, {"context", context}, {"topk", 2}}, 400, "unknown field"},
      {{{"model", "qa-roberta"}, {"question", "Where?"}, {"context", std::string(64 * 300 + 1, 'a')}},
       413,
       "64 × --max-sentence-bytes"},
      {{{"model", "qa-roberta"},
        {"question", std::string(280, 'w') + " " + std::string(15, 'x')},
        {"context", context}},
       400,
       "no room"},
      {{{"model", "bert-seqcls"}, {"question", "Where?"}, {"context", context}}, 400, "no question-answering head"},
  };
  for (const auto& b : bad) {
    const json e = post(s.port(), b.body.dump(), &status, "/v1/answer");
    EXPECT_EQ(status, b.status) << b.body.dump().substr(0, 200) << " → " << e.dump();
    EXPECT_NE(e.dump().find(b.says), std::string::npos) << e.dump();
  }
  httplib::Client c("127.0.0.1", s.port());
  EXPECT_TRUE(c.Get("/health")) << "the server went on\n" << s.log();
}

// Multiple choice served: /v1/choose scores the endings as transformers' RobertaForMultipleChoice does
// (tests/golden/hf_mc.json: the softmax of its logits); requests that do not fit are 400s and 413s naming
// the field or the limit.
TEST(Serve, MultipleChoiceAsTransformers) {
  testing::TempDir dir("serve-mc");
  ServeProcess s(converted_goldens(dir, {"mc-roberta", "bert-seqcls"}) + " --max-sentence-bytes 300 --max-sentences 8");
  ASSERT_GT(s.port(), 0) << s.log();
  const json golden = json::parse(io::read_file(std::string(QKV_GOLDEN_DIR) + "/hf_mc.json"));
  json roberta;
  for (const json& c : golden["cases"])
    if (c["case"] == "roberta") roberta = c;
  ASSERT_FALSE(roberta.is_null());
  int status = 0;
  for (size_t n : {size_t{0}, size_t{5}}) {  // (5: an empty header)
    const json& x = golden["examples"][n];
    const json body = {{"model", "mc-roberta"},
                       {"context", x["sent1"]},
                       {"header", x["sent2"]},
                       {"endings", {x["ending0"], x["ending1"], x["ending2"], x["ending3"]}},
                       {"max_length", golden["max_length"]}};
    const json r = post(s.port(), body.dump(), &status, "/v1/choose");
    ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
    EXPECT_EQ(r["model"], "mc-roberta");
    const std::vector<double> z = roberta["logits"][n].get<std::vector<double>>();
    double sum = 0;
    for (double v : z) sum += std::exp(v);
    ASSERT_EQ(r["choices"].size(), 4u);
    size_t best = 0;
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(r["choices"][k]["ending"], x["ending" + std::to_string(k)]);
      EXPECT_NEAR(r["choices"][k]["score"].get<double>(), std::exp(z[k]) / sum, 1e-5);
      if (z[k] > z[best]) best = k;
    }
    EXPECT_EQ(r["best"].get<size_t>(), best);
  }
  const struct {
    json body;
    int status;
    const char* says;
  } bad[] = {
      {{{"model", "mc-roberta"}, {"endings", {"a", "b"}}}, 400, "context\\\" must be a string"},
      {{{"model", "mc-roberta"}, {"context", "c"}, {"endings", "a"}}, 400, "an array of two texts or more"},
      {{{"model", "mc-roberta"}, {"context", "c"}, {"endings", {"a"}}}, 400, "an array of two texts or more"},
      {{{"model", "mc-roberta"}, {"context", "c"}, {"endings", {"a", 5}}}, 400, "endings\\\" must be"},
      {{{"model", "mc-roberta"}, {"context", "c"}, {"endings", {"a", "b"}}, {"header", 5}},
       400,
       "header\\\" must be a string"},
      {{{"model", "mc-roberta"}, {"context", "c"}, {"endings", {"a", "b"}}, {"max_length", 1000}}, 400, "max_length"},
      {{{"model", "mc-roberta"}, {"context", "c"}, {"endings", {"a", "b"}}, {"choices", 2}}, 400, "unknown field"},
      {{{"model", "mc-roberta"}, {"context", std::string(301, 'a')}, {"endings", {"a", "b"}}},
       413,
       "--max-sentence-bytes"},
      {{{"model", "mc-roberta"}, {"context", "c"}, {"endings", json(std::vector<std::string>(9, "e"))}}, 413, "9"},
      {{{"model", "bert-seqcls"}, {"context", "c"}, {"endings", {"a", "b"}}}, 400, "no multiple-choice head"},
  };
  for (const auto& b : bad) {
    const json e = post(s.port(), b.body.dump(), &status, "/v1/choose");
    EXPECT_EQ(status, b.status) << b.body.dump().substr(0, 200) << " → " << e.dump();
    EXPECT_NE(e.dump().find(b.says), std::string::npos) << b.body.dump().substr(0, 200) << " → " << e.dump();
  }
  // the server still answers
  const json ok = post(s.port(), json{{"model", "mc-roberta"}, {"context", "c"}, {"endings", {"a", "b"}}}.dump(),
                       &status, "/v1/choose");
  EXPECT_EQ(status, 200) << ok.dump();
}

// Converted encoders, served together: /v1/classify answers as pipeline("text-classification") and
// pipeline("token-classification"), /v1/embeddings as OpenAI's route with SentenceTransformer.encode's
// vectors, /v1/rerank (and /rerank) as Cohere's and vLLM's route with CrossEncoder.rank's order and
// scores; requests that do not fit the model, or no text, are 400s naming the field.
TEST(Serve, ClassifyAndEmbeddingsOfEncoders) {
  testing::TempDir dir("serve-encoders");
  ServeProcess s(converted_goldens(dir, {"bert-seqcls", "roberta-tokcls", "st-bert", "ce-bert", "deberta-seqcls"}));
  ASSERT_GT(s.port(), 0) << s.log();
  auto golden = [](const char* name) {
    return json::parse(io::read_file(std::string(QKV_GOLDEN_DIR) + "/hf/" + name + "/reference.json"));
  };
  int status = 0;
  // text classification: every label of each text, best first
  const json seq = golden("bert-seqcls");
  json inputs = json::array();
  for (const json& c : seq["text_classification"]) inputs.push_back(c["text"]);
  json r =
      post(s.port(), json{{"model", "bert-seqcls"}, {"inputs", inputs}, {"top_k", 0}}.dump(), &status, "/v1/classify");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  ASSERT_EQ(r["results"].size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    for (size_t j = 0; j < seq["text_classification"][i]["all"].size(); ++j) {
      const json& want = seq["text_classification"][i]["all"][j];
      EXPECT_EQ(r["results"][i][j]["label"], want["label"]);
      EXPECT_NEAR(r["results"][i][j]["score"].get<double>(), want["score"].get<double>(), 1e-5);
    }
  r = post(s.port(), json{{"model", "bert-seqcls"}, {"inputs", "The cat sat."}}.dump(), &status, "/v1/classify");
  ASSERT_EQ(status, 200);
  EXPECT_EQ(r["results"][0].size(), 1u);  // top_k 1 by default
  // token classification, "simple" aggregation
  const json tok = golden("roberta-tokcls");
  const json& ner = tok["token_classification"][0];
  r = post(s.port(),
           json{{"model", "roberta-tokcls"}, {"inputs", ner["text"]}, {"aggregation_strategy", "simple"}}.dump(),
           &status, "/v1/classify");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  ASSERT_EQ(r["results"][0].size(), ner["simple"].size());
  for (size_t j = 0; j < ner["simple"].size(); ++j) {
    EXPECT_EQ(r["results"][0][j]["entity_group"], ner["simple"][j]["entity_group"]);
    EXPECT_EQ(r["results"][0][j]["word"], ner["simple"][j]["word"]);
  }
  // embeddings, OpenAI's shape
  const json st = golden("st-bert")["sentence_embeddings"];
  r = post(s.port(), json{{"model", "st-bert"}, {"input", st["texts"]}}.dump(), &status, "/v1/embeddings");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  EXPECT_EQ(r["object"], "list");
  EXPECT_EQ(r["model"], "st-bert");
  ASSERT_EQ(r["data"].size(), st["texts"].size());
  for (size_t i = 0; i < st["texts"].size(); ++i) {
    EXPECT_EQ(r["data"][i]["object"], "embedding");
    EXPECT_EQ(r["data"][i]["index"], i);
    for (size_t d = 0; d < st["embeddings"][i].size(); ++d)
      EXPECT_NEAR(r["data"][i]["embedding"][d].get<double>(), st["embeddings"][i][d].get<double>(), 1e-5);
  }
  EXPECT_GT(r["usage"]["prompt_tokens"].get<int64_t>(), static_cast<int64_t>(st["texts"].size()));
  // rerank: the documents best first, with their text unless return_documents is false
  const json ce = golden("ce-bert")["cases"][0];
  for (const char* path : {"/v1/rerank", "/rerank"}) {
    r = post(s.port(), json{{"model", "ce-bert"}, {"query", ce["query"]}, {"documents", ce["documents"]}}.dump(),
             &status, path);
    ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
    ASSERT_EQ(r["results"].size(), ce["rank"].size());
    for (size_t i = 0; i < ce["rank"].size(); ++i) {
      EXPECT_EQ(r["results"][i]["index"], ce["rank"][i]["corpus_id"]);
      EXPECT_NEAR(r["results"][i]["relevance_score"].get<double>(), ce["rank"][i]["score"].get<double>(), 1e-5);
      EXPECT_EQ(r["results"][i]["document"]["text"], ce["documents"][ce["rank"][i]["corpus_id"].get<size_t>()]);
    }
    int64_t total = 0;
    for (const json& ids : ce["ids"]) total += static_cast<int64_t>(ids.size());
    EXPECT_EQ(r["usage"]["total_tokens"].get<int64_t>(), total);
  }
  r = post(s.port(),
           json{{"model", "ce-bert"},
                {"query", ce["query"]},
                {"documents", ce["documents"]},
                {"top_n", 2},
                {"return_documents", false}}
               .dump(),
           &status, "/v1/rerank");
  ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
  ASSERT_EQ(r["results"].size(), 2u);
  EXPECT_EQ(r["results"][0]["index"], ce["rank_top2"][0]["corpus_id"]);
  EXPECT_FALSE(r["results"][0].contains("document"));
  // zero-shot: the labels as a list, or one comma-separated string; multi_label and a template
  const json nli = golden("deberta-seqcls");
  for (const json& c : nli["zero_shot"]) {
    json body = {{"model", "deberta-seqcls"}, {"inputs", {c["text"]}}, {"multi_label", c["multi_label"]}};
    std::string joined;
    for (const json& l : c["labels"]) joined += (joined.empty() ? "" : " , ") + l.get<std::string>();
    body["candidate_labels"] = c["multi_label"].get<bool>() ? json(joined) : c["labels"];
    if (!c["template"].is_null()) body["hypothesis_template"] = c["template"];
    r = post(s.port(), body.dump(), &status, "/v1/classify");
    ASSERT_EQ(status, 200) << r.dump().substr(0, 300);
    EXPECT_EQ(r["results"][0]["sequence"], c["text"]);
    EXPECT_EQ(r["results"][0]["labels"], c["result"]["labels"]);
    for (size_t j = 0; j < c["result"]["scores"].size(); ++j)
      EXPECT_NEAR(r["results"][0]["scores"][j].get<double>(), c["result"]["scores"][j].get<double>(), 1e-5);
  }
  // what does not fit: 400 naming the field (OpenAI's error shape on /v1/embeddings)
  struct Case {
    const char* path;
    json body;
    const char* names;
  };
  const std::vector<Case> bad = {
      {"/v1/classify", {{"model", "st-bert"}, {"inputs", "x"}}, "has no classifier"},
      {"/v1/classify", {{"model", "bert-seqcls"}, {"inputs", json::array()}}, "\"inputs\" must be"},
      {"/v1/classify", {{"model", "bert-seqcls"}, {"inputs", {"a", 5}}}, "\"inputs\" must be"},
      {"/v1/classify", {{"model", "bert-seqcls"}, {"inputs", ""}}, "empty text"},
      {"/v1/classify", {{"model", "bert-seqcls"}, {"inputs", "x"}, {"top_k", 9}}, "\"top_k\""},
      {"/v1/classify", {{"model", "bert-seqcls"}, {"inputs", "x"}, {"function_to_apply", "tanh"}}, "function_to_apply"},
      {"/v1/classify",
       {{"model", "bert-seqcls"}, {"inputs", "x"}, {"aggregation_strategy", "simple"}},
       "token classifier"},
      {"/v1/classify", {{"model", "roberta-tokcls"}, {"inputs", "x"}, {"top_k", 2}}, "sequence classifier"},
      {"/v1/classify", {{"model", "roberta-tokcls"}, {"inputs", "x"}, {"ignore_labels", "O"}}, "ignore_labels"},
      {"/v1/classify", {{"model", "bert-seqcls"}, {"inputs", "x"}, {"bogus", 1}}, "unknown field \"bogus\""},
      {"/v1/embeddings", {{"model", "st-bert"}}, "\"input\" must be"},
      {"/v1/embeddings", {{"model", "st-bert"}, {"input", "x"}, {"encoding_format", "base64"}}, "encoding_format"},
      {"/v1/embeddings", {{"model", "st-bert"}, {"input", "x"}, {"dimensions", 8}}, "dimensions"},
      {"/v1/rerank", {{"model", "bert-seqcls"}, {"query", "q"}, {"documents", {"d"}}}, "not a cross-encoder"},
      {"/v1/rerank", {{"model", "st-bert"}, {"query", "q"}, {"documents", {"d"}}}, "not a cross-encoder"},
      {"/v1/rerank", {{"model", "ce-bert"}, {"documents", {"d"}}}, "\"query\""},
      {"/v1/rerank", {{"model", "ce-bert"}, {"query", "q"}}, "\"documents\" must be"},
      {"/v1/rerank", {{"model", "ce-bert"}, {"query", "q"}, {"documents", {"d", 3}}}, "\"documents\" must be"},
      {"/v1/rerank", {{"model", "ce-bert"}, {"query", "q"}, {"documents", {"d"}}, {"top_n", 2}}, "\"top_n\""},
      {"/v1/rerank",
       {{"model", "ce-bert"}, {"query", "q"}, {"documents", {"d"}}, {"return_documents", "yes"}},
       "return_documents"},
      {"/rerank", {{"model", "ce-bert"}, {"query", "q"}, {"documents", {"d"}}, {"rank_fields", 1}}, "unknown field"},
      {"/v1/classify", {{"model", "deberta-seqcls"}, {"inputs", "x"}, {"candidate_labels", " , "}}, "no label"},
      {"/v1/classify",
       {{"model", "deberta-seqcls"}, {"inputs", "x"}, {"candidate_labels", {"a", 1}}},
       "candidate_labels"},
      {"/v1/classify",
       {{"model", "deberta-seqcls"}, {"inputs", "x"}, {"candidate_labels", "a"}, {"hypothesis_template", "no field"}},
       "has no {}"},
      {"/v1/classify",
       {{"model", "deberta-seqcls"}, {"inputs", "x"}, {"candidate_labels", "a"}, {"multi_label", "yes"}},
       "multi_label"},
      {"/v1/classify",
       {{"model", "deberta-seqcls"}, {"inputs", "x"}, {"candidate_labels", "a"}, {"top_k", 2}},
       "top_k"},
      {"/v1/classify", {{"model", "deberta-seqcls"}, {"inputs", "x"}, {"multi_label", true}}, "candidate_labels"},
      {"/v1/classify", {{"model", "bert-seqcls"}, {"inputs", "x"}, {"candidate_labels", "a, b"}}, "no entailment"},
      {"/v1/classify", {{"model", "roberta-tokcls"}, {"inputs", "x"}, {"candidate_labels", "a"}}, "classifies tokens"},
  };
  for (const Case& c : bad) {
    const json e = post(s.port(), c.body.dump(), &status, c.path);
    EXPECT_EQ(status, 400) << c.body.dump();
    EXPECT_NE(e["error"]["message"].get<std::string>().find(c.names), std::string::npos)
        << c.body.dump() << " → " << e.dump();
  }
  std::string longer;
  for (int i = 0; i < 30; ++i) longer += "the cat ";
  post(s.port(), json{{"model", "bert-seqcls"}, {"inputs", longer}}.dump(), &status, "/v1/classify");
  EXPECT_EQ(status, 413);
  json many = json::array();  // 20 texts × 20 labels: more pairs than 4 × --max-sentences (64)
  for (int i = 0; i < 20; ++i) many.push_back("label " + std::to_string(i));
  const json e = post(s.port(), json{{"model", "deberta-seqcls"}, {"inputs", many}, {"candidate_labels", many}}.dump(),
                      &status, "/v1/classify");
  EXPECT_EQ(status, 413);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("--max-sentences"), std::string::npos) << e.dump();
  post(s.port(), json{{"model", "st-bert"}, {"input", longer}}.dump(), &status, "/v1/embeddings");
  EXPECT_EQ(status, 200);  // cut to max_seq_length, as sentence-transformers cuts it
}

TEST(Serve, BadGenerationAndAttentionRequestsGetAnErrorNamingTheProblem) {
  ServeProcess s("--max-sentence-bytes 60 --max-new-tokens 100");
  ASSERT_GT(s.port(), 0) << s.log();
  struct Case {
    const char* path;
    std::string body;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"/v1/generate", "{", 400, "not JSON"},
      {"/v1/generate", R"({"prompt": ""})", 400, "is empty"},
      {"/v1/generate", R"({"prompt": 5})", 400, "must be a string"},
      {"/v1/generate", R"({"prompt": "ROMEO: \u00e9t\u00e9"})", 400, "\"prompt\""},  // not in the vocabulary
      {"/v1/generate", R"({"prompt": "A", "max_new_tokens": 101})", 400, "max_new_tokens"},
      {"/v1/generate", R"({"prompt": "A", "temperature": -1})", 400, "temperature"},
      {"/v1/generate", R"({"prompt": "A", "repetition_penalty": 11})", 400, "repetition_penalty"},
      {"/v1/generate", R"({"prompt": "A", "presence_penalty": -3})", 400, "presence_penalty"},
      {"/v1/generate", R"({"prompt": "A", "stream": "yes"})", 400, "true or false"},
      {"/v1/generate", R"({"prompt": "A", "model": "en-fr"})", 400, "translation model"},
      {"/v1/generate", R"({"prompt": "A", "file": "/etc/passwd"})", 400, "unknown field"},
      {"/v1/generate", R"({"prompt": ")" + std::string(70, 'A') + R"("})", 413, "--max-sentence-bytes 60"},
      {"/v1/attention", R"({"text": "The cat."})", 400, "\"model\" is required"},
      {"/v1/attention", R"({"model": "en-fr", "text": ""})", 400, "is empty"},
      {"/v1/attention", R"({"model": "en-fr", "text": ")" + std::string(70, 'a') + R"("})", 413, "--max-sentence-bytes 60"},
      {"/v1/attention", R"({"model": "en-fr", "text": "Hi.", "search": {"query": "a"}})", 400, "\"search\""},
      {"/v1/attention", R"({"model": "shakespeare-char", "text": "Hi", "beam_size": 2})", 400, "translation models"},
      {"/v1/attention", R"({"model": "nope", "text": "Hi"})", 404, "unknown model"},
      {"/v1/translate", R"({"sentences": ["Hi"], "model": "shakespeare-char"})", 400, "language model"},
  };
  for (const Case& k : cases) {
    int status = 0;
    const json r = post(s.port(), k.body, &status, k.path);
    EXPECT_EQ(status, k.status) << k.path << " " << k.body.substr(0, 80) << " → " << r.dump();
    ASSERT_TRUE(r.contains("error")) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(k.says), std::string::npos) << k.path << " " << r.dump();
  }
  int status = 0;
  post(s.port(), R"({"prompt": "A", "max_new_tokens": 3})", &status, "/v1/generate");
  EXPECT_EQ(status, 200);
}

TEST(Serve, TheViewerPageIsSelfContained) {
  ServeProcess s("");
  ASSERT_GT(s.port(), 0) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(page->body, io::read_file(std::string(QKV_SOURCE_DIR) + "/tools/qkv/viewer/index.html"));
  EXPECT_EQ(page->body.find("http://"), page->body.find("http://www.w3.org/2000/svg"));  // no other address
  EXPECT_EQ(page->body.find("https://"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
}

// A converted model with a chat template (chat_template.jinja beside its tokenizer): the chat route
// renders the messages with it (tools and chat_template_kwargs too) and encodes the text without
// adding special tokens; the template's raise_exception is a 400 naming its message.
TEST(Serve, ChatRendersTheModelsChatTemplate) {
  testing::TempDir dir("serve-chat-template");
  const std::filesystem::path src = std::filesystem::path(QKV_GOLDEN_DIR) / "hf" / "qwen2";
  const std::filesystem::path folder = dir.path / "qwen2-chat";
  std::filesystem::copy(src, folder);
  const std::string tmpl =
      "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
      "{% for m in messages %}<|begin_of_text|>{{ m.role }}\n{{ m.content | trim }}\n{% endfor %}"
      "{% if tools %}{{ tools | tojson }}{% endif %}{% if greeting is defined %}{{ greeting }}{% endif %}"
      "{% if add_generation_prompt %}<|begin_of_text|>assistant\n{% endif %}";
  { std::ofstream(folder / "chat_template.jinja") << tmpl; }
  const std::string model = (dir.path / "chat.safetensors").string();
  const auto conv = testing::run_shell(std::string(QKV_CLI_PATH) + " convert --from hf " + folder.string() + " -o " +
                                       model + " 2>&1");
  ASSERT_EQ(conv.code, 0) << conv.out;
  EXPECT_NE(conv.out.find("chat template"), std::string::npos) << conv.out;
  ServeProcess s("-m " + model);
  ASSERT_GT(s.port(), 0) << s.log();
  // the prompt's tokens, as the test computes them from the golden folder's files
  const json tok_config = json::parse(io::read_file((src / "tokenizer_config.json").string()));
  const text::LMTokenizer tok =
      text::LMTokenizer::from_json({{"type", "hf"},
                                    {"tokenizer_json", io::read_file((src / "tokenizer.json").string())},
                                    {"tokenizer_config", tok_config},
                                    {"chat_template", tmpl}});
  auto expected_tokens = [&](const json& body) {
    text::ChatInputs in;
    in.messages = nlohmann::ordered_json::parse(body["messages"].dump());
    if (body.contains("tools")) in.tools = nlohmann::ordered_json::parse(body["tools"].dump());
    if (body.contains("chat_template_kwargs"))
      in.extra = nlohmann::ordered_json::parse(body["chat_template_kwargs"].dump());
    return static_cast<int64_t>(tok.encode_prompt(tok.chat_template()->apply(in)).size());
  };
  int status = 0;
  const json plain = {{"messages", {{{"role", "user"}, {"content", "  Hello there  "}}}}, {"max_tokens", 2}};
  json r = post(s.port(), plain.dump(), &status, "/v1/chat/completions");
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<int64_t>(), expected_tokens(plain));
  json more = plain;
  more["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  more["chat_template_kwargs"] = {{"greeting", "hi!"}};
  r = post(s.port(), more.dump(), &status, "/v1/chat/completions");
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<int64_t>(), expected_tokens(more));
  EXPECT_GT(expected_tokens(more), expected_tokens(plain));
  json no_prompt = plain;  // vLLM's add_generation_prompt: false leaves the assistant's header out
  no_prompt["add_generation_prompt"] = false;
  r = post(s.port(), no_prompt.dump(), &status, "/v1/chat/completions");
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_LT(r["usage"]["prompt_tokens"].get<int64_t>(), expected_tokens(plain));
  // vLLM's continue_final_message: the assistant's text left open (its add_generation_prompt then false)
  json prefill = plain;
  prefill["messages"].push_back({{"role", "assistant"}, {"content", "Brie is a soft"}});
  prefill["continue_final_message"] = true;
  r = post(s.port(), prefill.dump(), &status, "/v1/chat/completions");
  ASSERT_EQ(status, 200) << r.dump();
  {
    text::ChatInputs in;
    in.messages = nlohmann::ordered_json::parse(prefill["messages"].dump());
    in.add_generation_prompt = false, in.continue_final_message = "content";
    const std::string text = tok.chat_template()->apply(in);
    EXPECT_TRUE(text.ends_with("Brie is a soft")) << text;
    EXPECT_EQ(r["usage"]["prompt_tokens"].get<int64_t>(), static_cast<int64_t>(tok.encode_prompt(text).size()));
  }
  prefill["add_generation_prompt"] = true;
  r = post(s.port(), prefill.dump(), &status, "/v1/chat/completions");
  EXPECT_EQ(status, 400);
  EXPECT_NE(r.dump().find("continue_final_message"), std::string::npos) << r.dump();
  r = post(s.port(), json{{"messages", {{{"role", "system"}, {"content", "x"}}}}}.dump(), &status,
           "/v1/chat/completions");
  EXPECT_EQ(status, 400);
  EXPECT_NE(r.dump().find("System role not supported"), std::string::npos) << r.dump();
}

}  // namespace
}  // namespace qkv
