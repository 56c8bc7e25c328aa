// qkv serve over loopback: the JSON API's round trips against the CLI's translations, an error
// status naming the problem for each bad request, concurrent requests (batched together) equal to
// sequential ones, the metrics, and SIGTERM finishing the request in flight.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "qkv/io/file.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// `qkv serve ARGS --port 0` in the background; the port it printed; SIGTERM and wait at the end.
class ServeProcess {
 public:
  explicit ServeProcess(const std::string& args) : dir_("serve") {
    log_ = (dir_.path / "serve.log").string();
    const std::string pid_file = (dir_.path / "pid").string();
    std::system(("cd " + std::string(QKV_SOURCE_DIR) + " && " + QKV_CLI_PATH + " serve --port 0 " + args + " > " + log_ +
                 " 2>&1 & echo $! > " + pid_file)
                    .c_str());
    pid_ = std::stoi(io::read_file(pid_file));
    const auto t0 = std::chrono::steady_clock::now();
    while (port_ == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
      const std::string log = fs::exists(log_) ? io::read_file(log_) : "";  // (the shell may not have made it yet)
      const auto at = log.find("listening on http://127.0.0.1:");
      if (at != std::string::npos) port_ = std::atoi(log.c_str() + at + 30);
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
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
      if (::kill(pid_, 0) != 0) {
        pid_ = 0;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    pid_ = 0;
    return false;
  }

 private:
  testing::TempDir dir_;
  std::string log_;
  int pid_ = 0, port_ = 0;
};

json post(int port, const std::string& body, int* status = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto r = c.Post("/v1/translate", body, "application/json");
  if (!r) return json{{"transport_error", httplib::to_string(r.error())}};
  if (status) *status = r->status;
  return json::parse(r->body);
}

std::vector<std::string> cli_translations(const std::vector<std::string>& lines) {
  std::string cmd = "cd " + std::string(QKV_SOURCE_DIR) + " && " + QKV_CLI_PATH + " translate";
  for (auto& l : lines) cmd += " '" + l + "'";
  testing::ShellResult r = testing::run_shell(cmd + " 2>/dev/null");
  std::vector<std::string> out;
  for (size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1) out.push_back(r.out.substr(at, nl - at));
  return out;
}

const std::vector<std::string> kSentences = {"The cat sat on the mat.", "I think it is going to rain tomorrow.",
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
  const json r = post(s.port(), json{{"sentences", kSentences}, {"n_best", 2}}.dump(), &status);
  ASSERT_EQ(status, 200) << r.dump();
  const auto expected = cli_translations(kSentences);
  ASSERT_EQ(r["translations"].size(), kSentences.size());
  for (size_t i = 0; i < kSentences.size(); ++i) {
    EXPECT_EQ(r["translations"][i]["text"], expected[i]);
    EXPECT_EQ(r["translations"][i]["hypotheses"].size(), 2u);
    EXPECT_GE(r["translations"][i]["scores"][0].get<double>(), r["translations"][i]["scores"][1].get<double>());
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

TEST(Serve, ConcurrentRequestsEqualSequentialOnesAndAreCounted) {
  ServeProcess s("--max-wait-ms 20");
  ASSERT_GT(s.port(), 0) << s.log();
  std::vector<std::string> sequential;
  for (auto& line : kSentences) sequential.push_back(post(s.port(), json{{"sentences", {line}}}.dump())["translations"][0]["text"]);
  std::vector<std::future<json>> answers;
  for (int i = 0; i < 16; ++i)
    answers.push_back(std::async(std::launch::async, [&, i] {
      return post(s.port(), json{{"sentences", {kSentences[static_cast<size_t>(i) % kSentences.size()]}}}.dump());
    }));
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(answers[static_cast<size_t>(i)].get()["translations"][0]["text"], sequential[static_cast<size_t>(i) % 4]);
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
  for (int i = 0; i < 32; ++i) many.push_back(kSentences[static_cast<size_t>(i) % 4]);
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

}  // namespace
}  // namespace qkv
