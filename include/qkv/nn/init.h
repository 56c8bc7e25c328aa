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

}  // namespace qkv::nn::init
