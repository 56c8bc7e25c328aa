// The op table (PyTorch's OpInfo, ggml's test_case): one entry per op says how to call it from named
// inputs and params, which sample inputs to try, which inputs take a gradient, whether it has
// golden PyTorch cases in tests/golden/ops.json and CUDA kernels, and its tolerances. Four checks
// iterate it, none lists ops of its own:
//   - tests/ops/golden_test.cpp      every ops.json case of the entry, forward and backward vs PyTorch
//   - tests/ops/gradcheck_test.cpp   every sample's differentiable inputs by finite differences
//   - tests/core/device_test.cpp     the first sample on a device without kernels: refused, untouched
//   - tests/cuda/cuda_ops_test.cpp   every sample on the GPU against the CPU, outputs and gradients
// Adding an op: its kernel(s), its op, ONE entry in op_table.cpp (and its golden cases, appended, in
// tests/golden/make_golden.py when it has a PyTorch reference).
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/ops.h"

namespace qkv::optable {

using nlohmann::json;
using TensorMap = std::map<std::string, Tensor>;

// One sample input: named tensors (the names of ops.json's cases) and params.
struct Sample {
  std::string name;
  TensorMap inputs;
  json params = json::object();
  bool gradcheck = true;  // small enough for finite differences (false: a larger, GPU-only shape)
  bool cuda = true;       // compared on the GPU against the CPU (where the op has CUDA kernels)
};

struct OpInfo {
  std::string name;  // the "op" of its ops.json cases; the test's name
  // Runs qkv's op; returns its outputs by name, the main one "out" (the one backpropagated from).
  // `device` is for ops without tensor inputs (causal_mask); the others follow their inputs.
  std::function<TensorMap(const TensorMap& inputs, const json& params, Device device)> run;
  std::function<std::vector<Sample>()> samples;  // fresh tensors at each call
  std::vector<std::string> differentiable;       // inputs that take a gradient (where a sample has them)
  bool golden = true;                            // has cases in tests/golden/ops.json
  double golden_tol = -1;                        // -1: golden_util's default (1e-5)
  bool cuda = true;                              // has CUDA kernels (compared against the CPU)
  double cuda_tol = 2e-5;                        // outputs (f32: another order of the same sums)
  double cuda_grad_tol = -1;                     // gradients; -1: cuda_tol
  bool computes = true;  // false for a pure view, which a foreign device need not refuse (no byte is read)
  autograd::GradcheckOptions gradcheck;
};

// Every op, in a fixed order.
const std::vector<OpInfo>& op_table();
// The entry named `name`, or nullptr.
const OpInfo* find_op(const std::string& name);
// The names of the entries that satisfy `pred` (for gtest's ValuesIn).
std::vector<std::string> op_names(const std::function<bool(const OpInfo&)>& pred);

}  // namespace qkv::optable
