// What a picture file is and how big it says it is, read from its first bytes before anything is
// decoded: qkv decodes PNG and JPEG only, and only pictures whose size it can afford.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace qkv::vision {

enum class PictureFormat { png, jpeg };

struct PictureHeader {
  PictureFormat format;
  int64_t width = 0, height = 0;
};

// The largest picture read_image decodes: 2^25 pixels (e.g. 5792×5792; 128 MiB as gdk-pixbuf's
// RGBA) and 2^16 − 1 on a side, and files up to 256 MiB.
inline constexpr int64_t kMaxPicturePixels = int64_t{1} << 25;
inline constexpr int64_t kMaxPictureSide = 65535;
inline constexpr int64_t kMaxPictureFileBytes = int64_t{256} << 20;

// The format (by the magic bytes, whatever the name says) and the size of the picture in `bytes`:
// PNG's signature and IHDR, with every chunk's length checked against the bytes that follow it up to
// IEND; JPEG's SOI and markers up to its frame header (SOFn), every segment within the bytes. A
// picture larger than the bounds above, of another kind (named when it is a known one: SVG, TIFF,
// GIF, BMP, …) or whose header is cut short or lies is a qkv::Error whose message is the reason
// alone (the caller names the file).
PictureHeader read_picture_header(std::string_view bytes);

}  // namespace qkv::vision
