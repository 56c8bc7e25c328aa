// Helpers for the golden tests (tests/ops/golden_test.cpp, tests/nn/mha_golden_test.cpp): load the
// JSON files written by tests/golden/make_golden.py, turn their tensors into qkv tensors, and compare
// results with a relative-error metric:
//
//   rel = max|a − b| / max(max|b|, 1e-6)  ≤  tol (1e-5 by default)
//
// where a is qkv's result and b PyTorch's (computed in float64, rounded to float32). A failure names
// the compared quantity, the max abs difference and the index of the worst element.
//
// JSON tensor: {"shape": [...], "dtype": "f32" | "i32" | "bool", "data": [flat, row-major]}; a float
// may be the string "inf", "-inf" or "nan" (JSON has no literal for them).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv::golden {

using nlohmann::json;

// 1e-5, or the value of the environment variable QKV_GOLDEN_TOL (to see how much headroom there is).
inline double default_tol() {
  static const double tol = [] {
    const char* env = std::getenv("QKV_GOLDEN_TOL");
    return env && *env ? std::strtod(env, nullptr) : 1e-5;
  }();
  return tol;
}

// The parsed golden file `name` (e.g. "ops.json") from QKV_GOLDEN_DIR, parsed once per process.
inline const json& golden_file(const std::string& name) {
  static std::map<std::string, json> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const std::string path = std::string(QKV_GOLDEN_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open golden file " + path +
                             " (generate it with /usr/bin/python3 tests/golden/make_golden.py)");
  return cache.emplace(name, json::parse(in)).first->second;
}

// The cases of `file` whose "op" is one of `ops`, in file order.
inline std::vector<json> golden_cases(const std::string& file, const std::vector<std::string>& ops) {
  std::vector<json> out;
  for (const json& c : golden_file(file).at("cases")) {
    const std::string op = c.at("op").get<std::string>();
    for (const std::string& o : ops)
      if (op == o) {
        out.push_back(c);
        break;
      }
  }
  return out;
}

inline Shape json_shape(const json& t) { return t.at("shape").get<Shape>(); }

inline float json_float(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "inf") return std::numeric_limits<float>::infinity();
    if (s == "-inf") return -std::numeric_limits<float>::infinity();
    if (s == "nan") return std::numeric_limits<float>::quiet_NaN();
    throw std::runtime_error("golden: bad float string \"" + s + "\"");
  }
  // The stored decimal is the exact float32 value (widened to double), so this cast is exact.
  return static_cast<float>(v.get<double>());
}

// The values of a JSON tensor as floats (bool → 0/1, i32 → value).
inline std::vector<float> json_values(const json& t) {
  const std::string dtype = t.at("dtype").get<std::string>();
  std::vector<float> out;
  out.reserve(t.at("data").size());
  for (const json& v : t.at("data")) {
    if (dtype == "bool")
      out.push_back(v.get<bool>() ? 1.f : 0.f);
    else if (dtype == "i32")
      out.push_back(static_cast<float>(v.get<int64_t>()));
    else
      out.push_back(json_float(v));
  }
  return out;
}

// A JSON tensor → a fresh dense qkv tensor of the same dtype (no autograd).
inline Tensor json_tensor(const json& t) {
  const std::string dtype = t.at("dtype").get<std::string>();
  const Shape shape = json_shape(t);
  const json& data = t.at("data");
  if (dtype == "f32") return Tensor::from_vector(json_values(t), shape);
  if (dtype == "i32") {
    std::vector<int32_t> v;
    for (const json& x : data) v.push_back(x.get<int32_t>());
    return Tensor::from_ints(v, shape);
  }
  if (dtype == "bool") {
    std::vector<bool> v;
    for (const json& x : data) v.push_back(x.get<bool>());
    return Tensor::from_bools(v, shape);
  }
  throw std::runtime_error("golden: unknown dtype " + dtype);
}

// "[1,0,3]" — the multi-index of flat element `flat` of `shape`.
inline std::string index_str(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return shape_str(idx);
}

// rel = max|a − b| / max(max|b|, 1e-6) ≤ tol (tol < 0: default_tol()). Non-finite expected values
// must match exactly (same infinity, or NaN for NaN); a NaN in `actual` where a finite value is
// expected fails.
inline ::testing::AssertionResult all_close(const std::string& what, const Tensor& actual, const json& expected,
                                            double tol = -1) {
  if (tol < 0) tol = default_tol();
  if (!actual.defined()) return ::testing::AssertionFailure() << what << ": result is undefined";
  const Shape shape = json_shape(expected);
  if (actual.shape() != shape)
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(actual.shape()) << ", expected "
                                         << shape_str(shape);
  const std::vector<float> b = json_values(expected);
  const std::vector<float> a = actual.to_vector();
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": " << a.size() << " values, expected " << b.size();
  double max_b = 0, max_diff = 0;
  int64_t worst = -1;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(b[i])) {
      const bool same = std::isnan(b[i]) ? std::isnan(a[i]) : a[i] == b[i];
      if (!same)
        return ::testing::AssertionFailure() << what << ": element " << index_str(shape, static_cast<int64_t>(i))
                                             << " is " << a[i] << ", expected " << b[i];
      continue;
    }
    max_b = std::max(max_b, std::fabs(static_cast<double>(b[i])));
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!(d <= max_diff)) {  // also catches NaN
      max_diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
      worst = static_cast<int64_t>(i);
    }
  }
  const double rel = max_diff / std::max(max_b, 1e-6);
  if (rel <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " " << shape_str(shape) << ": rel error " << rel << " > " << tol
                                       << " (max abs diff " << max_diff << " at index " << worst << " = "
                                       << index_str(shape, worst) << ": got " << a[worst] << ", expected " << b[worst]
                                       << "; max|expected| " << max_b << ")";
}

// A gradient: an undefined one is accepted only when the expected gradient is all zeros.
inline ::testing::AssertionResult grad_close(const std::string& what, const Tensor& grad, const json& expected,
                                             double tol = -1) {
  if (!grad.defined()) {
    for (float v : json_values(expected))
      if (v != 0.f) return ::testing::AssertionFailure() << what << ": no gradient was computed";
    return ::testing::AssertionSuccess();
  }
  return all_close(what, grad, expected, tol);
}

using TensorMap = std::map<std::string, Tensor>;
// Runs the op on the case's inputs (and its "params"), returning its outputs by the golden names.
using GoldenOp = std::function<TensorMap(const TensorMap& inputs, const json& params)>;

// Runs one case: builds the inputs (those listed in "grads" require grad), runs `op`, compares every
// output listed in the case, then backpropagates grad_output from outputs[main] and compares the
// gradients.
inline void run_golden_case(const json& c, const GoldenOp& op, const std::string& main = "out", double tol = -1) {
  const json& grads = c.at("grads");
  TensorMap in;
  for (const auto& [name, t] : c.at("inputs").items()) {
    Tensor x = json_tensor(t);
    if (grads.contains(name)) x.requires_grad_();
    in[name] = x;
  }
  TensorMap out;
  try {
    out = op(in, c.at("params"));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "forward threw: " << e.what();
    return;
  }
  for (const auto& [name, t] : c.at("outputs").items()) {
    auto it = out.find(name);
    if (it == out.end()) {
      ADD_FAILURE() << "the op returned no output \"" << name << "\"";
      continue;
    }
    EXPECT_TRUE(all_close("output " + name, it->second, t, tol));
  }
  if (grads.empty()) return;
  auto it = out.find(main);
  if (it == out.end()) {
    ADD_FAILURE() << "no output \"" << main << "\" to backpropagate from";
    return;
  }
  try {
    it->second.backward(json_tensor(c.at("grad_output")));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "backward threw: " << e.what();
    return;
  }
  for (const auto& [name, g] : grads.items()) EXPECT_TRUE(grad_close("grad " + name, in.at(name).grad(), g, tol));
}

// A case's "parameters" as a module's state (name → tensor)
inline std::map<std::string, Tensor> state_of(const json& c) {
  std::map<std::string, Tensor> state;
  for (const auto& [name, t] : c.at("parameters").items()) state[name] = json_tensor(t);
  return state;
}

}  // namespace qkv::golden
