#include "qkv/viz/png.h"

#include <cairo.h>
#include <librsvg/rsvg.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/core/shared_library.h"
#include "qkv/io/file.h"

namespace qkv::viz {

namespace {

// cairo and librsvg, opened on the first picture drawn rather than linked (core/shared_library.h: a
// process that never draws one — a translation — does not load them and their ~50 dependencies).
// The functions this file calls, by their own declarations; GLib's two through librsvg, which
// depends on it.
#define QKV_CAIRO_FUNCTIONS(X)                                                                       \
  X(cairo_image_surface_create) X(cairo_surface_status) X(cairo_status_to_string) X(cairo_surface_flush) \
  X(cairo_image_surface_get_data) X(cairo_image_surface_get_stride) X(cairo_surface_mark_dirty)          \
  X(cairo_surface_write_to_png_stream) X(cairo_surface_destroy) X(cairo_create) X(cairo_destroy)         \
  X(cairo_set_source_rgb) X(cairo_paint) X(cairo_scale)
#define QKV_RSVG_FUNCTIONS(X)                                                                        \
  X(rsvg_handle_new_from_data) X(rsvg_handle_get_intrinsic_size_in_pixels) X(rsvg_handle_render_document) \
  X(g_object_unref) X(g_error_free)
#define QKV_DECLARE(f) decltype(&::f) f;
struct Graphics {
  QKV_CAIRO_FUNCTIONS(QKV_DECLARE)
  QKV_RSVG_FUNCTIONS(QKV_DECLARE)
};
#undef QKV_DECLARE

const Graphics& graphics() {
  static const Graphics lib = [] {
    const char* install = "PNG pictures need it: apt-get install librsvg2-2 (Debian), or write the picture as .svg";
    static const SharedLibrary cairo("cairo", {"libcairo.so.2"}, install), rsvg("librsvg", {"librsvg-2.so.2"}, install);
    Graphics g{};
#define QKV_BIND_CAIRO(f) cairo.bind(g.f, #f);
#define QKV_BIND_RSVG(f) rsvg.bind(g.f, #f);
    QKV_CAIRO_FUNCTIONS(QKV_BIND_CAIRO)
    QKV_RSVG_FUNCTIONS(QKV_BIND_RSVG)
#undef QKV_BIND_CAIRO
#undef QKV_BIND_RSVG
    return g;
  }();
  return lib;
}

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

std::string take_message(GError* err) {
  const Graphics& lib = graphics();
  std::string m = err && err->message ? err->message : "unknown error";
  if (err) lib.g_error_free(err);
  return m;
}

}  // namespace

std::string grey_png(const std::vector<float>& image, int height, int width) {
  QKV_CHECK(height > 0 && width > 0 && image.size() == static_cast<size_t>(height) * width, "grey_png: ",
            image.size(), " values for a ", height, "×", width, " picture");
  const Graphics& lib = graphics();
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      lib.cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height), lib.cairo_surface_destroy);
  QKV_CHECK(lib.cairo_surface_status(surface.get()) == CAIRO_STATUS_SUCCESS, "grey_png: cannot create a ", width, "×",
            height, " picture: ", lib.cairo_status_to_string(lib.cairo_surface_status(surface.get())));
  lib.cairo_surface_flush(surface.get());
  unsigned char* data = lib.cairo_image_surface_get_data(surface.get());
  const int stride = lib.cairo_image_surface_get_stride(surface.get());
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const auto g = static_cast<uint32_t>(
          std::lround(std::clamp(image[static_cast<size_t>(y) * width + x], 0.f, 1.f) * 255.f));
      reinterpret_cast<uint32_t*>(data + static_cast<ptrdiff_t>(y) * stride)[x] = g << 16 | g << 8 | g;  // xRGB
    }
  lib.cairo_surface_mark_dirty(surface.get());
  std::string png;
  QKV_CHECK(lib.cairo_surface_write_to_png_stream(surface.get(), append_to_string, &png) == CAIRO_STATUS_SUCCESS,
            "grey_png: cannot encode a ", width, "×", height, " picture");
  return png;
}

const std::string& png_unavailable() {
  static const std::string why = [] {
    try {
      graphics();
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  return why;
}

std::string svg_to_png(const std::string& svg, double scale) {
  QKV_CHECK(scale > 0 && scale <= 16, "svg_to_png: scale must be in (0, 16], got ", scale);
  const Graphics& lib = graphics();
  GError* err = nullptr;
  std::unique_ptr<RsvgHandle, decltype(&g_object_unref)> handle(
      lib.rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()), svg.size(), &err), lib.g_object_unref);
  QKV_CHECK(handle, "svg_to_png: librsvg cannot read the SVG: ", take_message(err));
  gdouble w = 0, h = 0;
  QKV_CHECK(lib.rsvg_handle_get_intrinsic_size_in_pixels(handle.get(), &w, &h) && w > 0 && h > 0,
            "svg_to_png: the SVG has no size in pixels (width/height attributes)");
  // A document too large for the scale is drawn smaller: cairo's surfaces hold at most 32767 pixels a
  // side (a contact sheet of 300 scenes was 40280 tall), and 2^26 pixels (256 MiB) is plenty for a
  // picture meant to be looked at.
  scale = std::min({scale, 32767 / w, 32767 / h, std::sqrt(double(1 << 26) / (w * h))});
  const int pw = std::max(1, static_cast<int>(w * scale)), ph = std::max(1, static_cast<int>(h * scale));

  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      lib.cairo_image_surface_create(CAIRO_FORMAT_ARGB32, pw, ph), lib.cairo_surface_destroy);
  QKV_CHECK(lib.cairo_surface_status(surface.get()) == CAIRO_STATUS_SUCCESS, "svg_to_png: cannot create a ", pw, "×", ph,
            " picture: ", lib.cairo_status_to_string(lib.cairo_surface_status(surface.get())));
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr(lib.cairo_create(surface.get()), lib.cairo_destroy);
  lib.cairo_set_source_rgb(cr.get(), 1, 1, 1);  // white, as a browser shows the SVG
  lib.cairo_paint(cr.get());
  lib.cairo_scale(cr.get(), scale, scale);
  const RsvgRectangle viewport{0, 0, w, h};
  QKV_CHECK(lib.rsvg_handle_render_document(handle.get(), cr.get(), &viewport, &err),
            "svg_to_png: librsvg cannot draw the SVG: ", take_message(err));
  lib.cairo_surface_flush(surface.get());

  std::string png;
  const cairo_status_t st = lib.cairo_surface_write_to_png_stream(surface.get(), append_to_string, &png);
  QKV_CHECK(st == CAIRO_STATUS_SUCCESS, "svg_to_png: cannot encode the PNG: ", lib.cairo_status_to_string(st));
  return png;
}

void write_picture(const std::string& path, const std::string& svg) {
  std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  io::write_file_atomic(path, ext == ".png" ? svg_to_png(svg) : svg);
}

}  // namespace qkv::viz
