// What InferenceWeight::packed returns (ops/inference_weight.h): the kernels' packed copy of a
// weight's rows (kernels/cpu/packed_linear.h), private to the ops that read it.
#pragma once

#include <memory>
#include <mutex>

#include "kernels/cpu/packed_linear.h"

namespace qkv {

// Made when the weight is used for a second batch of rows: a packing costs about one product's
// worth of reordering, and a weight read once (a prompt before one-row steps) would only hold the
// memory.
struct PackedCopy {
  std::mutex mutex;
  int batches = 0;
  std::shared_ptr<const kernels::cpu::PackedLinear> linear;
  bool declined = false;  // the kernel made none (pack_linear_f32 without brgemm): not asked again
};

}  // namespace qkv
