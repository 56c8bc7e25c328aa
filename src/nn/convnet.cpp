#include "qkv/nn/convnet.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/nn/init.h"
#include "qkv/ops/activation.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/loss.h"
#include "qkv/ops/pool.h"

namespace qkv::nn {

using nlohmann::json;

const io::Fields<ConvNetConfig>& ConvNetConfig::fields() {
  using F = io::Fields<ConvNetConfig>;
  using C = ConvNetConfig;
  static const F f("convnet config", {
                                         F::integer("in_channels", &C::in_channels, 1, 64),
                                         F::integer("image_height", &C::image_height, 1, 4096),
                                         F::integer("image_width", &C::image_width, 1, 4096),
                                         F::integer("num_classes", &C::num_classes, 0, 100000),
                                         F::integers("channels", &C::channels, 1, 4096, 8),
                                         F::integers("blocks", &C::blocks, 1, 64, 8),
                                         F::integers("non_local", &C::non_local, 0, 7, 8),
                                         F::integer("non_local_heads", &C::non_local_heads, 1, 64),
                                         F::boolean("non_local_sub_sample", &C::non_local_sub_sample),
                                         F::number("dropout", &C::dropout, 0, 1, /*hi_open=*/true),
                                         F::numbers("mean", &C::mean, -1e3, 1e3, 64),
                                         F::numbers("std", &C::std, 1e-6, 1e3, 64),
                                         F::texts("class_names", &C::class_names, 100000),
                                     });
  return f;
}

ConvNetConfig ConvNetConfig::from_json(const json& j) {
  ConvNetConfig c = fields().from_json(j);
  QKV_CHECK(!c.channels.empty() && c.channels.size() == c.blocks.size(), "convnet config: \"channels\" (",
            c.channels.size(), " stages) and \"blocks\" (", c.blocks.size(), ") must list the same stages, at least one");
  for (size_t i = 0; i < c.non_local.size(); ++i) {
    QKV_CHECK(c.non_local[i] < static_cast<int64_t>(c.channels.size()), "convnet config: \"non_local\" names stage ",
              c.non_local[i], ", but there are ", c.channels.size(), " stages (0 … ", c.channels.size() - 1, ")");
    for (size_t k = 0; k < i; ++k)
      QKV_CHECK(c.non_local[k] != c.non_local[i], "convnet config: \"non_local\" names stage ", c.non_local[i], " twice");
    const int64_t inner = std::max<int64_t>(1, c.channels[static_cast<size_t>(c.non_local[i])] / 2);
    QKV_CHECK(inner % c.non_local_heads == 0, "convnet config: stage ", c.non_local[i], "'s non-local block has ",
              inner, " inner channels, not divisible into ", c.non_local_heads, " heads");
  }
  for (const auto* v : {&c.mean, &c.std})
    QKV_CHECK(v->size() == 1 || static_cast<int64_t>(v->size()) == c.in_channels, "convnet config: \"mean\" and \"std\" need one value or one per channel (",
              c.in_channels, "), got ", v->size());
  QKV_CHECK(c.num_classes != 1, "convnet config: \"num_classes\" must be at least 2 (or 0: a feature trunk "
            "without a classifier, as a captioner's encoder), got 1");
  QKV_CHECK(c.class_names.empty() || static_cast<int64_t>(c.class_names.size()) == c.num_classes,
            "convnet config: ", c.class_names.size(), " class_names for ", c.num_classes, " classes");
  // Each stage after the first halves the resolution; the last must keep at least one pixel.
  const int64_t halvings = static_cast<int64_t>(c.channels.size()) - 1;
  QKV_CHECK(halvings < 30 && (c.image_height >> halvings) >= 1 && (c.image_width >> halvings) >= 1,
            "convnet config: ", c.channels.size(), " stages halve a ", c.image_height, "×", c.image_width,
            " image to nothing");
  return c;
}

std::string ConvNetConfig::describe() const {
  std::string s = "ResNet ";
  for (size_t i = 0; i < channels.size(); ++i) s += (i ? "-" : "") + std::to_string(channels[i]);
  s += " channels, ";
  int64_t n = 0;
  for (int64_t b : blocks) n += b;
  s += std::to_string(n) + " blocks, ";
  if (non_local.empty()) {
    s += "no non-local block";
  } else {
    s += std::to_string(non_local.size()) + " non-local block" + (non_local.size() > 1 ? "s" : "") + " (stage";
    for (int64_t k : non_local) s += " " + std::to_string(k);
    s += ", " + std::to_string(non_local_heads) + " head" + (non_local_heads > 1 ? "s" : "") +
         (non_local_sub_sample ? ", sub-sampled" : "") + ")";
  }
  return s + ", " + std::to_string(in_channels) + "×" + std::to_string(image_height) + "×" +
         std::to_string(image_width) + " → " + std::to_string(num_classes) + " classes";
}

std::string ConvNetConfig::class_name(int64_t k) const {
  return class_names.empty() ? std::to_string(k) : class_names.at(static_cast<size_t>(k));
}

namespace {

// torchvision's kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2 / (out · kH · kW)).
std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride, Generator* gen) {
  auto c = std::make_shared<Conv2d>(in, out, k, stride, k / 2, 1, 1, /*bias=*/false, gen);
  Tensor w = c->weight.detach();
  init::normal_(w, gen ? *gen : default_generator(), 0.f, std::sqrt(2.f / static_cast<float>(out * k * k)));
  return c;
}

}  // namespace

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride, Generator* gen) {
  conv1 = register_module("conv1", conv(in, out, 3, stride, gen));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(out));
  conv2 = register_module("conv2", conv(out, out, 3, 1, gen));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(out));
  Tensor gamma = bn2->weight.detach();
  init::zeros_(gamma);  // zero_init_residual
  if (stride != 1 || in != out) {
    down = register_module("downsample.0", conv(in, out, 1, stride, gen));
    down_bn = register_module("downsample.1", std::make_shared<BatchNorm2d>(out));
  }
}

Tensor BasicBlock::forward(const Tensor& x) const {
  const Tensor y = bn2->forward(conv2->forward(relu(bn1->forward(conv1->forward(x)))));
  return relu(add(y, down ? down_bn->forward(down->forward(x)) : x));
}

ConvNet::ConvNet(const ConvNetConfig& c, Generator* gen) : config(ConvNetConfig::from_json(c.to_json())), gen_(gen) {
  stem = register_module("conv1", conv(c.in_channels, c.channels[0], 3, 1, gen));
  stem_bn = register_module("bn1", std::make_shared<BatchNorm2d>(c.channels[0]));
  int64_t in = c.channels[0];
  for (size_t s = 0; s < c.channels.size(); ++s) {
    std::vector<std::shared_ptr<BasicBlock>> blocks;
    for (int64_t b = 0; b < c.blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      blocks.push_back(register_module("layer" + std::to_string(s + 1) + "." + std::to_string(b),
                                       std::make_shared<BasicBlock>(in, c.channels[s], stride, gen)));
      in = c.channels[s];
    }
    stages.push_back(std::move(blocks));
    std::shared_ptr<NonLocalBlock2d> nl;
    for (int64_t k : c.non_local)
      if (k == static_cast<int64_t>(s))
        nl = register_module("non_local" + std::to_string(s + 1),
                             std::make_shared<NonLocalBlock2d>(
                                 NonLocalOptions{in, 0, c.non_local_heads, c.non_local_sub_sample}, gen));
    non_local.push_back(nl);
  }
  if (c.num_classes > 0) fc = register_module("fc", std::make_shared<Linear>(in, c.num_classes, true, gen));
  std::vector<float> scale(static_cast<size_t>(c.in_channels)), shift(scale.size());
  for (size_t i = 0; i < scale.size(); ++i) {
    const double m = c.mean.size() == 1 ? c.mean[0] : c.mean[i], sd = c.std.size() == 1 ? c.std[0] : c.std[i];
    scale[i] = static_cast<float>(1.0 / sd), shift[i] = static_cast<float>(-m / sd);
  }
  scale_ = register_constant(Tensor::from_vector(scale, {1, c.in_channels, 1, 1}));  // (moved by Module::to)
  shift_ = register_constant(Tensor::from_vector(shift, {1, c.in_channels, 1, 1}));
}

Tensor ConvNet::forward(const Tensor& images, AttentionMaps* maps) const {
  QKV_CHECK(fc, "ConvNet: a feature extractor (num_classes 0) has no classifier head");
  // [N, c_last, h, w] → [N, c_last] → [N, classes]
  Tensor x = features(images, maps);
  x = adaptive_avg_pool2d(x, {1, 1}).reshape({x.size(0), x.size(1)});
  return fc->forward(dropout(x, static_cast<float>(config.dropout), is_training(), gen_));
}

Tensor ConvNet::features(const Tensor& images, AttentionMaps* maps) const {
  QKV_CHECK(images.dim() == 4 && images.size(1) == config.in_channels && images.size(2) == config.image_height &&
                images.size(3) == config.image_width,
            "ConvNet: expected images [N, ", config.in_channels, ", ", config.image_height, ", ", config.image_width,
            "], got ", shape_str(images.shape()));
  // x̂ = (x − mean) / std, the images on the weights' device (they follow the model, as the Transformer's)
  Tensor x = add(mul(images.to(scale_.device()), scale_), shift_);
  x = relu(stem_bn->forward(stem->forward(x)));  // [N, c₀, H, W]
  for (size_t s = 0; s < stages.size(); ++s) {
    for (const auto& block : stages[s]) x = block->forward(x);  // [N, c_s, H/2^s, W/2^s]
    if (non_local[s]) {
      Tensor w;
      x = non_local[s]->forward(x, maps ? &w : nullptr);
      if (maps) {
        // the keys: every position, or sub-sampled by the block's 2×2 max pooling (rounding down)
        const int64_t h = x.size(2), wd = x.size(3), kd = non_local[s]->options.sub_sample ? 2 : 1;
        maps->image.push_back(w.detach());
        maps->image_grids.push_back({h, wd, h / kd, wd / kd});
      }
    }
  }
  return x;  // [N, c_last, h, w]
}

Tensor ConvNet::loss(const Tensor& images, const Tensor& labels, float label_smoothing) const {
  QKV_CHECK(labels.dim() == 1 && labels.size(0) == images.size(0), "ConvNet::loss: labels ",
            shape_str(labels.shape()), " for ", images.size(0), " images");
  const Tensor logits = forward(images);
  return cross_entropy(logits, labels.to(logits.device()), -100, label_smoothing);
}

}  // namespace qkv::nn
