#include "qkv/nn/conv.h"

#include <cmath>

#include "qkv/nn/init.h"
#include "qkv/ops/batch_norm.h"

namespace qkv::nn {

Conv2d::Conv2d(int64_t in, int64_t out, Size2 k, Size2 s, Size2 p, Size2 d, int64_t g, bool has_bias, Generator* gen)
    : in_channels(in), out_channels(out), groups(g), kernel_size(k), stride(s), padding(p), dilation(d) {
  QKV_CHECK(in > 0 && out > 0 && g > 0 && in % g == 0 && out % g == 0 && k.h > 0 && k.w > 0, "Conv2d: ", in, " → ",
            out, " channels in ", g, " groups with a ", k.h, "×", k.w, " kernel is not a convolution");
  Generator& gen_ = gen ? *gen : default_generator();
  const float bound = 1.f / std::sqrt(static_cast<float>(in / g * k.h * k.w));
  weight = Tensor::empty({out, in / g, k.h, k.w});
  init::uniform_(weight, gen_, -bound, bound);
  weight = register_parameter("weight", weight);
  if (has_bias) {
    bias = Tensor::empty({out});
    init::uniform_(bias, gen_, -bound, bound);
    bias = register_parameter("bias", bias);
  }
}

Tensor Conv2d::forward(const Tensor& x) const { return conv2d(x, weight, bias, stride, padding, dilation, groups); }

BatchNorm2d::BatchNorm2d(int64_t n, float e, float m, bool affine) : num_features(n), eps(e), momentum(m) {
  QKV_CHECK(n > 0, "BatchNorm2d: num_features must be positive, got ", n);
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({n}));
    bias = register_parameter("bias", Tensor::zeros({n}));
  }
  running_mean = register_buffer("running_mean", Tensor::zeros({n}));
  running_var = register_buffer("running_var", Tensor::ones({n}));
}

Tensor BatchNorm2d::forward(const Tensor& x) const {
  QKV_CHECK(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d(", num_features, "): expected [N, ", num_features,
            ", H, W], got ", shape_str(x.shape()));
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum, eps);
}

GroupNorm::GroupNorm(int64_t g, int64_t c, float e, bool affine) : num_groups(g), num_channels(c), eps(e) {
  QKV_CHECK(g > 0 && c > 0 && c % g == 0, "GroupNorm: ", c, " channels cannot be split into ", g, " groups");
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({c}));
    bias = register_parameter("bias", Tensor::zeros({c}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) const { return group_norm(x, num_groups, weight, bias, eps); }

}  // namespace qkv::nn
