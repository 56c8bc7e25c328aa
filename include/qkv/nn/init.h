// Parameter initializers with torch.nn.init's names and formulas. All draw from `gen`.
#pragma once

#include "qkv/core/rng.h"
#include "qkv/ops/tensor.h"

namespace qkv::nn::init {

// U(−a, a), a = gain·√(6 / (fan_in + fan_out))
void xavier_uniform_(Tensor& t, Generator& gen, float gain = 1.f);
// U(−bound, bound): the default of torch.nn.Linear's weight and bias, bound = 1/√fan_in
void uniform_(Tensor& t, Generator& gen, float low, float high);
void normal_(Tensor& t, Generator& gen, float mean, float std);
void zeros_(Tensor& t);
void ones_(Tensor& t);

// While one lives on this thread, the initializers above do nothing: a model about to be loaded
// from a file is built without drawing the values the file overwrites (as torch.nn.utils.skip_init
// and Hugging Face's no_init_weights), and its parameters' pages stay untouched until they load.
class SkipInit {
 public:
  SkipInit();
  ~SkipInit();
  SkipInit(const SkipInit&) = delete;
  SkipInit& operator=(const SkipInit&) = delete;

 private:
  bool outer_;
};

}  // namespace qkv::nn::init
