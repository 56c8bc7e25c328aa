#include "qkv/vision/image.h"

#include <gdk-pixbuf/gdk-pixbuf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <filesystem>

#include "qkv/core/error.h"
#include "qkv/core/shared_library.h"
#include "qkv/io/file.h"
#include "qkv/vision/picture_header.h"

namespace qkv::vision {

namespace {

// gdk-pixbuf, opened on the first picture read or written rather than linked
// (core/shared_library.h: a process that never reads one does not load it and its dependencies).
// The functions this file calls, by their own declarations; GLib's through gdk-pixbuf, which
// depends on it.
#define QKV_PIXBUF_FUNCTIONS(X)                                                                         \
  X(gdk_pixbuf_loader_new_with_type) X(gdk_pixbuf_loader_write) X(gdk_pixbuf_loader_close)                \
  X(gdk_pixbuf_loader_get_pixbuf) X(gdk_pixbuf_get_width) X(gdk_pixbuf_get_height) X(gdk_pixbuf_scale_simple) \
  X(gdk_pixbuf_get_n_channels) X(gdk_pixbuf_get_rowstride) X(gdk_pixbuf_get_has_alpha)                     \
  X(gdk_pixbuf_get_bits_per_sample) X(gdk_pixbuf_read_pixels) X(gdk_pixbuf_new) X(gdk_pixbuf_get_pixels)     \
  X(gdk_pixbuf_save_to_buffer) X(g_object_ref) X(g_object_unref) X(g_error_free) X(g_free)
struct PixbufLibrary {
#define QKV_DECLARE(f) decltype(&::f) f;
  QKV_PIXBUF_FUNCTIONS(QKV_DECLARE)
#undef QKV_DECLARE
};

const PixbufLibrary& pixbuf_library() {
  static const PixbufLibrary lib = [] {
    static const SharedLibrary so("gdk-pixbuf (PNG and JPEG pictures)", {"libgdk_pixbuf-2.0.so.0"},
                                  "apt-get install libgdk-pixbuf-2.0-0 (Debian)");
    PixbufLibrary l{};
#define QKV_BIND(f) so.bind(l.f, #f);
    QKV_PIXBUF_FUNCTIONS(QKV_BIND)
#undef QKV_BIND
    return l;
  }();
  return lib;
}

struct Unref {
  void operator()(void* p) const {
    if (p) pixbuf_library().g_object_unref(p);
  }
};
using Pixbuf = std::unique_ptr<GdkPixbuf, Unref>;

// What a path that is not a regular file is, for the refusal: opening a FIFO would wait for a
// writer, a device would be read forever.
std::string not_a_file(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

// A JPEG's frame must be Huffman-coded (SOF0–SOF3, SOF5–SOF7): libjpeg's arithmetic decoder
// (SOF9–SOF11, SOF13–SOF15) spins for minutes on a crafted 111-byte stream (the image fuzzer found
// it), and cameras and encoders do not write it. The segments are walked from SOI to the first
// scan (SOS); an error names the picture.
void check_jpeg_frame(const std::string& path, const std::string& bytes) {
  size_t i = 2;  // past SOI
  while (i + 4 <= bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) != 0xFF) return;  // not a marker: the decoder says what is wrong
    const auto marker = static_cast<unsigned char>(bytes[i + 1]);
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xDA) return;  // SOS: the frame header came before
    QKV_CHECK(!(marker >= 0xC9 && marker <= 0xCF && marker != 0xCC), path,
              ": cannot read the image (an arithmetic-coded JPEG, which qkv does not decode; save it as a baseline or "
              "progressive JPEG)");
    i += 2 + (static_cast<size_t>(static_cast<unsigned char>(bytes[i + 2])) << 8 |
              static_cast<unsigned char>(bytes[i + 3]));
  }
}

// The bytes through gdk-pixbuf's loader of that one format, never the one its content sniffing
// would pick.
Pixbuf decode(const std::string& path, const std::string& bytes, PictureFormat format) {
  if (format == PictureFormat::jpeg) check_jpeg_frame(path, bytes);
  const PixbufLibrary& lib = pixbuf_library();
  GError* err = nullptr;
  auto failure = [&](const char* what) {
    const std::string msg = err ? err->message : what;
    if (err) lib.g_error_free(err);
    return Error(detail::concat(path, ": cannot read the image (", msg, ")"));
  };
  std::unique_ptr<GdkPixbufLoader, Unref> loader(
      lib.gdk_pixbuf_loader_new_with_type(format == PictureFormat::png ? "png" : "jpeg", &err));
  if (!loader) throw failure("no loader");
  const bool wrote = lib.gdk_pixbuf_loader_write(loader.get(), reinterpret_cast<const guchar*>(bytes.data()),
                                             bytes.size(), &err);
  if (!wrote) {
    GError* ignored = nullptr;
    lib.gdk_pixbuf_loader_close(loader.get(), &ignored);  // a loader must be closed before it is freed
    if (ignored) lib.g_error_free(ignored);
    throw failure("unknown error");
  }
  if (!lib.gdk_pixbuf_loader_close(loader.get(), &err)) throw failure("unknown error");
  GdkPixbuf* pb = lib.gdk_pixbuf_loader_get_pixbuf(loader.get());
  if (!pb) throw failure("the picture is incomplete");
  // (lib.g_object_ref in parentheses: GLib also defines g_object_ref as a macro)
  return Pixbuf(static_cast<GdkPixbuf*>((lib.g_object_ref)(pb)));
}

}  // namespace

Image read_image(const std::string& path, const ReadImageOptions& o) {
  QKV_CHECK(o.channels == 1 || o.channels == 3, "read_image: ", o.channels, " channels (1 or 3)");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    throw Error(err == ENOENT ? detail::concat("'", path, "': no such file")
                              : detail::concat("'", path, "': ", std::strerror(err)));
  }
  QKV_CHECK(S_ISREG(st.st_mode), "'", path, "': ", not_a_file(st), ", not a picture file");
  QKV_CHECK(st.st_size <= kMaxPictureFileBytes, "'", path, "': cannot read the image (a file of ", st.st_size,
            " bytes, more than the ", kMaxPictureFileBytes, " a picture may have)");
  return decode_image(io::read_file(path), "'" + path + "'", o);
}

Image decode_image(const std::string& bytes, const std::string& name, const ReadImageOptions& o) {
  QKV_CHECK(o.channels == 1 || o.channels == 3, "decode_image: ", o.channels, " channels (1 or 3)");
  QKV_CHECK(static_cast<int64_t>(bytes.size()) <= kMaxPictureFileBytes, name, ": cannot read the image (",
            bytes.size(), " bytes, more than the ", kMaxPictureFileBytes, " a picture may have)");
  // The header first: format and size are checked before a decoder allocates anything.
  PictureHeader header;
  try {
    header = read_picture_header(bytes);
  } catch (const Error& e) {
    throw Error(detail::concat(name, ": cannot read the image (", e.what(), ")"));
  }
  const PixbufLibrary& lib = pixbuf_library();
  Pixbuf pb = decode(name, bytes, header.format);
  QKV_CHECK(lib.gdk_pixbuf_get_width(pb.get()) == header.width && lib.gdk_pixbuf_get_height(pb.get()) == header.height,
            name, ": cannot read the image (decoded as ", lib.gdk_pixbuf_get_width(pb.get()), "×",
            lib.gdk_pixbuf_get_height(pb.get()), ", its header says ", header.width, "×", header.height, ")");
  if (o.height > 0 && o.width > 0 &&
      (lib.gdk_pixbuf_get_height(pb.get()) != o.height || lib.gdk_pixbuf_get_width(pb.get()) != o.width)) {
    Pixbuf scaled(lib.gdk_pixbuf_scale_simple(pb.get(), static_cast<int>(o.width), static_cast<int>(o.height),
                                          GDK_INTERP_BILINEAR));
    QKV_CHECK(scaled != nullptr, name, ": cannot resize the image to ", o.width, "×", o.height);
    pb = std::move(scaled);
  }
  const int W = lib.gdk_pixbuf_get_width(pb.get()), H = lib.gdk_pixbuf_get_height(pb.get());
  const int n = lib.gdk_pixbuf_get_n_channels(pb.get()), stride = lib.gdk_pixbuf_get_rowstride(pb.get());
  const bool alpha = lib.gdk_pixbuf_get_has_alpha(pb.get());
  QKV_CHECK(lib.gdk_pixbuf_get_bits_per_sample(pb.get()) == 8 && n >= 3, name, ": an unsupported pixel layout");
  const guchar* px = lib.gdk_pixbuf_read_pixels(pb.get());
  Image img;
  img.channels = o.channels, img.height = H, img.width = W;
  img.pixels.resize(static_cast<size_t>(o.channels * H * W));
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      const guchar* p = px + static_cast<ptrdiff_t>(y) * stride + x * n;
      const float a = alpha ? p[3] / 255.f : 1.f;  // over black
      float rgb[3] = {p[0] / 255.f * a, p[1] / 255.f * a, p[2] / 255.f * a};
      if (o.invert)
        for (float& v : rgb) v = 1.f - v;
      const size_t i = static_cast<size_t>(y) * W + x;
      if (o.channels == 1) {
        img.pixels[i] = 0.299f * rgb[0] + 0.587f * rgb[1] + 0.114f * rgb[2];
      } else {
        for (int c = 0; c < 3; ++c) img.pixels[static_cast<size_t>(c) * H * W + i] = rgb[c];
      }
    }
  return img;
}

void write_png(const std::string& path, const Image& img) {
  std::string bytes;
  try {
    bytes = encode_png(img);
  } catch (const Error& e) {
    throw Error(detail::concat("write_png: '", path, "': ", e.what()));
  }
  io::write_file_atomic(path, bytes);
}

std::string encode_png(const Image& img) {
  QKV_CHECK((img.channels == 1 || img.channels == 3) && img.height > 0 && img.width > 0 &&
                img.height <= 1 << 15 && img.width <= 1 << 15 &&
                img.pixels.size() == static_cast<size_t>(img.channels * img.height * img.width),
            "PNG: an image of ", img.channels, "×", img.height, "×", img.width, " with ",
            img.pixels.size(), " values");
  const int H = static_cast<int>(img.height), W = static_cast<int>(img.width);
  const PixbufLibrary& lib = pixbuf_library();
  Pixbuf pb(lib.gdk_pixbuf_new(GDK_COLORSPACE_RGB, FALSE, 8, W, H));
  QKV_CHECK(pb != nullptr, "PNG: cannot allocate a ", W, "×", H, " picture");
  guchar* px = lib.gdk_pixbuf_get_pixels(pb.get());
  const int stride = lib.gdk_pixbuf_get_rowstride(pb.get());
  const size_t plane = static_cast<size_t>(H) * W;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c) {
        const float v = img.pixels[(img.channels == 1 ? 0 : c * plane) + static_cast<size_t>(y) * W + x];
        px[static_cast<ptrdiff_t>(y) * stride + x * 3 + c] =
            static_cast<guchar>(std::lround(std::clamp(v, 0.f, 1.f) * 255.f));
      }
  gchar* buf = nullptr;
  gsize size = 0;
  GError* err = nullptr;
  if (!lib.gdk_pixbuf_save_to_buffer(pb.get(), &buf, &size, "png", &err, nullptr)) {
    const std::string msg = err ? err->message : "unknown error";
    if (err) lib.g_error_free(err);
    throw Error(detail::concat("PNG: ", msg));
  }
  std::string bytes(buf, size);
  lib.g_free(buf);
  return bytes;
}

}  // namespace qkv::vision
