#include "qkv/viz/image_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "qkv/core/error.h"
#include "qkv/io/base64.h"
#include "qkv/viz/png.h"
#include "qkv/viz/svg.h"

namespace qkv::viz {

std::string image_attention_svg(const std::vector<ImageAttentionPanel>& panels, int grid_cols,
                                const ImageAttentionOptions& opt) {
  QKV_CHECK(!panels.empty() && grid_cols > 0, "image_attention_svg: no panels");
  for (const auto& p : panels)
    QKV_CHECK(p.height > 0 && p.width > 0 && p.rows >= 0 && p.cols >= 0 &&
                  (p.image.size() == static_cast<size_t>(p.height) * p.width || !p.png.empty()) &&
                  p.weights.size() == static_cast<size_t>(p.rows) * p.cols,
              "image_attention_svg: panel \"", p.caption, "\" has ", p.image.size(), " pixels for ", p.height, "×",
              p.width, " and ", p.weights.size(), " weights for ", p.rows, "×", p.cols);
  const int px = std::max(1, opt.pixel), pad = 12, line_h = 15, title_h = opt.title.empty() ? 0 : 28;
  int pw = 0, ph = 0;
  for (const auto& p : panels) pw = std::max(pw, p.width * px), ph = std::max(ph, p.height * px);
  // captions wrapped at word boundaries to the panel's width (≈ 6.5 px per character at 12 px)
  const size_t line_chars = static_cast<size_t>(std::max(8, (pw + pad) * 2 / 13));
  std::vector<std::vector<std::string>> captions;
  size_t most_lines = 1;
  for (const auto& p : panels) {
    std::vector<std::string> lines(1);
    std::istringstream words(p.caption);
    for (std::string w; words >> w;) {
      if (!lines.back().empty() && lines.back().size() + 1 + w.size() > line_chars) lines.emplace_back();
      lines.back() += (lines.back().empty() ? "" : " ") + w;
    }
    most_lines = std::max(most_lines, lines.size());
    captions.push_back(std::move(lines));
  }
  const int caption_h = 4 + line_h * static_cast<int>(most_lines);
  const int n = static_cast<int>(panels.size()), cols = std::min(grid_cols, n), rows = (n + cols - 1) / cols;
  const int W = pad + cols * (pw + pad), H = title_h + pad + rows * (ph + caption_h + pad);
  std::ostringstream s;
  char buf[160];
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H << "\" font-family=\"sans-serif\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!opt.title.empty())
    s << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(opt.title)
      << "</text>\n";
  for (int i = 0; i < n; ++i) {
    const ImageAttentionPanel& p = panels[static_cast<size_t>(i)];
    const int x0 = pad + (i % cols) * (pw + pad), y0 = title_h + pad + (i / cols) * (ph + caption_h + pad);
    s << "<g transform=\"translate(" << x0 << "," << y0 << ")\">\n";
    // the picture: its PNG, or its grey levels made one (an <image>, not a <rect> per pixel: librsvg
    // refuses documents of more than 1,000,000 elements)
    s << "<image x=\"0\" y=\"0\" width=\"" << p.width * px << "\" height=\"" << p.height * px
      << "\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" xlink:href=\"data:image/png;base64,"
      << io::base64_encode(p.png.empty() ? grey_png(p.image, p.height, p.width) : p.png) << "\"/>";
    s << "\n";
    // the weights over it: cell (r, c) covers its share of the picture
    const float top = p.weights.empty() ? 0.f : *std::max_element(p.weights.begin(), p.weights.end());
    const double cw = static_cast<double>(p.width * px) / std::max(1, p.cols),
                 ch = static_cast<double>(p.height * px) / std::max(1, p.rows);
    for (int r = 0; r < p.rows; ++r)
      for (int c = 0; c < p.cols; ++c) {
        const float w = p.weights[static_cast<size_t>(r) * p.cols + c];
        const double a = top > 0 ? 0.85 * w / top : 0.0;
        if (a < 0.02) continue;
        std::snprintf(buf, sizeof buf,
                      "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#e41a1c\" fill-opacity=\"%.3f\">"
                      "<title>%.4f</title></rect>",
                      c * cw, r * ch, cw, ch, a, w);
        s << buf;
      }
    for (const auto& b : p.boxes) {
      std::snprintf(buf, sizeof buf,
                    "\n<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#4daf4a\" "
                    "stroke-width=\"2\"/>",
                    b.x0 * px, b.y0 * px, (b.x1 - b.x0) * px, (b.y1 - b.y0) * px);
      s << buf;
    }
    if (p.show_query) {
      std::snprintf(buf, sizeof buf,
                    "\n<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" fill=\"none\" stroke=\"#00e5ff\" stroke-width=\"2.5\"/>",
                    (p.query_x + 0.5) * px, (p.query_y + 0.5) * px, std::max(4.0, 1.2 * px));
      s << buf;
    }
    s << "<rect width=\"" << p.width * px << "\" height=\"" << p.height * px
      << "\" fill=\"none\" stroke=\"#444\" stroke-width=\"1\"/>\n";
    const auto& lines = captions[static_cast<size_t>(i)];
    for (size_t l = 0; l < lines.size(); ++l)
      s << "<text x=\"" << p.width * px / 2 << "\" y=\"" << ph + 14 + line_h * static_cast<int>(l)
        << "\" text-anchor=\"middle\" font-size=\"12\">" << xml_escape(lines[l]) << "</text>\n";
    s << "</g>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace qkv::viz
