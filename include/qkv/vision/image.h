// Reading one picture for a classifier: PNG or JPEG (by its magic bytes; vision/picture_header.h
// checks its size first) through gdk-pixbuf's loader of that format (Debian's libgdk-pixbuf), converted to the model's channels and size; writing one as PNG.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::vision {

struct Image {
  int64_t channels = 1, height = 0, width = 0;
  std::vector<float> pixels;  // [channels, height, width], in [0, 1]
};

struct ReadImageOptions {
  int64_t channels = 1;          // 1: luminance (0.299 R + 0.587 G + 0.114 B); 3: RGB
  int64_t height = 0, width = 0; // > 0: resized to this (bilinear); 0: as the file has it
  bool invert = false;           // 1 − x: dark objects on light ground → light on dark (as Fashion-MNIST)
};

// Transparent pixels are composited over black. A missing file, a directory, FIFO or device, a
// picture of another format, one larger than vision::kMaxPicturePixels or an undecodable one is a
// qkv::Error naming it.
Image read_image(const std::string& path, const ReadImageOptions& options = {});
// The same from a picture's bytes (a PNG or JPEG sent over the wire); `name` says which picture in
// an error ("\"image\"").
Image decode_image(const std::string& bytes, const std::string& name, const ReadImageOptions& options = {});

// Writes a 1- or 3-channel image (values clamped to [0, 1]) as an 8-bit PNG, atomically (a
// temporary file, then rename); read_image gives the same pixels back, to 1/255.
void write_png(const std::string& path, const Image& image);
// The same PNG's bytes (for a picture embedded in an SVG, or sent over the wire).
std::string encode_png(const Image& image);

}  // namespace qkv::vision
