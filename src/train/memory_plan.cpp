#include "qkv/train/memory_plan.h"

#include <algorithm>
#include <new>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/machine.h"
#include "qkv/core/tensor.h"
#include "qkv/nn/init.h"

namespace qkv::train {

namespace {

// "(n_layer 100000, n_embd 384, block_size 256)": the section's integer keys, which set its sizes.
std::string sizes(const nlohmann::json& model) {
  std::string s;
  if (model.is_object())
    for (const auto& [k, v] : model.items())
      if (v.is_number_integer()) s += (s.empty() ? "" : ", ") + k + " " + v.dump();
  return "(" + s + ")";
}

}  // namespace

int64_t check_model_fits(const std::string& task, const nlohmann::json& model,
                         const std::function<int64_t()>& count_parameters) {
  const int64_t memory = machine_memory_bytes();
  try {
    AllocationBudget budget(static_cast<size_t>(memory / 4),
                            detail::concat("its parameters need more than the ", memory_str(memory / 4),
                                           " that training can give them on this machine (", memory_str(memory),
                                           " of memory for 4 copies: weights, gradients, Adam's two moments)"));
    nn::init::SkipInit no_values;
    return count_parameters();
  } catch (const Error& e) {
    QKV_CHECK(false, task, ": model ", sizes(model), ": ", e.what());
  } catch (const std::bad_alloc&) {
    QKV_CHECK(false, task, ": model ", sizes(model), ": out of memory building it (this machine has ",
              memory_str(memory), ")");
  }
  return 0;
}

void check_batch_fits(const std::string& task, int64_t parameters, int64_t activation_bytes, const std::string& what) {
  const int64_t memory = machine_memory_bytes();
  const int64_t weights = 16 * parameters;  // 4 copies of f32 values (parameters ≤ memory/4: no overflow)
  QKV_CHECK(activation_bytes <= memory - weights, task, ": ", what, ": one step's activations take at least ",
            memory_str(activation_bytes), ", more than the ", memory_str(memory - weights), " this machine's ",
            memory_str(memory), " of memory leaves beside the model's ", memory_str(weights),
            " (lower the batch size)");
}

int64_t graph_bytes(int64_t layers, int64_t weight_tensors, const char* what) {
  return std::max(checked_mul(layers, 32 << 10, what), checked_mul(weight_tensors, 3 << 10, what));
}

}  // namespace qkv::train
