#include "testing.h"

#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace qkv::testing {

double rel_error(const std::vector<float>& a, const std::vector<float>& b, double floor) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    ref = std::max(ref, static_cast<double>(std::fabs(b[i])));
  }
  if (a.size() != b.size()) return INFINITY;
  return diff / std::max(ref, floor);
}

Tensor param(const Shape& shape, uint64_t seed, float scale) {
  Generator g(seed);
  Tensor t = Tensor::randn(shape, g, 0.f, scale);
  t.requires_grad_();
  return t;
}

Int8ActivationBits::Int8ActivationBits(int bits) : saved(int8_activation_bits()) { set_int8_activation_bits(bits); }
Int8ActivationBits::~Int8ActivationBits() { set_int8_activation_bits(saved); }

std::vector<int> int8_activation_bit_choices() {
  if (int8_full_range_available()) return {7, 8};
  return {7};
}

TempDir::TempDir(const std::string& prefix) {
  path = std::filesystem::temp_directory_path() /
         ("qkv-" + prefix + "-" + std::to_string(::getpid()) + "-" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
}

TempDir::~TempDir() { std::filesystem::remove_all(path); }

// "one two three" → "un deux trois": word-for-word pairs over a 10-word lexicon.
nlohmann::json tiny_translation_config(const std::filesystem::path& dir, int64_t max_iters) {
  const char* en[] = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"};
  const char* fr[] = {"un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix"};
  std::string tsv;
  for (uint64_t i = 0; i < 600; ++i) {
    std::string s, t;
    const int n = 1 + static_cast<int>(Generator::bits(5, i * 10) % 4);
    for (int k = 0; k < n; ++k) {
      const auto w = Generator::bits(5, i * 10 + static_cast<uint64_t>(k) + 1) % 10;
      s += std::string(k ? " " : "") + en[w], t += std::string(k ? " " : "") + fr[w];
    }
    tsv += s + "\t" + t + "\n";
  }
  std::ofstream(dir / "pairs.tsv") << tsv;
  return {{"task", "translation"},
          {"data", {{"train", {{"tsv", (dir / "pairs.tsv").string()}}}, {"split", {{"dev", 20}, {"test", 20}, {"seed", 1}}}}},
          {"tokenizer", {{"type", "word"}, {"vocab_size", 23}}},
          {"model", {{"preset", "tiny"}, {"d_model", 32}, {"nhead", 4}, {"dim_feedforward", 64}, {"dropout", 0.1}, {"max_len", 24}}},
          {"train",
           {{"max_iters", max_iters}, {"batch_size", 200}, {"optimizer", "adam"}, {"learning_rate", 2e-3},
            {"schedule", "constant"}, {"warmup_iters", 5}, {"beta2", 0.98}, {"eps", 1e-9}, {"weight_decay", 0.0},
            {"label_smoothing", 0.1}, {"eval_interval", 10}, {"log_interval", 1}, {"checkpoint_interval", 0},
            {"model_dtype", "f16"}}},
          {"eval", {{"bleu_sentences", 10}}}};
}

ShellResult run_shell(const std::string& cmd) {
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

std::vector<double> logged_losses(const std::filesystem::path& dir) {
  std::vector<double> v;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json r = nlohmann::json::parse(line);
    if (r.contains("loss")) v.push_back(r["loss"].get<double>());
  }
  return v;
}

std::vector<nlohmann::json> metrics_rows(const std::filesystem::path& dir) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

nlohmann::json exact_train_section(int64_t max_iters, int64_t batch_size) {
  return {{"max_iters", max_iters}, {"batch_size", batch_size}, {"learning_rate", 1e-3}, {"schedule", "constant"},
          {"warmup_iters", 0},      {"beta2", 0.999},           {"eps", 1e-8},           {"weight_decay", 0.01},
          {"grad_clip", 1e9},       {"eval_interval", 1},       {"log_interval", 1},     {"checkpoint_interval", 0}};
}

nlohmann::json dropout_off(const std::string& model_file) {
  nlohmann::json m = nlohmann::json::object();
  const nlohmann::json meta = models::load_model_metadata(model_file);
  for (const auto& [k, v] : meta["model"].items())
    if (k.find("dropout") != std::string::npos) m[k] = 0.0;
  EXPECT_FALSE(m.empty()) << "no dropout rate in '" << model_file << "'";
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace qkv::testing
