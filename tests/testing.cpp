#include "testing.h"

#include <unistd.h>

#include <algorithm>
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

TempDir::TempDir(const std::string& prefix) {
  path = std::filesystem::temp_directory_path() /
         ("qkv-" + prefix + "-" + std::to_string(::getpid()) + "-" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
}

TempDir::~TempDir() { std::filesystem::remove_all(path); }

std::vector<double> logged_losses(const std::filesystem::path& dir) {
  std::vector<double> v;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json r = nlohmann::json::parse(line);
    if (r.contains("loss")) v.push_back(r["loss"].get<double>());
  }
  return v;
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
