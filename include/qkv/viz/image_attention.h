// Attention over a picture (the non-local block's "non-local means", seed 001): for a query pixel,
// where in the image its new value is drawn from. Each panel shows the image in grey with the
// attention weights over it as a red overlay (opacity ∝ weight / the panel's largest weight), the
// query marked by a cyan ring; panels sit in a grid (one row per image, one column per query).
// A panel may also outline boxes (green: where the ground truth says an object is), have no query
// (a captioner's step attends from its word, not from a pixel) or no weights (the picture alone);
// a long caption wraps onto more lines, and a panel may bring its picture as a PNG (a captioner's
// smooth, upsampled attention, drawn in beforehand).
#pragma once

#include <string>
#include <vector>

namespace qkv::viz {

struct ImageAttentionPanel {
  std::string caption;
  std::vector<float> image;  // [height, width] grey levels in [0, 1]
  std::string png;           // or, when not empty, the picture as PNG bytes (e.g. an attention overlay
                             //   already drawn in, vision/overlay.h), embedded as a data URI
  int height = 0, width = 0;
  std::vector<float> weights;  // [rows, cols]: the attention over a coarser grid covering the image
  int rows = 0, cols = 0;      //   (0 × 0: none)
  bool show_query = true;
  float query_y = 0, query_x = 0;  // the query, in image pixels (centre of its cell)
  struct Box {
    float x0, y0, x1, y1;  // in image pixels, [x0, x1) × [y0, y1)
  };
  std::vector<Box> boxes;
};

struct ImageAttentionOptions {
  std::string title;
  int pixel = 6;  // px per image pixel
};

// A qkv::Error when a panel's sizes do not match its vectors.
std::string image_attention_svg(const std::vector<ImageAttentionPanel>& panels, int grid_cols,
                                const ImageAttentionOptions& opt);

}  // namespace qkv::viz
