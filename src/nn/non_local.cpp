#include "qkv/nn/non_local.h"

#include "qkv/nn/init.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/pool.h"

namespace qkv::nn {

NonLocalBlock2d::NonLocalBlock2d(const NonLocalOptions& o, Generator* gen) : options(o) {
  const int64_t C = o.channels, Ci = o.inter_channels ? o.inter_channels : std::max<int64_t>(1, o.channels / 2);
  options.inter_channels = Ci;
  QKV_CHECK(C > 0 && o.heads > 0 && Ci % o.heads == 0, "NonLocalBlock2d: ", Ci,
            " inner channels cannot be split into ", o.heads, " heads (channels ", C, ")");
  theta = register_module("theta", std::make_shared<Conv2d>(C, Ci, 1, 1, 0, 1, 1, true, gen));
  phi = register_module("phi", std::make_shared<Conv2d>(C, Ci, 1, 1, 0, 1, 1, true, gen));
  g = register_module("g", std::make_shared<Conv2d>(C, Ci, 1, 1, 0, 1, 1, true, gen));
  W = register_module("W", std::make_shared<Conv2d>(Ci, C, 1, 1, 0, 1, 1, true, gen));
  if (o.batch_norm) {
    bn = register_module("bn", std::make_shared<BatchNorm2d>(C));
    Tensor gamma = bn->weight.detach();
    init::zeros_(gamma);
  } else {
    for (Tensor* t : {&W->weight, &W->bias}) {
      Tensor d = t->detach();
      init::zeros_(d);
    }
  }
}

Tensor NonLocalBlock2d::forward(const Tensor& x, Tensor* weights) const {
  QKV_CHECK(x.dim() == 4 && x.size(1) == options.channels, "NonLocalBlock2d: expected [N, ", options.channels,
            ", H, W], got ", shape_str(x.shape()));
  const int64_t N = x.size(0), H = x.size(2), Wd = x.size(3), heads = options.heads,
                d = options.inter_channels / heads;
  // [N, C', h, w] → [N, heads, h·w, d]: one row per position
  auto positions = [&](const Tensor& t) {
    return t.reshape({N, heads, d, t.size(2) * t.size(3)}).transpose(2, 3);
  };
  Tensor keys = phi->forward(x), values = g->forward(x);
  if (options.sub_sample) keys = max_pool2d(keys, 2), values = max_pool2d(values, 2);
  AttentionOptions opt;
  opt.scale = 1.f;  // θᵀφ unscaled, as the paper
  const Tensor q = positions(theta->forward(x)), k = positions(keys), v = positions(values);
  Tensor y;
  if (weights) {
    auto r = scaled_dot_product_attention_with_weights(q, k, v, opt);
    y = r.output, *weights = r.weights;
  } else {
    y = scaled_dot_product_attention(q, k, v, opt);
  }
  // [N, heads, H·W, d] → [N, C', H, W]
  y = y.transpose(2, 3).reshape({N, options.inter_channels, H, Wd});
  Tensor z = W->forward(y);
  if (bn) z = bn->forward(z);
  return add(z, x);
}

}  // namespace qkv::nn
