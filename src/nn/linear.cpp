#include "qkv/nn/linear.h"

#include <cmath>

#include "qkv/nn/init.h"
#include "qkv/ops/matmul.h"

namespace qkv::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, Generator* gen) : in_features(in), out_features(out) {
  QKV_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ", in, " and ", out);
  Generator& g = gen ? *gen : default_generator();
  const float bound = 1.f / std::sqrt(static_cast<float>(in));
  weight = Tensor::empty({out, in});
  init::uniform_(weight, g, -bound, bound);
  weight = register_parameter("weight", weight);
  if (has_bias) {
    bias = Tensor::empty({out});
    init::uniform_(bias, g, -bound, bound);
    bias = register_parameter("bias", bias);
  }
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

Tensor Linear::forward_inference(const Tensor& x) const { return linear_inference(x, weight, weight_inference, bias); }

void Linear::set_inference_weights(InferenceWeights weights) {
  weight_inference = InferenceWeight(weight, weights);
}

}  // namespace qkv::nn
