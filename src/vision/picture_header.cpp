// A picture's header, read by hand before any decoder sees the bytes: gdk-pixbuf picks its loader
// by content (SVG, TIFF, XPM, ANI, ICNS, TGA… behind a ".png" name) and allocates what a header
// claims before checking it against the file (a 389 KB PNG saying 20000×20000 cost 2.7 GB; a
// 57-byte one with a tEXt chunk saying 2^31 bytes cost 2 GB).
#include "qkv/vision/picture_header.h"

#include <zlib.h>

#include <cstring>
#include <optional>

#include "qkv/core/error.h"

namespace qkv::vision {
namespace {

uint32_t be32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
uint32_t be16(const unsigned char* p) { return uint32_t{p[0]} << 8 | p[1]; }

bool starts_with(std::string_view b, std::string_view magic) { return b.substr(0, magic.size()) == magic; }

// What the bytes are when they are not PNG or JPEG, for the refusal.
std::string other_kind(std::string_view b) {
  if (b.empty()) return "an empty file";
  if (starts_with(b, "GIF87a") || starts_with(b, "GIF89a")) return "a GIF picture";
  if (starts_with(b, "BM")) return "a BMP picture";
  if (starts_with(b, std::string_view("II*\0", 4)) || starts_with(b, std::string_view("MM\0*", 4)))
    return "a TIFF picture";
  const std::string_view riff = b.size() >= 12 && starts_with(b, "RIFF") ? b.substr(8, 4) : "";
  if (riff == "WEBP") return "a WebP picture";
  if (riff == "ACON") return "an animated cursor (ANI)";
  if (starts_with(b, "icns")) return "an Apple icon (ICNS)";
  if (starts_with(b, std::string_view("\0\0\1\0", 4))) return "a Windows icon (ICO)";
  if (starts_with(b, "/* XPM */")) return "an XPM picture";
  if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7') return "a PNM picture (PBM/PGM/PPM)";
  if (b.substr(0, 512).find("<svg") != std::string_view::npos || starts_with(b, "<?xml")) return "an SVG or XML file";
  return "of an unknown kind";
}

void check_size(int64_t width, int64_t height) {
  QKV_CHECK(width > 0 && height > 0, "a picture of ", width, "×", height, " pixels");
  QKV_CHECK(width <= kMaxPictureSide && height <= kMaxPictureSide && width * height <= kMaxPicturePixels,
            "a picture of ", width, "×", height, " pixels, more than the ", kMaxPicturePixels,
            " (and ", kMaxPictureSide, " on a side) qkv decodes");
}

// The bytes a PNG's image data inflates to (the filter byte of each row + its packed pixels), per
// Adam7 pass when interlaced: width × height pixels of `bits` bits each.
int64_t png_data_bytes(int64_t width, int64_t height, int64_t bits, bool interlaced) {
  auto rows = [&](int64_t w, int64_t h) { return w > 0 && h > 0 ? h * (1 + (w * bits + 7) / 8) : int64_t{0}; };
  if (!interlaced) return rows(width, height);
  static const int pass[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                 {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};  // x0, y0, dx, dy
  int64_t n = 0;
  for (const auto& q : pass) n += rows((width - q[0] + q[2] - 1) / q[2], (height - q[1] + q[3] - 1) / q[3]);
  return n;
}

// Counts what the IDAT stream inflates to, fed chunk by chunk as the header walk meets them (no
// copy of the data): at most `cap` + 1 bytes (a stream longer than the picture is wrong already);
// bytes() is −1 unless the zlib stream ended. gdk-pixbuf's PNG loader fills a picture whose data
// stops short with zeros and says nothing: a 96×96 picture of 50 bytes was read.
class InflatedSize {
 public:
  explicit InflatedSize(int64_t cap) : cap_(cap) { ok_ = inflateInit(&s_) == Z_OK; }
  ~InflatedSize() {
    if (ok_) inflateEnd(&s_);
  }
  InflatedSize(const InflatedSize&) = delete;
  InflatedSize& operator=(const InflatedSize&) = delete;
  void feed(std::string_view z) {
    s_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(z.data()));
    s_.avail_in = static_cast<uInt>(z.size());
    // until the chunk is used up and zlib holds no more output (a full buffer may leave some)
    bool full = true;
    while (ok_ && rc_ == Z_OK && n_ <= cap_ && (s_.avail_in > 0 || full)) {
      s_.next_out = out_, s_.avail_out = sizeof out_;
      rc_ = inflate(&s_, Z_NO_FLUSH);
      n_ += static_cast<int64_t>(sizeof out_ - s_.avail_out);
      full = s_.avail_out == 0;
      if (rc_ == Z_BUF_ERROR && s_.avail_in == 0) rc_ = Z_OK;  // nothing left to do: wait for the next chunk
      if (s_.avail_in == 0 && !full) break;
    }
  }
  int64_t bytes() const { return ok_ && rc_ == Z_STREAM_END ? n_ : -1; }

 private:
  z_stream s_{};
  bool ok_ = false;
  int rc_ = Z_OK;
  int64_t cap_, n_ = 0;
  unsigned char out_[1 << 16];
};

// PNG: signature, then chunks (length, type, data, CRC); IHDR first, IEND last. Each chunk must lie
// within the file: libpng allocates a chunk's stated length before reading it. The image data must
// inflate to exactly what IHDR's size, colour type and bit depth take.
PictureHeader png_header(std::string_view b) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data());
  size_t at = 8;
  PictureHeader h{PictureFormat::png};
  int64_t want = 0;  // the bytes the image data must inflate to (IHDR's size, colour type, depth)
  std::optional<InflatedSize> idat;  // made once IHDR has said how much the data must be
  for (bool first = true;; first = false) {
    QKV_CHECK(b.size() - at >= 12, "a PNG cut short at byte ", at, " (no IEND chunk)");
    const uint32_t length = be32(p + at);
    const std::string type(b.substr(at + 4, 4));
    QKV_CHECK(length <= b.size() - at - 12, "a PNG whose chunk at byte ", at, " says ", length,
              " bytes, more than the ", b.size() - at - 12, " that follow it");
    if (first) {
      QKV_CHECK(type == "IHDR" && length == 13, "a PNG whose first chunk is not a 13-byte IHDR");
      h.width = be32(p + at + 8), h.height = be32(p + at + 12);
      check_size(h.width, h.height);
      const int depth = p[at + 16], colour = p[at + 17];
      const int channels = colour == 0 ? 1 : colour == 2 ? 3 : colour == 3 ? 1 : colour == 4 ? 2 : colour == 6 ? 4 : 0;
      QKV_CHECK(channels > 0 && (depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16),
                "a PNG of colour type ", colour, " and bit depth ", depth, " (not a PNG's)");
      want = png_data_bytes(h.width, h.height, int64_t{channels} * depth, p[at + 20] != 0);
      idat.emplace(want);
    }
    if (type == "IDAT") idat->feed(b.substr(at + 8, length));
    if (type == "IEND") {
      const int64_t got = idat->bytes();
      QKV_CHECK(got == want, "a PNG whose image data ", got < 0 ? "is not a complete zlib stream" : "inflates to ",
                got < 0 ? "" : std::to_string(got) + " bytes", " (", h.width, "×", h.height, " pixels take ", want, ")");
      return h;
    }
    at += 12 + size_t{length};
  }
}

// JPEG: SOI, then marker segments (FF xx, a 2-byte length that counts itself) up to the frame
// header SOFn (C0–CF but C4 DHT, C8 JPG, CC DAC), which holds the height and width.
PictureHeader jpeg_header(std::string_view b) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data());
  size_t at = 2;
  while (true) {
    while (at < b.size() && p[at] == 0xFF && at + 1 < b.size() && p[at + 1] == 0xFF) ++at;  // fill bytes
    QKV_CHECK(b.size() - at >= 2 && p[at] == 0xFF, "a JPEG cut short or broken at byte ", at, " (no frame header)");
    const unsigned marker = p[at + 1];
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length
      at += 2;
      continue;
    }
    QKV_CHECK(marker != 0xD9 && marker != 0xDA, "a JPEG without a frame header before its ",
              marker == 0xD9 ? "end" : "scan");
    QKV_CHECK(b.size() - at >= 4, "a JPEG cut short at byte ", at);
    const uint32_t length = be16(p + at + 2);
    QKV_CHECK(length >= 2 && length <= b.size() - at - 2, "a JPEG whose segment at byte ", at, " says ",
              length, " bytes, more than the ", b.size() - at - 2, " that follow it");
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      QKV_CHECK(length >= 8, "a JPEG with a ", length, "-byte frame header");
      PictureHeader h{PictureFormat::jpeg};
      h.height = be16(p + at + 5), h.width = be16(p + at + 7);
      check_size(h.width, h.height);
      return h;
    }
    at += 2 + size_t{length};
  }
}

}  // namespace

PictureHeader read_picture_header(std::string_view bytes) {
  QKV_CHECK(static_cast<int64_t>(bytes.size()) <= kMaxPictureFileBytes, "a file of ", bytes.size(),
            " bytes, more than the ", kMaxPictureFileBytes, " a picture may have");
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n")) return png_header(bytes);
  if (starts_with(bytes, "\xFF\xD8\xFF")) return jpeg_header(bytes);
  throw Error(detail::concat("not a PNG or JPEG picture: ", other_kind(bytes)));
}

}  // namespace qkv::vision
