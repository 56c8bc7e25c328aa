// A small ResNet (He et al. 2016) for images, with non-local blocks (nn/non_local.h) after chosen
// stages — the "attention model in a ConvNet" of seed 004, the image classifier of `qkv train` on
// Fashion-MNIST.
//
//   x̂ = (x − mean) / std                          pixels in [0, 1] → normalized, per channel
//   stem:    conv 3×3 (C_in → c₀) → BN → ReLU        full resolution
//   stage s: blocks[s] basic blocks of c_s channels, the first of stages s > 0 with stride 2;
//            basic block: y = ReLU(BN(conv₃ₓ₃(ReLU(BN(conv₃ₓ₃(x))))) + shortcut(x)), the shortcut
//            a 1×1 conv + BN where the shape changes, else x
//            then, for s in non_local, a NonLocalBlock2d over the stage's H·W positions
//   head:    global average pool → dropout → linear c_last → classes
//
// Initialization as torchvision's ResNet: convolutions kaiming-normal (fan_out, ReLU), BN γ = 1,
// β = 0, and γ = 0 on each block's last BN (zero_init_residual: every block starts as the identity).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/rng.h"
#include "qkv/io/config.h"
#include "qkv/nn/attention_maps.h"
#include "qkv/nn/conv.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/module.h"
#include "qkv/nn/non_local.h"

namespace qkv::nn {

struct ConvNetConfig {
  int64_t in_channels = 1, image_height = 28, image_width = 28, num_classes = 10;
  std::vector<int64_t> channels = {32, 64, 128};  // c_s, one per stage
  std::vector<int64_t> blocks = {2, 2, 2};        // basic blocks per stage
  std::vector<int64_t> non_local = {};            // stages followed by a non-local block
  int64_t non_local_heads = 1;
  bool non_local_sub_sample = false;              // φ and g max-pooled 2×2
  double dropout = 0.0;                           // before the classifier
  std::vector<double> mean = {0.2860}, std = {0.3530};  // per channel (one value: every channel)
  std::vector<std::string> class_names;           // num_classes names (empty: "0", "1", …)

  static const io::Fields<ConvNetConfig>& fields();
  static ConvNetConfig from_json(const nlohmann::json& j);  // fields() plus consistency checks
  nlohmann::json to_json() const { return fields().to_json(*this); }
  int64_t width() const { return channels.empty() ? 0 : channels.back(); }
  std::string describe() const;
  std::string class_name(int64_t k) const;
};

// conv 3×3 → BN → ReLU → conv 3×3 → BN, plus the shortcut, → ReLU.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, Generator* gen);
  Tensor forward(const Tensor& x) const;  // [N, in, H, W] → [N, out, H/stride, W/stride]
  std::shared_ptr<Conv2d> conv1, conv2, down;  // down: the shortcut's 1×1 conv (null: identity)
  std::shared_ptr<BatchNorm2d> bn1, bn2, down_bn;
};

class ConvNet : public Module {
 public:
  using Config = ConvNetConfig;
  explicit ConvNet(const ConvNetConfig& config, Generator* gen = nullptr);

  // images [N, C, H, W], pixels in [0, 1] → logits [N, classes]. maps, when given, receives each
  // non-local block's attention in maps->image ([N, heads, H·W, H'·W'], no gradient) and its grids
  // in maps->image_grids.
  Tensor forward(const Tensor& images, AttentionMaps* maps = nullptr) const;
  // The trunk alone: images → the last stage's feature map [N, c_last, H/2^(S−1), W/2^(S−1)], the grid
  // a captioner attends over (nn/captioner.h builds its encoder with num_classes 0: no head).
  Tensor features(const Tensor& images, AttentionMaps* maps = nullptr) const;
  // Mean cross-entropy (label smoothing ε) against labels i32 [N].
  Tensor loss(const Tensor& images, const Tensor& labels, float label_smoothing = 0.f) const;
  void set_inference_weights(InferenceWeights) {}  // convolutions read the f32 weights

  ConvNetConfig config;
  std::shared_ptr<Conv2d> stem;
  std::shared_ptr<BatchNorm2d> stem_bn;
  std::vector<std::vector<std::shared_ptr<BasicBlock>>> stages;
  std::vector<std::shared_ptr<NonLocalBlock2d>> non_local;  // per stage; null where none
  std::shared_ptr<Linear> fc;

 private:
  Tensor scale_, shift_;  // [1, C, 1, 1]: 1/std and −mean/std
  Generator* gen_;
};

}  // namespace qkv::nn
