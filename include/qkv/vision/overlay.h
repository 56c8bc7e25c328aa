// Show, Attend and Tell's picture of one decoding step: the attention weights over the coarse grid
// upsampled to the image's pixels and laid over it — bright where the decoder looks, dim elsewhere.
//
//   upsample:  bilinear at pixel centres, PyTorch's interpolate(mode="bilinear", align_corners=False):
//              src = (dst + ½) · (grid / size) − ½, clamped to the grid (the paper smooths its 14×14
//              maps the same way, with skimage's pyramid_expand)
//   overlay:   a = up(α) / max up(α);  rgb = g · (0.15 + 0.85 a) + a · (0.45, 0.12, 0.05), clamped
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/vision/image.h"

namespace qkv::vision {

// grid [rows, cols] → [height, width]
std::vector<float> upsample_bilinear(const std::vector<float>& grid, int64_t rows, int64_t cols, int64_t height,
                                     int64_t width);

// A 1-channel image and one step's weights [rows, cols] → a 3-channel picture of the same size.
Image attention_overlay(const Image& grey, const std::vector<float>& weights, int64_t rows, int64_t cols);

}  // namespace qkv::vision
