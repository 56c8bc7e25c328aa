// What a model attended to in one forward pass, for pictures (`qkv attend`) and inspection: per
// layer, the weights [B, H, L, S] of each kind of attention it has. A kind the model lacks stays
// empty (a recurrent model with additive attention has one "cross" layer with one head, and no
// self-attention; a ConvNet has only "image" maps, one per non-local block).
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv::nn {

struct AttentionMaps {
  std::vector<Tensor> encoder_self;  // source positions attending to the source      [B, H, S, S]
  std::vector<Tensor> decoder_self;  // output positions attending to earlier outputs [B, H, T, T]
  std::vector<Tensor> cross;         // output positions attending to the source      [B, H, T, S]
  std::vector<Tensor> image;         // image positions (h·W + w) attending to the image [B, H, P, P′]
};

}  // namespace qkv::nn
