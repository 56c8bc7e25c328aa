// Finite-difference gradient checking, as torch.autograd.gradcheck: compares the gradients the tape
// computes with central differences (f(x+eps) - f(x-eps)) / 2eps, element by element, for every
// input that requires grad. The output is reduced to a scalar with a fixed random projection so
// every output element takes part.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv::autograd {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // the first mismatch: input, element, analytic vs numeric
};

struct GradcheckOptions {
  double eps = 1e-3;   // f32: large enough that roundoff stays small against the difference
  double atol = 2e-3;
  double rtol = 2e-2;
};

using Function = std::function<Tensor(const std::vector<Tensor>&)>;

GradcheckResult gradcheck(const Function& f, const std::vector<Tensor>& inputs, GradcheckOptions opt = {});

}  // namespace qkv::autograd
