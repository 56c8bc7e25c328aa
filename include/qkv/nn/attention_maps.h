// What a model attended to in one forward pass, for pictures (`qkv attend`) and inspection: per
// layer, the weights [B, H, L, S] of each kind of attention it has. A kind the model lacks stays
// empty (a recurrent model with additive attention has one "cross" layer with one head, and no
// self-attention; a ConvNet has only "image" maps, one per non-local block).
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv::nn {

// Where the positions of an image map lie: queries on a height × width grid (P = height·width),
// keys on key_height × key_width (the same grid, or a pooled one).
struct ImageGrid {
  int64_t height = 0, width = 0, key_height = 0, key_width = 0;
};

struct AttentionMaps {
  std::vector<Tensor> encoder_self;  // source positions attending to the source      [B, H, S, S]
  std::vector<Tensor> decoder_self;  // output positions attending to earlier outputs [B, H, T, T]
  std::vector<Tensor> cross;         // output positions attending to the source      [B, H, T, S]
  std::vector<Tensor> image;         // image positions (h·W + w) attending to the image [B, H, P, P′]
  std::vector<ImageGrid> image_grids;  // the grids of each image map
};

}  // namespace qkv::nn
