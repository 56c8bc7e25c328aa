#include "qkv/vision/overlay.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/error.h"

namespace qkv::vision {

std::vector<float> upsample_bilinear(const std::vector<float>& grid, int64_t rows, int64_t cols, int64_t height,
                                     int64_t width) {
  QKV_CHECK(rows > 0 && cols > 0 && height > 0 && width > 0 && grid.size() == static_cast<size_t>(rows * cols),
            "upsample_bilinear: a ", rows, "×", cols, " grid of ", grid.size(), " values to ", height, "×", width);
  // src = (dst + ½) · scale − ½, clamped at 0 (align_corners=False); the last cell repeats past the edge
  auto coord = [](int64_t dst, int64_t in, int64_t out, int64_t& i0, int64_t& i1, float& f) {
    const double src = std::max(0.0, (static_cast<double>(dst) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5);
    i0 = std::min<int64_t>(static_cast<int64_t>(src), in - 1);
    i1 = std::min<int64_t>(i0 + 1, in - 1);
    f = static_cast<float>(src - static_cast<double>(i0));
  };
  std::vector<float> out(static_cast<size_t>(height * width));
  for (int64_t y = 0; y < height; ++y) {
    int64_t r0, r1;
    float fy;
    coord(y, rows, height, r0, r1, fy);
    for (int64_t x = 0; x < width; ++x) {
      int64_t c0, c1;
      float fx;
      coord(x, cols, width, c0, c1, fx);
      auto at = [&](int64_t r, int64_t c) { return grid[static_cast<size_t>(r * cols + c)]; };
      out[static_cast<size_t>(y * width + x)] = (1 - fy) * ((1 - fx) * at(r0, c0) + fx * at(r0, c1)) +
                                                fy * ((1 - fx) * at(r1, c0) + fx * at(r1, c1));
    }
  }
  return out;
}

Image attention_overlay(const Image& grey, const std::vector<float>& weights, int64_t rows, int64_t cols) {
  QKV_CHECK(grey.channels == 1 && grey.pixels.size() == static_cast<size_t>(grey.height * grey.width),
            "attention_overlay: a grey image is 1×H×W, got ", grey.channels, "×", grey.height, "×", grey.width);
  const std::vector<float> up = upsample_bilinear(weights, rows, cols, grey.height, grey.width);
  const float top = *std::max_element(up.begin(), up.end());
  Image out;
  out.channels = 3, out.height = grey.height, out.width = grey.width;
  const size_t plane = grey.pixels.size();
  out.pixels.resize(3 * plane);
  static constexpr float kTint[3] = {0.45f, 0.12f, 0.05f};
  for (size_t p = 0; p < plane; ++p) {
    const float a = top > 0 ? std::max(0.f, up[p]) / top : 0.f, g = grey.pixels[p];
    for (size_t c = 0; c < 3; ++c) out.pixels[c * plane + p] = std::clamp(g * (0.15f + 0.85f * a) + a * kTint[c], 0.f, 1.f);
  }
  return out;
}

}  // namespace qkv::vision
