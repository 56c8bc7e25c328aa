// The captioner's attention picture: bilinear upsampling with PyTorch's align_corners=False
// sampling, the overlay's size and brightness, and PNG bytes that read back as the same picture.
#include <gtest/gtest.h>

#include <algorithm>

#include "qkv/core/error.h"
#include "qkv/io/file.h"
#include "qkv/vision/image.h"
#include "qkv/vision/overlay.h"
#include "testing.h"

namespace qkv::vision {
namespace {

TEST(Overlay, UpsamplesAsPyTorchBilinear) {
  // torch.nn.functional.interpolate(torch.tensor([[[[0., 1.], [2., 3.]]]]), size=(4, 4), mode="bilinear",
  // align_corners=False) = 2·r + c with r, c ∈ {0, .25, .75, 1}
  const std::vector<float> up = upsample_bilinear({0, 1, 2, 3}, 2, 2, 4, 4);
  const float s[4] = {0.f, 0.25f, 0.75f, 1.f};
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_FLOAT_EQ(up[static_cast<size_t>(y * 4 + x)], 2 * s[y] + s[x]) << y << "," << x;
  // a constant grid stays constant at any size; a 12×12 grid onto 96×96 keeps each cell's centre value
  for (float v : upsample_bilinear(std::vector<float>(6, 0.5f), 2, 3, 7, 5)) EXPECT_FLOAT_EQ(v, 0.5f);
  std::vector<float> g(144);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i);
  const std::vector<float> big = upsample_bilinear(g, 12, 12, 96, 96);
  // pixel (4, 4) … centre 4.5 → source 4.5/8 − ½ = 0.0625 in cell units: 0.9375·g[0] + 0.0625·g[1] per axis
  EXPECT_NEAR(big[4 * 96 + 4], 0.0625f * 1 + 0.0625f * 12, 1e-5);
  EXPECT_THROW(upsample_bilinear({1, 2, 3}, 2, 2, 4, 4), Error);
}

TEST(Overlay, BrightWhereAttendedDimElsewhere) {
  Image grey;
  grey.height = grey.width = 8;
  grey.pixels.assign(64, 0.8f);
  // all the weight in the top-left cell of a 2×2 grid
  const Image o = attention_overlay(grey, {1, 0, 0, 0}, 2, 2);
  ASSERT_EQ(o.channels, 3);
  ASSERT_EQ(o.pixels.size(), 3u * 64);
  const float corner = o.pixels[0], far = o.pixels[63];  // red plane, (0, 0) and (7, 7)
  EXPECT_GT(corner, 0.9f);
  EXPECT_NEAR(far, 0.8f * 0.15f, 1e-6);
  Image rgb = o;
  EXPECT_THROW(attention_overlay(rgb, {1, 0, 0, 0}, 2, 2), Error);  // not grey
}

TEST(Overlay, PngBytesReadBackAsThePicture) {
  Image img;
  img.channels = 3, img.height = 5, img.width = 7;
  for (int i = 0; i < 3 * 35; ++i) img.pixels.push_back(static_cast<float>(i % 11) / 10.f);
  const std::string bytes = encode_png(img);
  ASSERT_GT(bytes.size(), 8u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
  testing::TempDir d("overlay");
  const std::string path = (d.path / "x.png").string();
  io::write_file_atomic(path, bytes);
  const Image back = read_image(path, {3});
  ASSERT_EQ(back.pixels.size(), img.pixels.size());
  for (size_t i = 0; i < img.pixels.size(); ++i) EXPECT_NEAR(back.pixels[i], img.pixels[i], 0.5 / 255 + 1e-6);
}

}  // namespace
}  // namespace qkv::vision
