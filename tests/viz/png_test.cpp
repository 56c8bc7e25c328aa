// SVG → PNG through librsvg: the PNG has the SVG's size times the scale, the picture is what the
// SVG draws (a black square on white where the SVG puts it), and bad input is a clear error.
#include "qkv/viz/png.h"

#include <gtest/gtest.h>

#include <cairo.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "qkv/core/error.h"
#include "qkv/io/file.h"
#include "qkv/viz/svg.h"
#include "testing.h"

namespace qkv::viz {
namespace {

uint32_t be32(const std::string& s, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(s[at])) << 24 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 2])) << 8 | static_cast<unsigned char>(s[at + 3]);
}

struct Reader {
  const std::string* s;
  size_t at = 0;
};
cairo_status_t read_png(void* closure, unsigned char* data, unsigned int length) {
  auto* r = static_cast<Reader*>(closure);
  if (r->at + length > r->s->size()) return CAIRO_STATUS_READ_ERROR;
  std::copy_n(r->s->data() + r->at, length, data);
  r->at += length;
  return CAIRO_STATUS_SUCCESS;
}

// The 0xRRGGBB colour of pixel (x, y) of a PNG.
uint32_t pixel(const std::string& png, int x, int y) {
  Reader r{&png};
  cairo_surface_t* s = cairo_image_surface_create_from_png_stream(read_png, &r);
  EXPECT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  const unsigned char* row = cairo_image_surface_get_data(s) + y * cairo_image_surface_get_stride(s);
  const uint32_t argb = reinterpret_cast<const uint32_t*>(row)[x];
  cairo_surface_destroy(s);
  return argb & 0xFFFFFF;
}

TEST(Png, DrawsTheSvgAtTwiceItsSize) {
  const std::string svg =
      "<svg xmlns='http://www.w3.org/2000/svg' width='40' height='30'>"
      "<rect x='10' y='10' width='10' height='10' fill='#000000'/></svg>";
  const std::string png = svg_to_png(svg);
  ASSERT_GT(png.size(), 24u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(be32(png, 16), 80u);  // IHDR width
  EXPECT_EQ(be32(png, 20), 60u);  // IHDR height
  EXPECT_EQ(pixel(png, 30, 30), 0x000000u);  // inside the square (20..40 at scale 2)
  EXPECT_EQ(pixel(png, 5, 5), 0xFFFFFFu);    // the white background
  EXPECT_EQ(pixel(png, 50, 30), 0xFFFFFFu);
  EXPECT_EQ(be32(svg_to_png(svg, 1.0), 16), 40u);
}

TEST(Png, RendersQkvPlots) {
  LinePlotOptions o;
  o.title = "loss";
  const std::string png = svg_to_png(line_plot_svg({{"train", {0, 1, 2}, {3.0, 2.0, 1.5}}}, o));
  EXPECT_EQ(be32(png, 16), static_cast<uint32_t>(2 * o.width));
  EXPECT_EQ(be32(png, 20), static_cast<uint32_t>(2 * o.height));
}

TEST(Png, WritePictureChoosesByExtensionAndBadSvgIsAnError) {
  testing::TempDir d("png");
  const std::string svg = "<svg xmlns='http://www.w3.org/2000/svg' width='4' height='4'/>";
  write_picture((d.path / "a.PNG").string(), svg);
  write_picture((d.path / "a.svg").string(), svg);
  EXPECT_EQ(io::read_file((d.path / "a.PNG").string()).substr(1, 3), "PNG");
  EXPECT_EQ(io::read_file((d.path / "a.svg").string()), svg);
  EXPECT_THROW(svg_to_png("<svg"), Error);
  EXPECT_THROW(svg_to_png("not a picture"), Error);
  EXPECT_THROW(write_picture((d.path / "b.png").string(), "<svg"), Error);
  EXPECT_FALSE(std::filesystem::exists(d.path / "b.png"));
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(d.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 2) << "nothing half-written";
}

}  // namespace
}  // namespace qkv::viz
