// What a training config asks of memory, checked against this machine before anything large is
// allocated (issue 43): a config with 10⁵ layers, n_embd 2^40 or a batch of 2^30 windows is refused
// with a message naming its keys and the machine's memory, rather than growing to the memory cap,
// ending in "Storage: cannot allocate N bytes", or wrapping a size and writing past a buffer.
//
//   training memory ≥ 4 · parameter bytes      (the weights, their gradients, Adam's two moments)
//                   + one micro-batch's activations (at least what the caller names: an LM's
//                     logits B·T·V floats and their gradient, a batch of images B·C·H·W floats)
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace qkv::train {

// The parameters of the model `count_parameters` builds (it returns model.num_parameters()),
// built once with no values drawn (nn::init::SkipInit: its pages stay untouched) under an
// allocation budget of a quarter of the machine's memory: past it, or at a size that overflows, a
// qkv::Error "<task>: model (n_layer 100000, n_embd 384, …): …" naming the section's sizes.
int64_t check_model_fits(const std::string& task, const nlohmann::json& model,
                         const std::function<int64_t()>& count_parameters);

// Refuses a run whose 4 copies of `parameters` f32 values and one micro-batch's `activation_bytes`
// (a lower bound, computed by the caller with checked arithmetic) exceed the machine's memory;
// `what` names the keys and values the activations come from.
void check_batch_fits(const std::string& task, int64_t parameters, int64_t activation_bytes, const std::string& what);

// A lower bound on what one step's autograd graph holds beyond its values: a few dozen tensors a
// layer, each with its bookkeeping (shape, strides, storage, node) — ~40 KB a layer measured on a GPT
// of width 4, where the values are nothing, so what 10^5 thin layers need however small the batch.
// 32 KiB a layer (`layers`: the model section's n_layer, 0 when it has none), or 3 KiB per weight
// tensor, whichever is more. `what` names the keys for an overflow's message.
int64_t graph_bytes(int64_t layers, int64_t weight_tensors, const char* what);

}  // namespace qkv::train
