// Shared test helpers.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/qkv.h"

namespace qkv::testing {

// max|a − b| / max(max|b|, floor)  (∞-norm relative error; `floor` keeps a reference that is
// exactly zero in theory, and so only rounding noise in practice, from dividing noise by noise)
double rel_error(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-6);

#define EXPECT_TENSOR_NEAR(a, b, tol)                                                                   \
  do {                                                                                                  \
    auto _va = (a).to_vector();                                                                         \
    auto _vb = (b).to_vector();                                                                         \
    ASSERT_EQ((a).shape(), (b).shape());                                                                \
    EXPECT_LE(::qkv::testing::rel_error(_va, _vb), (tol)) << #a " vs " #b;                             \
  } while (0)

// Gradcheck that reports the first mismatch.
#define EXPECT_GRADCHECK(f, inputs)                                                                     \
  do {                                                                                                  \
    auto _r = ::qkv::autograd::gradcheck((f), (inputs));                                                \
    EXPECT_TRUE(_r.ok) << _r.message;                                                                   \
  } while (0)

// A random f32 tensor that requires grad.
Tensor param(const Shape& shape, uint64_t seed, float scale = 1.f);

// The int8 products' activation bits (ops/inference_weight.h) set for a scope, then restored.
// An environment variable set (or, with nullptr, unset) for a scope, then restored.
struct ScopedEnv {
  std::string name, before;
  bool had;
  ScopedEnv(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) before = std::getenv(n);
    if (value) setenv(n, value, 1);
    else unsetenv(n);
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), before.c_str(), 1);
    else unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

struct Int8ActivationBits {
  explicit Int8ActivationBits(int bits);
  ~Int8ActivationBits();
  Int8ActivationBits(const Int8ActivationBits&) = delete;
  Int8ActivationBits& operator=(const Int8ActivationBits&) = delete;
  int saved;
};
// The bits this CPU can run: {7}, or {7, 8} where 8-bit activations are available.
std::vector<int> int8_activation_bit_choices();

// A fresh folder named after the running test (qkv-<prefix>-<pid>-<test>), removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix);
  ~TempDir();
};

// `cmd` through the shell with stderr joined to stdout: its exit status and output.
struct ShellResult {
  int code;
  std::string out;
};
ShellResult run_shell(const std::string& cmd);

// A translation config over a tiny word-for-word corpus ("one two three" → "un deux trois", 600
// pairs written to DIR/pairs.tsv): a 32-dim Transformer that trains in seconds.
nlohmann::json tiny_translation_config(const std::filesystem::path& dir, int64_t max_iters);

// The per-step "loss" values a training run logged in DIR/metrics.jsonl, in order.
std::vector<double> logged_losses(const std::filesystem::path& dir);
// Every row of DIR/metrics.jsonl (steps and evaluations), in order.
std::vector<nlohmann::json> metrics_rows(const std::filesystem::path& dir);

// A fine-tuning config's "train" section for exact comparisons: lr 1e-3 constant, AdamW's betas 0.9 /
// 0.999, eps 1e-8, weight decay 0.01, no clipping (the norm still logged), an evaluation every step.
nlohmann::json exact_train_section(int64_t max_iters, int64_t batch_size);

// A config's "model" section that sets every dropout rate of a model file to 0 (transformers' eval
// mode: the gradients of the network itself); a failure where the file has none.
nlohmann::json dropout_off(const std::string& model_file);

// The message of the qkv::Error that f() throws, or "" when it throws none (so a test that looks
// for a phrase in it fails).
std::string error_of(const std::function<void()>& f);

}  // namespace qkv::testing
