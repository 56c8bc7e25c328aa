// PNG pictures: qkv's SVG documents (viz/svg.h) rasterized by librsvg and cairo (Debian's
// librsvg2-dev), so a loss curve or an attention map opens in any image viewer too.
#pragma once

#include <string>
#include <vector>

namespace qkv::viz {

// The PNG bytes of an SVG document drawn at `scale` times its size in pixels, on white.
// A document librsvg cannot read: qkv::Error with librsvg's message.
std::string svg_to_png(const std::string& svg, double scale = 2.0);

// The PNG bytes of a [height, width] grey picture with values in [0, 1] (clamped): a picture goes
// into an SVG as one embedded <image>, not one <rect> per pixel (librsvg reads at most 1,000,000
// elements: a contact sheet of 300 scenes had 1.2 million).
std::string grey_png(const std::vector<float>& image, int height, int width);

// Why PNG pictures cannot be drawn in this process — cairo or librsvg is not installed: the error
// naming the library and the package — or "" where they can. (Asked once, then remembered.)
const std::string& png_unavailable();

// Writes `svg` to `path` atomically (a temporary file, then rename): as PNG when the path ends in
// ".png" (any case), as the SVG text otherwise.
void write_picture(const std::string& path, const std::string& svg);

}  // namespace qkv::viz
