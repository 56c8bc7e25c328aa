#include "qkv/viz/svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "qkv/core/error.h"
#include "qkv/core/utf8.h"

namespace qkv::viz {

// ================================================================================================
// escaping and small helpers
// ================================================================================================

std::string xml_escape(std::string_view s) {
  static const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        case '\t': out += "&#9;"; break;
        case '\n': out += "&#10;"; break;
        case '\r': out += "&#13;"; break;
        default:
          if (c < 0x20 || c == 0x7F) out += kReplacement;
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A multi-byte UTF-8 sequence: validate it (no overlongs, no surrogates, ≤ U+10FFFF), and keep
    // out the two non-characters XML forbids.
    const utf8::CodePoint cp = utf8::decode_one(s, i);
    const size_t len = cp.length;
    const bool ok = cp.valid() && cp.value != 0xFFFE && cp.value != 0xFFFF;
    if (ok) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

namespace detail {

size_t utf8_length(std::string_view s) { return utf8::length(s); }

double nice_step(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  double m;
  if (r <= 1.0 + 1e-9) m = 1;
  else if (r <= 2.0 + 1e-9) m = 2;
  else if (r <= 5.0 + 1e-9) m = 5;
  else m = 10;
  return m * mag;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0.0, 1.0};
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo <= std::abs(hi) * 1e-12) {
    const double d = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
  target = std::max(1, target);
  // (hi − lo) / target, without overflowing where the data spans more than the largest double
  const double step = nice_step(hi / target - lo / target);
  const double k0 = std::floor(lo / step + 1e-9);
  const double k1 = std::ceil(hi / step - 1e-9);
  // A count, not a sum: past 2^53, k + 1 == k and a loop on k would never end (or, where the span
  // overflowed to a step of 1, run ~10^308 times). Past 1,000 ticks: the ends alone.
  if (!(k1 - k0 >= 0 && k1 - k0 <= 1000)) return {lo, hi};
  std::vector<double> ticks;
  for (int i = 0; i <= static_cast<int>(k1 - k0); ++i) {
    double v = (k0 + i) * step;
    if (std::abs(v) < step * 1e-9) v = 0.0;  // no "-0"
    ticks.push_back(v);
  }
  if (ticks.size() < 2) ticks.push_back(ticks.back() + step);
  return ticks;
}

double fraction(double v, double a, double b) { return (v / 2 - a / 2) / (b / 2 - a / 2); }

std::vector<double> log_ticks(double lo, double hi) {
  if (!(lo > 0) || !std::isfinite(lo) || !std::isfinite(hi)) return {1.0, 10.0};
  if (hi < lo) std::swap(lo, hi);
  if (hi / lo < 1.0001) {
    lo /= 2;
    hi *= 2;
  }
  const int e0 = static_cast<int>(std::floor(std::log10(lo))) - 1;
  const int e1 = static_cast<int>(std::ceil(std::log10(hi))) + 1;
  auto cover = [&](const std::vector<double>& cands) {
    // cands ascending; the smallest [a, b] ⊂ cands with a ≤ lo, b ≥ hi.
    size_t a = 0, b = cands.size() - 1;
    for (size_t i = 0; i < cands.size(); ++i)
      if (cands[i] <= lo * (1 + 1e-9)) a = i;
    for (size_t i = cands.size(); i-- > 0;)
      if (cands[i] >= hi * (1 - 1e-9)) b = i;
    return std::vector<double>(cands.begin() + static_cast<long>(a),
                               cands.begin() + static_cast<long>(b) + 1);
  };
  const std::vector<std::vector<double>> mantissas = {{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 5}};
  for (const auto& ms : mantissas) {
    std::vector<double> cands;
    for (int e = e0; e <= e1; ++e)
      for (double m : ms) cands.push_back(m * std::pow(10.0, e));
    auto t = cover(cands);
    if (t.size() <= 8) return t;
  }
  for (int stride = 1;; ++stride) {
    std::vector<double> cands;
    const int s0 = static_cast<int>(std::floor(static_cast<double>(e0) / stride)) * stride;
    for (int e = s0; e <= e1 + stride; e += stride) cands.push_back(std::pow(10.0, e));
    auto t = cover(cands);
    if (t.size() <= 8) return t;
  }
}

namespace {
std::string trim_zeros(std::string s) {
  if (s.find('.') == std::string::npos || s.find('e') != std::string::npos) return s;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}
std::string clean_exponent(std::string s) {  // "1e-05" → "1e-5", "2.5e+06" → "2.5e6"
  const auto e = s.find('e');
  if (e == std::string::npos) return s;
  std::string mant = s.substr(0, e), ex = s.substr(e + 1);
  if (mant.find('.') != std::string::npos) {
    while (mant.back() == '0') mant.pop_back();
    if (mant.back() == '.') mant.pop_back();
  }
  std::string sign;
  if (!ex.empty() && (ex[0] == '+' || ex[0] == '-')) {
    if (ex[0] == '-') sign = "-";
    ex = ex.substr(1);
  }
  while (ex.size() > 1 && ex[0] == '0') ex = ex.substr(1);
  return mant + "e" + sign + ex;
}
}  // namespace

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  char buf[64];
  const double a = std::abs(v);
  if (a >= 1e-4 && a < 1e6) {
    std::snprintf(buf, sizeof buf, "%.*f", std::max(0, 5 - static_cast<int>(std::floor(std::log10(a)))), v);
    return trim_zeros(buf);
  }
  std::snprintf(buf, sizeof buf, "%.5e", v);
  return clean_exponent(buf);
}

std::string format_tick(double v, double step) {
  if (!std::isfinite(v)) return format_number(v);
  step = std::abs(step);
  if (!(step > 0) || !std::isfinite(step)) return format_number(v);
  if (std::abs(v) < step * 1e-9) v = 0.0;  // no "-0.0" from rounding noise
  char buf[64];
  if (std::abs(v) >= 1e6 || step < 1e-6) {
    const int digits = std::clamp(static_cast<int>(std::floor(std::log10(std::abs(v))) -
                                                   std::floor(std::log10(step) + 1e-9)) + 1,
                                  1, 15);
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
    return clean_exponent(buf);
  }
  const int decimals = std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 12);
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// matplotlib "Blues" (ColorBrewer), light to dark.
static constexpr std::array<Rgb, 9> kBlues = {{{247, 251, 255},
                                                {222, 235, 247},
                                                {198, 219, 239},
                                                {158, 202, 225},
                                                {107, 174, 214},
                                                {66, 146, 198},
                                                {33, 113, 181},
                                                {8, 81, 156},
                                                {8, 48, 107}}};

Rgb sequential_color(double t) {
  if (!std::isfinite(t)) t = 0;
  t = std::clamp(t, 0.0, 1.0);
  const double pos = t * (kBlues.size() - 1);
  const size_t i = std::min(static_cast<size_t>(pos), kBlues.size() - 2);
  const double f = pos - static_cast<double>(i);
  auto mix = [&](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * f)); };
  return {mix(kBlues[i].r, kBlues[i + 1].r), mix(kBlues[i].g, kBlues[i + 1].g),
          mix(kBlues[i].b, kBlues[i + 1].b)};
}

std::string to_hex(Rgb c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", std::clamp(c.r, 0, 255), std::clamp(c.g, 0, 255),
                std::clamp(c.b, 0, 255));
  return buf;
}

}  // namespace detail

// ================================================================================================
// document building
// ================================================================================================

namespace {

using detail::format_number;
using detail::utf8_length;

constexpr const char* kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";
constexpr double kCharWidth = 0.6;  // average glyph width / font size (a slight over-estimate)

// Coordinates with at most 2 decimals.
std::string px(double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}

double text_width(std::string_view s, double font_size) {
  return static_cast<double>(utf8_length(s)) * font_size * kCharWidth;
}

std::string svg_open(double w, double h) {
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << px(w) << "\" height=\"" << px(h)
    << "\" viewBox=\"0 0 " << px(w) << ' ' << px(h) << "\" font-family=\"" << kFont << "\">\n"
    << "<rect x=\"0\" y=\"0\" width=\"" << px(w) << "\" height=\"" << px(h) << "\" fill=\"#ffffff\"/>\n";
  return o.str();
}

// <text> with escaped content; `extra` is raw attribute text (already safe).
void text(std::ostringstream& o, double x, double y, std::string_view content, double size,
          const char* anchor = "start", const std::string& extra = "") {
  o << "<text x=\"" << px(x) << "\" y=\"" << px(y) << "\" font-size=\"" << px(size) << "\"";
  if (std::string_view(anchor) != "start") o << " text-anchor=\"" << anchor << "\"";
  if (!extra.empty()) o << ' ' << extra;
  o << '>' << xml_escape(content) << "</text>\n";
}

// Okabe–Ito, ordered for contrast on white (yellow last).
constexpr std::array<const char*, 8> kPalette = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                 "#E69F00", "#56B4E9", "#000000", "#F0E442"};
constexpr std::array<const char*, 3> kDashes = {"", "6 3", "2 3"};

}  // namespace

// ================================================================================================
// line plot
// ================================================================================================

std::string line_plot_svg(const std::vector<Series>& series, const LinePlotOptions& opt) {
  for (const auto& s : series)
    QKV_CHECK(s.x.empty() || s.x.size() == s.y.size(), "line_plot_svg: series '", s.name, "' has ",
              s.x.size(), " x values and ", s.y.size(), " y values");
  const double W = std::max(opt.width, 240), H = std::max(opt.height, 160);
  auto x_of = [](const Series& s, size_t i) { return s.x.empty() ? static_cast<double>(i) : s.x[i]; };
  auto usable = [&](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!opt.log_y || y > 0);
  };

  // Data ranges.
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  std::vector<bool> has_data(series.size(), false);
  for (size_t k = 0; k < series.size(); ++k)
    for (size_t i = 0; i < series[k].y.size(); ++i) {
      const double x = x_of(series[k], i), y = series[k].y[i];
      if (!usable(x, y)) continue;
      has_data[k] = true;
      xmin = std::min(xmin, x), xmax = std::max(xmax, x);
      ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  const bool any = std::find(has_data.begin(), has_data.end(), true) != has_data.end();
  const bool legend = series.size() > 1;

  // Fonts and margins.
  const double fs_title = 15, fs_label = 12, fs_tick = 11, fs_legend = 12, pad = 10;
  const double top = pad + (opt.title.empty() ? 6 : fs_title + 14);
  double legend_w = 0;
  std::vector<std::string> legend_names;
  if (legend) {
    for (size_t k = 0; k < series.size(); ++k) {
      std::string name = series[k].name.empty() ? "series " + std::to_string(k + 1) : series[k].name;
      if (!has_data[k]) name += " (no data)";
      legend_w = std::max(legend_w, 30 + text_width(name, fs_legend));
      legend_names.push_back(std::move(name));
    }
    legend_w = std::min(legend_w, W * 0.4);
  }
  const double right = pad + (legend ? legend_w + 18 : 12);
  const double bottom = pad + fs_tick + 10 + (opt.x_label.empty() ? 0 : fs_label + 8);

  // Y ticks (they fix the left margin).
  std::vector<double> yt;
  double ystep = 1;
  if (any) {
    if (opt.log_y) {
      yt = detail::log_ticks(ymin, ymax);
    } else {
      const double plot_h = H - top - bottom;
      const int target = std::clamp(static_cast<int>(plot_h / 55), 2, 8);
      yt = detail::nice_ticks(ymin, ymax, target);
      ystep = yt[1] - yt[0];
    }
  }
  std::vector<std::string> ylabels;
  double ytick_w = 0;
  for (double v : yt) {
    ylabels.push_back(opt.log_y ? format_number(v) : detail::format_tick(v, ystep));
    ytick_w = std::max(ytick_w, text_width(ylabels.back(), fs_tick));
  }
  const double left = pad + (opt.y_label.empty() ? 0 : fs_label + 10) + std::max(ytick_w, 12.0) + 8;
  const double x0 = left, x1 = W - right, y0 = top, y1 = H - bottom;
  const double pw = x1 - x0, ph = y1 - y0;

  std::ostringstream o;
  o << svg_open(W, H);
  if (!opt.title.empty()) text(o, W / 2, pad + fs_title, opt.title, fs_title, "middle", "font-weight=\"bold\"");
  if (!opt.x_label.empty()) text(o, x0 + pw / 2, H - pad - 2, opt.x_label, fs_label, "middle");
  if (!opt.y_label.empty()) {
    const double lx = pad + fs_label, ly = y0 + ph / 2;
    text(o, lx, ly, opt.y_label, fs_label, "middle",
         "transform=\"rotate(-90 " + px(lx) + ' ' + px(ly) + ")\"");
  }

  if (!any) {
    o << "<rect x=\"" << px(x0) << "\" y=\"" << px(y0) << "\" width=\"" << px(pw) << "\" height=\""
      << px(ph) << "\" fill=\"none\" stroke=\"#999999\"/>\n";
    text(o, x0 + pw / 2, y0 + ph / 2 + 5, "no data", 14, "middle", "fill=\"#777777\"");
  } else {
    // X range: the data itself (widened if degenerate), ticks inside it.
    double xa = xmin, xb = xmax;
    if (xb - xa <= std::abs(xb) * 1e-12) {
      const double d = xa == 0 ? 1.0 : std::abs(xa) * 0.05;
      xa -= d, xb += d;
    }
    std::vector<double> xt;
    double xstep = 1;
    std::vector<std::string> xlabels;
    for (int target = std::clamp(static_cast<int>(pw / 70), 2, 10); target >= 1; --target) {
      auto all = detail::nice_ticks(xa, xb, target);
      xstep = all[1] - all[0];
      xt.clear(), xlabels.clear();
      double maxw = 0;
      for (double v : all)
        if (v >= xa - xstep * 1e-6 && v <= xb + xstep * 1e-6) {
          xt.push_back(v);
          xlabels.push_back(detail::format_tick(v, xstep));
          maxw = std::max(maxw, text_width(xlabels.back(), fs_tick));
        }
      if (xt.size() < 2 || pw * detail::fraction(xa + xstep, xa, xb) >= maxw + 14) break;
    }
    const double ya = opt.log_y ? std::log10(yt.front()) : yt.front();
    const double yb = opt.log_y ? std::log10(yt.back()) : yt.back();
    auto X = [&](double x) { return x0 + detail::fraction(x, xa, xb) * pw; };
    auto Y = [&](double y) {
      const double t = opt.log_y ? std::log10(y) : y;
      return y1 - detail::fraction(t, ya, yb) * ph;
    };

    // Grid, ticks, labels.
    o << "<g stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
    for (double v : xt) o << "<line x1=\"" << px(X(v)) << "\" y1=\"" << px(y0) << "\" x2=\"" << px(X(v)) << "\" y2=\"" << px(y1) << "\"/>\n";
    for (double v : yt) o << "<line x1=\"" << px(x0) << "\" y1=\"" << px(Y(v)) << "\" x2=\"" << px(x1) << "\" y2=\"" << px(Y(v)) << "\"/>\n";
    o << "</g>\n<g stroke=\"#333333\" stroke-width=\"1\">\n";
    for (double v : xt) o << "<line x1=\"" << px(X(v)) << "\" y1=\"" << px(y1) << "\" x2=\"" << px(X(v)) << "\" y2=\"" << px(y1 + 4) << "\"/>\n";
    for (double v : yt) o << "<line x1=\"" << px(x0 - 4) << "\" y1=\"" << px(Y(v)) << "\" x2=\"" << px(x0) << "\" y2=\"" << px(Y(v)) << "\"/>\n";
    o << "</g>\n<g fill=\"#333333\">\n";
    for (size_t i = 0; i < xt.size(); ++i) text(o, X(xt[i]), y1 + 6 + fs_tick, xlabels[i], fs_tick, "middle");
    for (size_t i = 0; i < yt.size(); ++i) text(o, x0 - 7, Y(yt[i]) + fs_tick * 0.35, ylabels[i], fs_tick, "end");
    o << "</g>\n";

    // Series, clipped to the plot area.
    o << "<defs><clipPath id=\"qkv-plot-area\"><rect x=\"" << px(x0 - 2) << "\" y=\"" << px(y0 - 2)
      << "\" width=\"" << px(pw + 4) << "\" height=\"" << px(ph + 4) << "\"/></clipPath></defs>\n";
    o << "<g clip-path=\"url(#qkv-plot-area)\" fill=\"none\" stroke-width=\"1.8\" "
         "stroke-linejoin=\"round\" stroke-linecap=\"round\">\n";
    for (size_t k = 0; k < series.size(); ++k) {
      const auto& s = series[k];
      const char* color = kPalette[k % kPalette.size()];
      const char* dash = kDashes[(k / kPalette.size()) % kDashes.size()];
      std::string d, seg;  // d: the finished runs; seg: the current one
      std::vector<std::pair<double, double>> dots;  // isolated points
      size_t run = 0;
      double last_x = 0, last_y = 0;
      auto end_run = [&] {
        if (run == 1 && !opt.markers) dots.emplace_back(last_x, last_y);
        if (run >= 2) {
          if (!d.empty()) d += ' ';
          d += seg;
        }
        run = 0;
        seg.clear();
      };
      for (size_t i = 0; i < s.y.size(); ++i) {
        const double x = x_of(s, i), y = s.y[i];
        if (!usable(x, y)) {
          end_run();
          continue;
        }
        last_x = X(x), last_y = Y(y);
        if (opt.markers) dots.emplace_back(last_x, last_y);
        seg += run == 0 ? "M" : " L";
        seg += px(last_x);
        seg += ' ';
        seg += px(last_y);
        ++run;
      }
      end_run();
      o << "<g stroke=\"" << color << "\"";
      if (*dash) o << " stroke-dasharray=\"" << dash << "\"";
      o << "><title>" << xml_escape(s.name) << "</title>\n";
      if (!d.empty()) o << "<path d=\"" << d << "\"/>\n";
      for (auto [cx, cy] : dots)
        o << "<circle cx=\"" << px(cx) << "\" cy=\"" << px(cy) << "\" r=\"" << (opt.markers ? "3.5" : "2.2")
          << "\" fill=\"" << color << "\"/>\n";
      o << "</g>\n";
    }
    o << "</g>\n";
    o << "<rect x=\"" << px(x0) << "\" y=\"" << px(y0) << "\" width=\"" << px(pw) << "\" height=\""
      << px(ph) << "\" fill=\"none\" stroke=\"#333333\" stroke-width=\"1\"/>\n";
  }

  // Legend, right of the plot.
  if (legend) {
    const double lx = x1 + 16;
    double ly = y0 + 10;
    o << "<g font-size=\"" << px(fs_legend) << "\">\n";
    for (size_t k = 0; k < series.size(); ++k, ly += fs_legend + 8) {
      const char* color = kPalette[k % kPalette.size()];
      const char* dash = kDashes[(k / kPalette.size()) % kDashes.size()];
      o << "<line x1=\"" << px(lx) << "\" y1=\"" << px(ly) << "\" x2=\"" << px(lx + 22) << "\" y2=\""
        << px(ly) << "\" stroke=\"" << color << "\" stroke-width=\"2.5\"";
      if (*dash) o << " stroke-dasharray=\"" << dash << "\"";
      o << "/>\n";
      text(o, lx + 28, ly + fs_legend * 0.35, legend_names[k], fs_legend, "start",
           has_data[k] ? "fill=\"#222222\"" : "fill=\"#888888\"");
    }
    o << "</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

// ================================================================================================
// heat maps
// ================================================================================================

namespace {

// A value inside a cell: fixed decimals, so that every cell's text has about the same width.
std::string value_str(double v, int decimals) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  if (std::abs(v) >= 1e4) std::snprintf(buf, sizeof buf, "%.1e", v);
  else if (std::abs(v) >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string out = buf;
  if (out.find_first_not_of("-0.") == std::string::npos && out[0] == '-') out = out.substr(1);  // "-0.00"
  return out;
}

// A value in a tooltip: 3 decimals, or 3 significant digits when that would hide it.
std::string tooltip_value(double v) {
  if (std::isfinite(v) && v != 0 && std::abs(v) < 1e-3) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
  }
  if (std::isfinite(v) && std::abs(v) >= 1e4) return format_number(v);
  return value_str(v, 3);
}

std::string label_or_index(const std::vector<std::string>& labels, int i) {
  return labels.empty() ? std::to_string(i) : labels[static_cast<size_t>(i)];
}

}  // namespace

std::string heatmap_grid_svg(const std::vector<Panel>& panels, int grid_cols,
                             const std::vector<std::string>& row_labels,
                             const std::vector<std::string>& col_labels, const HeatmapOptions& opt) {
  QKV_CHECK(grid_cols >= 1, "heatmap_grid_svg: grid_cols must be >= 1, got ", grid_cols);
  QKV_CHECK(opt.cell >= 4, "heatmap: cell must be >= 4 px, got ", opt.cell);
  int max_rows = 0, max_cols = 0;
  double lo = 0, hi = -std::numeric_limits<double>::infinity();
  bool any = false;
  for (const auto& p : panels) {
    QKV_CHECK(p.rows >= 0 && p.cols >= 0, "heatmap: negative size ", p.rows, "x", p.cols);
    QKV_CHECK(p.values.size() == static_cast<size_t>(p.rows) * static_cast<size_t>(p.cols), "heatmap: ",
              p.rows, "x", p.cols, " matrix needs ", static_cast<size_t>(p.rows) * p.cols, " values, got ",
              p.values.size());
    QKV_CHECK(row_labels.empty() || row_labels.size() == static_cast<size_t>(p.rows), "heatmap: ",
              row_labels.size(), " row labels for ", p.rows, " rows");
    QKV_CHECK(col_labels.empty() || col_labels.size() == static_cast<size_t>(p.cols), "heatmap: ",
              col_labels.size(), " column labels for ", p.cols, " columns");
    max_rows = std::max(max_rows, p.rows);
    max_cols = std::max(max_cols, p.cols);
    for (float v : p.values)
      if (std::isfinite(v)) {
        any = true;
        lo = std::min(lo, static_cast<double>(v));
        hi = std::max(hi, static_cast<double>(v));
      }
  }
  if (!any) hi = 1;
  if (hi <= lo) hi = lo + 1;  // constant (e.g. all-zero) matrix

  const double c = opt.cell, pad = 12;
  const double fs_title = 15, fs_axis = 12, fs_caption = 11, fs_bar = 10;
  const double fs = std::clamp(std::round(c * 0.45), 8.0, 13.0);  // row / column labels
  const int n_panels = static_cast<int>(panels.size());
  const int gc = std::max(1, std::min(grid_cols, std::max(n_panels, 1)));
  const int gr = std::max(1, (n_panels + gc - 1) / gc);

  // Labels.
  std::vector<std::string> rl, cl;
  for (int i = 0; i < max_rows; ++i) rl.push_back(row_labels.empty() ? std::to_string(i) : row_labels[static_cast<size_t>(i)]);
  for (int j = 0; j < max_cols; ++j) cl.push_back(col_labels.empty() ? std::to_string(j) : col_labels[static_cast<size_t>(j)]);
  double row_w = 0, col_w = 0;
  for (const auto& s : rl) row_w = std::max(row_w, text_width(s, fs));
  for (const auto& s : cl) col_w = std::max(col_w, text_width(s, fs));
  const bool rotate = col_w > c - 3;
  constexpr double kSin45 = 0.70710678;
  const double col_h = rotate ? col_w * kSin45 + fs * 0.8 + 4 : fs + 4;

  const bool has_caption =
      std::any_of(panels.begin(), panels.end(), [](const Panel& p) { return !p.caption.empty(); });
  const double slot_w = max_cols * c, slot_h = max_rows * c;
  const double gap_x = 18, caption_h = has_caption ? fs_caption + 10 : 0, gap_y = gr > 1 ? 14 : 0;

  const double title_h = opt.title.empty() ? 0 : fs_title + 10;
  const double xlabel_h = opt.x_label.empty() ? 0 : fs_axis + 8;
  const double left = pad + (opt.y_label.empty() ? 0 : fs_axis + 10) + row_w + 7;
  const double top = pad + title_h + xlabel_h + col_h + 4;
  const double grid_w = gc * slot_w + (gc - 1) * gap_x;
  const double grid_h = gr * (slot_h + caption_h) + (gr - 1) * gap_y;
  auto panel_x = [&](int k) { return left + (k % gc) * (slot_w + gap_x); };
  auto panel_y = [&](int k) { return top + (k / gc) * (slot_h + caption_h + gap_y); };

  // How far right the rotated column labels of the first panel row reach.
  double label_right = left + grid_w;
  if (rotate)
    for (int k = 0; k < std::min(gc, n_panels); ++k)
      for (int j = 0; j < panels[static_cast<size_t>(k)].cols; ++j)
        label_right = std::max(label_right, panel_x(k) + (j + 0.5) * c + text_width(cl[static_cast<size_t>(j)], fs) * kSin45 + fs);

  // Colour bar.
  const double bar_x = left + grid_w + 22, bar_w = 14;
  const double bar_h = std::clamp(std::min(slot_h * gr, grid_h), 110.0, 300.0);
  const double bar_y = top;
  std::vector<double> bt;
  {
    auto all = detail::nice_ticks(lo, hi, bar_h >= 200 ? 5 : 4);
    const double st = all[1] - all[0];
    for (double v : all)
      if (v >= lo - st * 1e-6 && v <= hi + st * 1e-6) bt.push_back(v);
  }
  const double bt_step = bt.size() >= 2 ? bt[1] - bt[0] : hi - lo;
  double bar_label_w = 0;
  for (double v : bt) bar_label_w = std::max(bar_label_w, text_width(detail::format_tick(v, bt_step), fs_bar));

  const double W = std::max({bar_x + bar_w + 6 + bar_label_w + pad, label_right + pad,
                             text_width(opt.title, fs_title) + 2 * pad});
  const double H = std::max(top + grid_h, bar_y + bar_h + fs_bar) + pad;
  auto Y = [&](double v) { return bar_y + bar_h * (1 - detail::fraction(v, lo, hi)); };

  std::ostringstream o;
  o << svg_open(W, H);
  if (!opt.title.empty()) text(o, W / 2, pad + fs_title, opt.title, fs_title, "middle", "font-weight=\"bold\"");
  if (!opt.x_label.empty()) text(o, left + grid_w / 2, pad + title_h + fs_axis, opt.x_label, fs_axis, "middle", "fill=\"#333333\"");
  if (!opt.y_label.empty()) {
    const double lx = pad + fs_axis, ly = top + std::min(grid_h, slot_h * gr) / 2;
    text(o, lx, ly, opt.y_label, fs_axis, "middle",
         "fill=\"#333333\" transform=\"rotate(-90 " + px(lx) + ' ' + px(ly) + ")\"");
  }
  if (panels.empty()) text(o, left + 40, top + 20, "no data", 14, "middle", "fill=\"#777777\"");

  const int decimals = (hi - lo) <= 10 ? 2 : 1;
  const double fs_val = std::clamp(c * 0.32, 6.0, 12.0);
  for (int k = 0; k < n_panels; ++k) {
    const Panel& p = panels[static_cast<size_t>(k)];
    const double gx = panel_x(k), gy = panel_y(k);
    // Row labels left of the first panel column, column labels above the first panel row.
    o << "<g font-size=\"" << px(fs) << "\" fill=\"#222222\">\n";
    if (k % gc == 0)
      for (int i = 0; i < p.rows; ++i)
        text(o, gx - 6, gy + (i + 0.5) * c + fs * 0.35, rl[static_cast<size_t>(i)], fs, "end");
    if (k / gc == 0)
      for (int j = 0; j < p.cols; ++j) {
        const double ax = gx + (j + 0.5) * c;
        if (rotate) {
          const double ay = gy - 5;
          text(o, ax, ay, cl[static_cast<size_t>(j)], fs, "start",
               "transform=\"rotate(-45 " + px(ax) + ' ' + px(ay) + ")\"");
        } else {
          text(o, ax, gy - 5, cl[static_cast<size_t>(j)], fs, "middle");
        }
      }
    o << "</g>\n";
    // Cells.
    o << "<g shape-rendering=\"crispEdges\">\n";
    for (int i = 0; i < p.rows; ++i)
      for (int j = 0; j < p.cols; ++j) {
        const double v = p.values[static_cast<size_t>(i) * p.cols + j];
        const std::string fill = std::isfinite(v) ? detail::to_hex(detail::sequential_color((v - lo) / (hi - lo))) : "#d0d0d0";
        o << "<rect x=\"" << px(gx + j * c) << "\" y=\"" << px(gy + i * c) << "\" width=\"" << px(c)
          << "\" height=\"" << px(c) << "\" fill=\"" << fill << "\"><title>"
          << xml_escape(label_or_index(row_labels, i)) << " \xE2\x86\x92 " << xml_escape(label_or_index(col_labels, j))
          << ": " << tooltip_value(v) << "</title></rect>\n";
      }
    o << "</g>\n";
    if (opt.show_values) {
      o << "<g font-size=\"" << px(fs_val) << "\" text-anchor=\"middle\" pointer-events=\"none\">\n";
      for (int i = 0; i < p.rows; ++i)
        for (int j = 0; j < p.cols; ++j) {
          const double v = p.values[static_cast<size_t>(i) * p.cols + j];
          const double t = (v - lo) / (hi - lo);
          o << "<text x=\"" << px(gx + (j + 0.5) * c) << "\" y=\"" << px(gy + (i + 0.5) * c + fs_val * 0.35)
            << "\" fill=\"" << (std::isfinite(v) && t > 0.55 ? "#ffffff" : "#1a1a1a") << "\">"
            << value_str(v, decimals) << "</text>\n";
        }
      o << "</g>\n";
    }
    o << "<rect x=\"" << px(gx) << "\" y=\"" << px(gy) << "\" width=\"" << px(p.cols * c) << "\" height=\""
      << px(p.rows * c) << "\" fill=\"none\" stroke=\"#9a9a9a\" stroke-width=\"0.8\"/>\n";
    if (!p.caption.empty())
      text(o, gx + p.cols * c / 2, gy + p.rows * c + fs_caption + 5, p.caption, fs_caption, "middle",
           "fill=\"#333333\"");
  }

  // Colour bar: a vertical gradient through the same stops as the cells.
  o << "<defs><linearGradient id=\"qkv-colorbar\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n";
  for (int s = 0; s <= 16; ++s)
    o << "<stop offset=\"" << px(s / 16.0) << "\" stop-color=\"" << detail::to_hex(detail::sequential_color(s / 16.0))
      << "\"/>\n";
  o << "</linearGradient></defs>\n";
  o << "<rect x=\"" << px(bar_x) << "\" y=\"" << px(bar_y) << "\" width=\"" << px(bar_w) << "\" height=\""
    << px(bar_h) << "\" fill=\"url(#qkv-colorbar)\" stroke=\"#9a9a9a\" stroke-width=\"0.8\"/>\n";
  o << "<g fill=\"#333333\">\n";
  for (double v : bt) {
    const double y = Y(v);
    o << "<line x1=\"" << px(bar_x + bar_w) << "\" y1=\"" << px(y) << "\" x2=\"" << px(bar_x + bar_w + 4)
      << "\" y2=\"" << px(y) << "\" stroke=\"#333333\" stroke-width=\"1\"/>\n";
    text(o, bar_x + bar_w + 6, y + fs_bar * 0.35, detail::format_tick(v, bt_step), fs_bar);
  }
  o << "</g>\n</svg>\n";
  return o.str();
}

std::string heatmap_svg(const std::vector<float>& values, int rows, int cols,
                        const std::vector<std::string>& row_labels,
                        const std::vector<std::string>& col_labels, const HeatmapOptions& opt) {
  return heatmap_grid_svg({Panel{"", values, rows, cols}}, 1, row_labels, col_labels, opt);
}

}  // namespace qkv::viz
