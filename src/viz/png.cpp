#include "qkv/viz/png.h"

#include <cairo.h>
#include <librsvg/rsvg.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/io/file.h"

namespace qkv::viz {

namespace {

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

std::string take_message(GError* err) {
  std::string m = err && err->message ? err->message : "unknown error";
  if (err) g_error_free(err);
  return m;
}

}  // namespace

std::string svg_to_png(const std::string& svg, double scale) {
  QKV_CHECK(scale > 0 && scale <= 16, "svg_to_png: scale must be in (0, 16], got ", scale);
  GError* err = nullptr;
  std::unique_ptr<RsvgHandle, decltype(&g_object_unref)> handle(
      rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()), svg.size(), &err), g_object_unref);
  QKV_CHECK(handle, "svg_to_png: librsvg cannot read the SVG: ", take_message(err));
  gdouble w = 0, h = 0;
  QKV_CHECK(rsvg_handle_get_intrinsic_size_in_pixels(handle.get(), &w, &h) && w > 0 && h > 0,
            "svg_to_png: the SVG has no size in pixels (width/height attributes)");
  const int pw = static_cast<int>(std::ceil(w * scale)), ph = static_cast<int>(std::ceil(h * scale));
  QKV_CHECK(static_cast<double>(pw) * ph <= 400e6, "svg_to_png: ", pw, "×", ph, " pixels is too large a picture");

  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, pw, ph), cairo_surface_destroy);
  QKV_CHECK(cairo_surface_status(surface.get()) == CAIRO_STATUS_SUCCESS, "svg_to_png: cannot create a ", pw, "×", ph,
            " picture: ", cairo_status_to_string(cairo_surface_status(surface.get())));
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr(cairo_create(surface.get()), cairo_destroy);
  cairo_set_source_rgb(cr.get(), 1, 1, 1);  // white, as a browser shows the SVG
  cairo_paint(cr.get());
  cairo_scale(cr.get(), scale, scale);
  const RsvgRectangle viewport{0, 0, w, h};
  QKV_CHECK(rsvg_handle_render_document(handle.get(), cr.get(), &viewport, &err),
            "svg_to_png: librsvg cannot draw the SVG: ", take_message(err));
  cairo_surface_flush(surface.get());

  std::string png;
  const cairo_status_t st = cairo_surface_write_to_png_stream(surface.get(), append_to_string, &png);
  QKV_CHECK(st == CAIRO_STATUS_SUCCESS, "svg_to_png: cannot encode the PNG: ", cairo_status_to_string(st));
  return png;
}

void write_picture(const std::string& path, const std::string& svg) {
  std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  io::write_file_atomic(path, ext == ".png" ? svg_to_png(svg) : svg);
}

}  // namespace qkv::viz
