#include "qkv/viz/svg.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/viz/image_attention.h"
#include "qkv/viz/png.h"

namespace qkv::viz {
namespace {

// ---- a tiny XML checker: a DOM for the subset of XML that SVG documents use --------------------

struct Node {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<std::unique_ptr<Node>> children;
  std::string text;  // decoded character data directly inside this element
};

const std::set<std::string> kKnownTags = {"svg",  "g",    "rect", "line",     "path",           "circle",
                                          "text", "title", "defs", "clipPath", "linearGradient", "stop",
                                          "image"};

class XmlParser {
 public:
  explicit XmlParser(const std::string& s) : s_(s) {}

  // The root element, or nullptr with error() set.
  std::unique_ptr<Node> parse() {
    if (s_.compare(0, 5, "<?xml") == 0) {
      const auto e = s_.find("?>");
      if (e == std::string::npos) return fail("unterminated XML declaration");
      i_ = e + 2;
    }
    skip_ws();
    auto root = element();
    if (!root) return nullptr;
    skip_ws();
    if (i_ != s_.size()) return fail("content after the root element");
    return root;
  }
  const std::string& error() const { return err_; }

 private:
  std::unique_ptr<Node> fail(const std::string& m) {
    if (err_.empty()) err_ = m + " at offset " + std::to_string(i_);
    return nullptr;
  }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  std::string name() {
    const size_t b = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
                              s_[i_] == '_' || s_[i_] == ':'))
      ++i_;
    return s_.substr(b, i_ - b);
  }
  // Decodes an entity at s_[i_] == '&'; false if it is not a valid one.
  bool entity(std::string& out) {
    const auto e = s_.find(';', i_);
    if (e == std::string::npos || e - i_ > 10) return false;
    const std::string ent = s_.substr(i_ + 1, e - i_ - 1);
    static const std::map<std::string, std::string> named = {
        {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}};
    if (auto it = named.find(ent); it != named.end()) {
      out += it->second;
    } else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x';
      const std::string digits = ent.substr(hex ? 2 : 1);
      if (digits.empty()) return false;
      for (char c : digits)
        if (!(hex ? std::isxdigit(static_cast<unsigned char>(c)) : std::isdigit(static_cast<unsigned char>(c))))
          return false;
      const long cp = std::stol(digits, nullptr, hex ? 16 : 10);
      if (cp < 0x80) out += static_cast<char>(cp);
      else out += "?";  // not needed by these tests
    } else {
      return false;
    }
    i_ = e + 1;
    return true;
  }
  std::unique_ptr<Node> element() {
    if (i_ >= s_.size() || s_[i_] != '<') return fail("expected '<'");
    ++i_;
    auto node = std::make_unique<Node>();
    node->name = name();
    if (!kKnownTags.count(node->name)) return fail("unknown tag '" + node->name + "'");
    for (;;) {
      skip_ws();
      if (i_ >= s_.size()) return fail("unterminated tag");
      if (s_[i_] == '/') {
        if (s_.compare(i_, 2, "/>") != 0) return fail("bad '/'");
        i_ += 2;
        return node;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      const std::string key = name();
      if (key.empty()) return fail("bad attribute name");
      if (node->attrs.count(key)) return fail("duplicate attribute " + key);
      if (s_.compare(i_, 2, "=\"") != 0) return fail("attribute " + key + " without =\"");
      i_ += 2;
      std::string value;
      while (i_ < s_.size() && s_[i_] != '"') {
        if (s_[i_] == '<') return fail("raw '<' in attribute " + key);
        if (s_[i_] == '&') {
          if (!entity(value)) return fail("bad entity in attribute " + key);
        } else {
          value += s_[i_++];
        }
      }
      if (i_ >= s_.size()) return fail("unterminated attribute " + key);
      ++i_;
      node->attrs[key] = value;
    }
    // content
    for (;;) {
      if (i_ >= s_.size()) return fail("unclosed <" + node->name + ">");
      if (s_[i_] == '<') {
        if (s_.compare(i_, 2, "</") == 0) {
          i_ += 2;
          const std::string end = name();
          if (end != node->name) return fail("</" + end + "> closes <" + node->name + ">");
          skip_ws();
          if (i_ >= s_.size() || s_[i_] != '>') return fail("bad end tag");
          ++i_;
          return node;
        }
        auto child = element();
        if (!child) return nullptr;
        node->children.push_back(std::move(child));
      } else if (s_[i_] == '&') {
        if (!entity(node->text)) return fail("bad entity in text");
      } else if (s_[i_] == '>') {
        return fail("raw '>' in text");
      } else {
        node->text += s_[i_++];
      }
    }
  }

  const std::string& s_;
  size_t i_ = 0;
  std::string err_;
};

std::unique_ptr<Node> parse_ok(const std::string& svg) {
  XmlParser p(svg);
  auto root = p.parse();
  EXPECT_TRUE(root != nullptr) << p.error() << "\n" << svg.substr(0, 2000);
  if (root) {
    EXPECT_EQ(root->name, "svg");
  }
  return root;
}

void collect(const Node& n, const std::string& name, std::vector<const Node*>& out) {
  if (n.name == name) out.push_back(&n);
  for (const auto& c : n.children) collect(*c, name, out);
}
std::vector<const Node*> all(const Node& root, const std::string& name) {
  std::vector<const Node*> out;
  collect(root, name, out);
  return out;
}
const Node* child(const Node& n, const std::string& name) {
  for (const auto& c : n.children)
    if (c->name == name) return c.get();
  return nullptr;
}
std::vector<std::string> texts(const Node& root) {
  std::vector<std::string> out;
  for (const Node* t : all(root, "text")) out.push_back(t->text);
  return out;
}
bool has_text(const Node& root, const std::string& s) {
  for (const auto& t : texts(root))
    if (t == s) return true;
  return false;
}
// Cells: <rect> elements that carry a <title>.
std::vector<const Node*> cells(const Node& root) {
  std::vector<const Node*> out;
  for (const Node* r : all(root, "rect"))
    if (child(*r, "title")) out.push_back(r);
  return out;
}

// ---- escaping ----------------------------------------------------------------------------------

TEST(Svg, XmlEscape) {
  EXPECT_EQ(xml_escape("<unk>"), "&lt;unk&gt;");
  EXPECT_EQ(xml_escape("a & b"), "a &amp; b");
  EXPECT_EQ(xml_escape("\"q\" 'a'"), "&quot;q&quot; &apos;a&apos;");
  EXPECT_EQ(xml_escape("traversé ▁chat 猫"), "traversé ▁chat 猫");  // UTF-8 passes through
  EXPECT_EQ(xml_escape("a\nb"), "a&#10;b");
  EXPECT_EQ(xml_escape(std::string("x\x01y")), "x\xEF\xBF\xBDy");      // control char → U+FFFD
  EXPECT_EQ(xml_escape("\xC3"), "\xEF\xBF\xBD");                        // a split 2-byte character
  EXPECT_EQ(xml_escape("\xE2\x96"), "\xEF\xBF\xBD\xEF\xBF\xBD");        // a split 3-byte one
  EXPECT_EQ(xml_escape("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");        // overlong
  EXPECT_EQ(xml_escape(""), "");
}

// ---- ticks -------------------------------------------------------------------------------------

bool is_nice_step(double step) {
  const double mag = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / mag;
  return std::abs(m - 1) < 1e-9 || std::abs(m - 2) < 1e-9 || std::abs(m - 5) < 1e-9;
}

TEST(Svg, NiceTicksAreNiceAndCoverTheRange) {
  const std::vector<std::pair<double, double>> ranges = {
      {0, 1},   {1.7, 3.5}, {0.0013, 0.0071}, {-3, 17}, {0, 2000}, {1, 2001},
      {1e6, 3.3e6}, {-0.02, -0.01}, {0.1, 0.3}, {2.345, 2.346}};
  for (auto [lo, hi] : ranges) {
    for (int target : {3, 5, 8}) {
      const auto t = detail::nice_ticks(lo, hi, target);
      ASSERT_GE(t.size(), 2u) << lo << ".." << hi;
      EXPECT_LE(t.front(), lo) << lo << ".." << hi;
      EXPECT_GE(t.back(), hi) << lo << ".." << hi;
      const double step = t[1] - t[0];
      EXPECT_TRUE(is_nice_step(step)) << "step " << step << " for " << lo << ".." << hi;
      EXPECT_LE(static_cast<int>(t.size()) - 1, 2 * target + 1) << lo << ".." << hi;
      for (size_t i = 0; i < t.size(); ++i) {
        const double k = t[i] / step;
        EXPECT_NEAR(k, std::round(k), 1e-6) << t[i] << " is not a multiple of " << step;
        if (i > 0) {
          EXPECT_NEAR(t[i] - t[i - 1], step, step * 1e-6);
        }
      }
    }
  }
  EXPECT_EQ(detail::nice_ticks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  EXPECT_EQ(detail::nice_ticks(0, 2000, 4), (std::vector<double>{0, 500, 1000, 1500, 2000}));
  // A constant range is widened; non-finite input does not hang.
  const auto c = detail::nice_ticks(5, 5, 5);
  EXPECT_LT(c.front(), 5);
  EXPECT_GT(c.back(), 5);
  EXPECT_EQ(detail::nice_ticks(0, std::numeric_limits<double>::infinity(), 5).size(), 2u);
  // A span past the largest double: its ticks, in a bounded count (the loop on k never ended).
  for (int target : {1, 2, 5, 8}) {
    const auto wide = detail::nice_ticks(-1e308, 1e308, target);
    ASSERT_GE(wide.size(), 2u);
    EXPECT_LE(wide.size(), 1001u);
    EXPECT_LE(wide.front(), -1e308);
    EXPECT_GE(wide.back(), 1e308);
    for (double v : wide) EXPECT_TRUE(std::isfinite(v)) << v;
  }
  EXPECT_DOUBLE_EQ(detail::fraction(1e308, -1e308, 1e308), 1.0);
  EXPECT_DOUBLE_EQ(detail::fraction(0, -1e308, 1e308), 0.5);
  EXPECT_EQ(detail::nice_step(0.13), 0.2);
  EXPECT_EQ(detail::nice_step(3), 5);
  EXPECT_EQ(detail::nice_step(7), 10);
  EXPECT_EQ(detail::nice_step(1), 1);
}

TEST(Svg, LogTicksCoverTheRange) {
  const std::vector<std::pair<double, double>> ranges = {
      {1.7, 3.5}, {0.01, 1}, {1e-6, 1e3}, {0.5, 0.5}, {3e-3, 2.2e-2}, {1e-30, 1e30}};
  for (auto [lo, hi] : ranges) {
    const auto t = detail::log_ticks(lo, hi);
    ASSERT_GE(t.size(), 2u);
    EXPECT_LE(t.size(), 8u);
    EXPECT_LE(t.front(), lo * (1 + 1e-9));
    EXPECT_GE(t.back(), hi * (1 - 1e-9));
    for (double v : t) {
      ASSERT_GT(v, 0);
      const double m = v / std::pow(10.0, std::floor(std::log10(v) + 1e-9));
      EXPECT_NEAR(m, std::round(m), 1e-6) << v;
    }
  }
  EXPECT_EQ(detail::log_ticks(1.7, 3.5), (std::vector<double>{1, 2, 3, 4}));
}

TEST(Svg, FormatTick) {
  EXPECT_EQ(detail::format_tick(0.25, 0.05), "0.25");
  EXPECT_EQ(detail::format_tick(2000, 500), "2000");
  EXPECT_EQ(detail::format_tick(0.6000000000000001, 0.2), "0.6");
  EXPECT_EQ(detail::format_tick(-1e-17, 0.1), "0.0");
  EXPECT_EQ(detail::format_tick(0, 100), "0");
  EXPECT_EQ(detail::format_tick(1.5, 0.5), "1.5");
  EXPECT_EQ(detail::format_tick(2.5e6, 5e5), "2.5e6");
  EXPECT_EQ(detail::format_number(0.001), "0.001");
  EXPECT_EQ(detail::format_number(1e-5), "1e-5");
  EXPECT_EQ(detail::format_number(100), "100");
}

TEST(Svg, SequentialColours) {
  EXPECT_EQ(detail::to_hex(detail::sequential_color(0)), "#f7fbff");
  EXPECT_EQ(detail::to_hex(detail::sequential_color(1)), "#08306b");
  EXPECT_EQ(detail::to_hex(detail::sequential_color(7)), "#08306b");  // clamped
  // Darker (smaller r+g+b) as t grows.
  int prev = 1000;
  for (double t = 0; t <= 1.0001; t += 0.05) {
    const auto c = detail::sequential_color(t);
    EXPECT_LE(c.r + c.g + c.b, prev);
    prev = c.r + c.g + c.b;
  }
}

// ---- line plots --------------------------------------------------------------------------------

Series make_series(const std::string& name, int n, double scale) {
  Series s{name, {}, {}};
  for (int i = 0; i < n; ++i) {
    s.x.push_back(i * 10.0);
    s.y.push_back(scale * (0.5 + 3.0 * std::exp(-i / 20.0)));
  }
  return s;
}

TEST(LinePlot, WellFormedWithLabelsLegendAndDistinctColours) {
  LinePlotOptions opt;
  opt.title = "loss <train> & \"val\"";
  opt.x_label = "step";
  opt.y_label = "cross-entropy";
  const std::string svg = line_plot_svg({make_series("train", 100, 1.0), make_series("val <ema>", 100, 1.1)}, opt);
  auto root = parse_ok(svg);
  ASSERT_TRUE(root);
  EXPECT_NE(svg.find("loss &lt;train&gt; &amp; &quot;val&quot;"), std::string::npos);
  EXPECT_TRUE(has_text(*root, "loss <train> & \"val\""));
  EXPECT_TRUE(has_text(*root, "step"));
  EXPECT_TRUE(has_text(*root, "cross-entropy"));
  EXPECT_TRUE(has_text(*root, "train"));      // legend
  EXPECT_TRUE(has_text(*root, "val <ema>"));  // legend, escaped in the document
  const auto paths = all(*root, "path");
  ASSERT_EQ(paths.size(), 2u);
  std::set<std::string> colours;
  for (const Node* g : all(*root, "g"))
    if (child(*g, "path")) colours.insert(g->attrs.at("stroke"));
  EXPECT_EQ(colours.size(), 2u);
  // Tick labels: x from 0 to 990 → "0" … ; y labels are numbers.
  EXPECT_TRUE(has_text(*root, "0"));
  EXPECT_EQ(root->attrs.at("width"), "720");
  EXPECT_EQ(root->attrs.at("height"), "420");
}

TEST(LinePlot, SingleSeriesHasNoLegendAndImplicitX) {
  Series s{"loss", {}, {3, 2.5, 2.2, 2.0, 1.9}};  // x = 0..4
  const std::string svg = line_plot_svg({s}, {});
  auto root = parse_ok(svg);
  ASSERT_TRUE(root);
  EXPECT_FALSE(has_text(*root, "loss"));  // no legend for one series
  EXPECT_EQ(all(*root, "path").size(), 1u);
}

TEST(LinePlot, NanAndInfBreakTheLine) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Series s{"s", {0, 1, 2, 3, 4, 5, 6, 7}, {1, 2, nan, 3, 4, inf, 5, nan}};
  const std::string svg = line_plot_svg({s}, {});
  auto root = parse_ok(svg);
  ASSERT_TRUE(root);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  const auto paths = all(*root, "path");
  ASSERT_EQ(paths.size(), 1u);
  const std::string d = paths[0]->attrs.at("d");
  size_t moves = 0;
  for (char ch : d) moves += ch == 'M';
  EXPECT_EQ(moves, 2u) << d;                 // (0,1)-(1,2) and (3,3)-(4,4)
  EXPECT_EQ(all(*root, "circle").size(), 1u);  // (6,5) alone between inf and NaN
}

// Values spanning more than a double holds are drawn where they lie (the plot hung in its ticks, and
// its coordinates divided by an infinite range put every point on the axis).
TEST(LinePlot, ValuesSpanningPastTheLargestDoubleAreDrawnWhereTheyLie) {
  Series s{"s", {-1.7e308, 0, 1.7e308}, {-1e308, 0, 1e308}};
  const std::string svg = line_plot_svg({s}, {});
  auto root = parse_ok(svg);
  ASSERT_TRUE(root);
  const auto paths = all(*root, "path");
  ASSERT_EQ(paths.size(), 1u);
  std::vector<double> xy;  // the path's numbers: x0 y0 x1 y1 x2 y2
  const std::string d = paths[0]->attrs.at("d");
  for (size_t i = 0; i < d.size();) {
    if (std::isdigit(static_cast<unsigned char>(d[i])) || d[i] == '-' || d[i] == '.') {
      size_t used = 0;
      xy.push_back(std::stod(d.substr(i), &used));
      i += used;
    } else {
      ++i;
    }
  }
  ASSERT_EQ(xy.size(), 6u) << d;
  EXPECT_LT(xy[0], xy[2]);  // left to right
  EXPECT_LT(xy[2], xy[4]);
  EXPECT_GT(xy[1], xy[3]);  // bottom to top: −1e308, 0, 1e308
  EXPECT_GT(xy[3], xy[5]);
  EXPECT_NEAR(xy[2], (xy[0] + xy[4]) / 2, 1.0) << d;  // 0 halfway
}

TEST(LinePlot, MarkersDotEveryDrawnPoint) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Series s{"s", {5, 10, 15, 20}, {40, 35, nan, 20}};
  LinePlotOptions o;
  o.markers = true;
  auto root = parse_ok(line_plot_svg({s}, o));
  ASSERT_TRUE(root);
  EXPECT_EQ(all(*root, "circle").size(), 3u);  // the NaN point is not drawn
  EXPECT_EQ(all(*root, "path").size(), 1u);
}

TEST(LinePlot, EmptyPlotAndEmptySeriesSayNoData) {
  for (const auto& series : std::vector<std::vector<Series>>{{}, {Series{"a", {}, {}}},
                                                             {Series{"nan", {}, {std::nan("")}}}}) {
    auto root = parse_ok(line_plot_svg(series, {"t", "x", "y", false, 400, 300}));
    ASSERT_TRUE(root);
    EXPECT_TRUE(has_text(*root, "no data"));
  }
  // One empty series among others: the legend says so.
  auto root = parse_ok(line_plot_svg({make_series("train", 10, 1), Series{"val", {}, {}}}, {}));
  ASSERT_TRUE(root);
  EXPECT_TRUE(has_text(*root, "val (no data)"));
}

TEST(LinePlot, LogYSkipsNonPositive) {
  Series s{"s", {}, {10, 1, 0, 0.1, -1, 0.01}};
  LinePlotOptions opt;
  opt.log_y = true;
  const std::string svg = line_plot_svg({s}, opt);
  auto root = parse_ok(svg);
  ASSERT_TRUE(root);
  EXPECT_TRUE(has_text(*root, "0.01"));
  EXPECT_TRUE(has_text(*root, "10"));
  EXPECT_EQ(all(*root, "path").size(), 1u);
}

TEST(LinePlot, ManySeriesAndConstantData) {
  std::vector<Series> many;
  for (int k = 0; k < 11; ++k) {
    std::string name = "s";
    name += std::to_string(k);
    many.push_back(Series{name, {}, {1.0 * k, 1.0 * k}});
  }
  auto root = parse_ok(line_plot_svg(many, {}));
  ASSERT_TRUE(root);
  EXPECT_EQ(all(*root, "path").size(), 11u);
  root = parse_ok(line_plot_svg({Series{"c", {5, 5}, {2, 2}}}, {}));  // zero x and y ranges
  ASSERT_TRUE(root);
}

TEST(LinePlot, MismatchedSizesThrow) {
  EXPECT_THROW(line_plot_svg({Series{"a", {1, 2, 3}, {1, 2}}}, {}), Error);
}

// ---- heat maps ---------------------------------------------------------------------------------

std::vector<float> ramp(int rows, int cols) {
  std::vector<float> v;
  for (int i = 0; i < rows * cols; ++i) v.push_back(static_cast<float>(i) / static_cast<float>(rows * cols - 1));
  return v;
}

TEST(Heatmap, CellsWithTooltipsAndEscapedUtf8Labels) {
  const std::vector<std::string> rows = {"<unk>", "&", "traversé"};
  const std::vector<std::string> cols = {"\"", "▁chat", "it's", "<s>"};
  auto v = ramp(3, 4);
  v[1] = 0.734f;
  HeatmapOptions opt;
  opt.title = "layer 0 <head 1>";
  opt.x_label = "key";
  opt.y_label = "query";
  const std::string svg = heatmap_svg(v, 3, 4, rows, cols, opt);
  auto root = parse_ok(svg);
  ASSERT_TRUE(root);
  const auto c = cells(*root);
  ASSERT_EQ(c.size(), 12u);
  EXPECT_EQ(child(*c[1], "title")->text, "<unk> \u2192 \u2581chat: 0.734");
  EXPECT_EQ(child(*c[4], "title")->text, "& \u2192 \": " + std::string("0.364"));
  for (const auto& l : rows) EXPECT_TRUE(has_text(*root, l)) << l;
  for (const auto& l : cols) EXPECT_TRUE(has_text(*root, l)) << l;
  EXPECT_TRUE(has_text(*root, "layer 0 <head 1>"));
  EXPECT_NE(svg.find("traversé"), std::string::npos);
  EXPECT_NE(svg.find("&lt;unk&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<unk>"), std::string::npos);
  // Colour bar: a gradient and its tick labels 0 … 1.
  EXPECT_EQ(all(*root, "linearGradient").size(), 1u);
  EXPECT_TRUE(has_text(*root, "0.0"));
  EXPECT_TRUE(has_text(*root, "1.0"));
}

TEST(Heatmap, MaxColourDiffersFromMin) {
  const std::vector<float> v = {0.0f, 0.1f, 0.2f, 0.9f};
  auto root = parse_ok(heatmap_svg(v, 2, 2, {}, {}, {}));
  ASSERT_TRUE(root);
  const auto c = cells(*root);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_NE(c[0]->attrs.at("fill"), c[3]->attrs.at("fill"));
  EXPECT_EQ(c[3]->attrs.at("fill"), "#08306b");  // the maximum is the darkest
  EXPECT_EQ(c[0]->attrs.at("fill"), "#f7fbff");  // the scale starts at 0
  EXPECT_EQ(child(*c[2], "title")->text, "1 \u2192 0: 0.200");  // indices without labels
}

TEST(Heatmap, ShowValuesNanAndConstant) {
  HeatmapOptions opt;
  opt.show_values = true;
  std::vector<float> v = {0.25f, std::nanf(""), 0.5f, 1.0f, 0.0f, 0.75f};
  auto root = parse_ok(heatmap_svg(v, 2, 3, {"a", "b"}, {"x", "y", "z"}, opt));
  ASSERT_TRUE(root);
  EXPECT_TRUE(has_text(*root, "0.25"));
  EXPECT_TRUE(has_text(*root, "nan"));
  EXPECT_EQ(child(*cells(*root)[1], "title")->text, "a \u2192 y: nan");
  root = parse_ok(heatmap_svg(std::vector<float>(6, 0.0f), 2, 3, {}, {}, {}));  // all zero
  ASSERT_TRUE(root);
  EXPECT_EQ(cells(*root).size(), 6u);
  root = parse_ok(heatmap_svg({}, 0, 0, {}, {}, {}));  // empty matrix
  ASSERT_TRUE(root);
}

TEST(Heatmap, NegativeValuesExtendTheScale) {
  auto root = parse_ok(heatmap_svg({-2.0f, 0.0f, 1.0f, 2.0f}, 2, 2, {}, {}, {}));
  ASSERT_TRUE(root);
  const auto c = cells(*root);
  EXPECT_EQ(c[0]->attrs.at("fill"), "#f7fbff");
  EXPECT_EQ(c[3]->attrs.at("fill"), "#08306b");
  EXPECT_TRUE(has_text(*root, "-2"));
}

TEST(Heatmap, BadSizesThrow) {
  EXPECT_THROW(heatmap_svg({1, 2, 3}, 2, 2, {}, {}, {}), Error);
  EXPECT_THROW(heatmap_svg({1, 2, 3, 4}, 2, 2, {"a"}, {}, {}), Error);
  EXPECT_THROW(heatmap_svg({1, 2, 3, 4}, 2, 2, {}, {"a", "b", "c"}, {}), Error);
  EXPECT_THROW(heatmap_grid_svg({}, 0, {}, {}, {}), Error);
}

TEST(Heatmap, GridOfPanels) {
  std::vector<Panel> panels;
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 3; ++h)
      panels.push_back(Panel{"layer " + std::to_string(l) + " head " + std::to_string(h), ramp(4, 5), 4, 5});
  HeatmapOptions opt;
  opt.cell = 16;
  opt.title = "attention";
  const std::vector<std::string> rl = {"the", "cat", "sat", "."}, cl = {"<s>", "the", "cat", "sat", "."};
  const std::string svg = heatmap_grid_svg(panels, 3, rl, cl, opt);
  auto root = parse_ok(svg);
  ASSERT_TRUE(root);
  EXPECT_EQ(cells(*root).size(), 6u * 4 * 5);
  EXPECT_TRUE(has_text(*root, "layer 0 head 0"));
  EXPECT_TRUE(has_text(*root, "layer 1 head 2"));
  EXPECT_EQ(all(*root, "linearGradient").size(), 1u);  // one shared colour bar
  // Labels once per panel row / column of the grid: 4 row labels × 2 grid rows + 5 × 3 grid columns.
  int n_the = 0;
  for (const auto& t : texts(*root)) n_the += t == "the";
  EXPECT_EQ(n_the, 2 + 3);
}

TEST(ImageAttention, WeightsRingBoxesAndWrappedCaptions) {
  ImageAttentionPanel p;
  p.caption = "a pair of trousers below and to the right of a sandal and a dress in the middle";
  p.height = 4, p.width = 6;
  p.image.assign(24, 0.5f);
  p.rows = 2, p.cols = 3;
  p.weights = {0.f, 0.1f, 0.2f, 0.f, 0.f, 0.7f};
  p.query_y = 1, p.query_x = 2;
  p.boxes = {{1, 0, 3, 2}};
  ImageAttentionOptions opt;
  opt.pixel = 4;
  auto root = parse_ok(image_attention_svg({p}, 1, opt));
  ASSERT_TRUE(root);
  // the picture as one <image>; 3 weighted cells (0 is not drawn), the frame, one box; one ring
  EXPECT_EQ(all(*root, "image").size(), 1u);
  EXPECT_EQ(all(*root, "rect").size(), 1u + 3 + 1 + 1);
  EXPECT_EQ(all(*root, "circle").size(), 1u);
  // the 81-character caption wraps onto lines that fit the 24-pixel-wide panel's share
  const auto t = texts(*root);
  EXPECT_GT(t.size(), 3u);
  std::string joined;
  for (const auto& line : t) joined += (joined.empty() ? "" : " ") + line;
  EXPECT_EQ(joined, p.caption);
  // no query, no weights: the picture, its frame and the box
  p.show_query = false;
  p.rows = p.cols = 0;
  p.weights.clear();
  root = parse_ok(image_attention_svg({p}, 1, opt));
  ASSERT_TRUE(root);
  EXPECT_EQ(all(*root, "circle").size(), 0u);
  EXPECT_EQ(all(*root, "rect").size(), 1u + 1 + 1);
  p.weights = {1.f};  // weights for a 0×0 grid
  EXPECT_THROW(image_attention_svg({p}, 1, opt), Error);
}

// qkv scenes -n 300 drew its contact sheet with a <rect> per pixel: 1.2 million elements, past
// librsvg's limit of 1,000,000, so sheet.png failed after the scenes were written. 250 pictures of
// 64×64 (1.02 million pixels) must render.
TEST(ImageAttention, ASheetOfManyPicturesRenders) {
  std::vector<ImageAttentionPanel> panels(250);
  for (size_t i = 0; i < panels.size(); ++i) {
    ImageAttentionPanel& p = panels[i];
    p.caption = "scene " + std::to_string(i);
    p.height = p.width = 64;
    p.image.assign(64 * 64, static_cast<float>(i % 7) / 7.f);
    p.show_query = false;
  }
  ImageAttentionOptions opt;
  opt.pixel = 1;
  const std::string svg = image_attention_svg(panels, 4, opt);
  EXPECT_NO_THROW(svg_to_png(svg, 0.25));
}

// A document taller than cairo's 32767-pixel surfaces (the 300-scene sheet at 4 columns was 40280)
// is drawn smaller, not refused.
TEST(ImageAttention, APictureTallerThanCairoHoldsIsDrawnSmaller) {
  const std::string png =
      svg_to_png("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100\" height=\"40000\"><rect width=\"100\" "
                 "height=\"40000\" fill=\"#888\"/></svg>");
  ASSERT_GT(png.size(), 24u);
  const auto be32 = [&](size_t at) {
    return uint32_t{static_cast<unsigned char>(png[at])} << 24 | uint32_t{static_cast<unsigned char>(png[at + 1])} << 16 |
           uint32_t{static_cast<unsigned char>(png[at + 2])} << 8 | static_cast<unsigned char>(png[at + 3]);
  };
  EXPECT_LE(be32(20), 32767u);  // IHDR's height
  EXPECT_GE(be32(20), 32000u);
  EXPECT_GE(be32(16), 80u);     // and its width, to scale
}

}  // namespace
}  // namespace qkv::viz
