// Self-contained SVG writers: line plots (loss curves) and heat maps (attention weights).
//
// Every function returns a complete standalone SVG document (UTF-8, with an XML declaration) that
// a browser shows as is and `rsvg-convert` turns into a PNG. Nothing here depends on anything but
// the standard library and qkv::Error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qkv::viz {

// One line of a plot. `x` may be left empty: the points are then at x = 0, 1, 2, … .
// Otherwise x and y must have the same length (qkv::Error if not).
struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct LinePlotOptions {
  std::string title, x_label, y_label;
  bool log_y = false;  // points with y <= 0 are then skipped like NaN
  int width = 720, height = 420;
  bool markers = false;  // a dot at every point (few points, as BLEU by sentence length)
};

// A line plot: axes with "nice" ticks (1-2-5 steps), labels, gridlines, a legend when there is more
// than one series, distinct colours (Okabe–Ito, colour-blind safe; dashed after the 8th series),
// NaN/inf points skipped (the line is broken there; an isolated point is drawn as a dot). An empty
// series or plot gives a valid SVG saying "no data" (in the legend, or across the plot area).
std::string line_plot_svg(const std::vector<Series>& series, const LinePlotOptions& opt);

struct HeatmapOptions {
  std::string title, x_label, y_label;
  int cell = 28;             // cell side in px
  bool show_values = false;  // print each value inside its cell
};

// A heat map of a rows×cols matrix (row-major `values`; row = query, col = key), with row labels on
// the left and column labels on top (rotated −45° when they do not fit a cell), a white→dark-blue
// scale from min(0, min v) to max v, a colour bar with ticks, and a <title> tooltip per cell
// ("query → key: 0.734"). Labels may be empty (indices are shown) or have rows / cols entries
// (qkv::Error otherwise, or when values.size() != rows*cols). NaN cells are grey.
std::string heatmap_svg(const std::vector<float>& values, int rows, int cols,
                        const std::vector<std::string>& row_labels,
                        const std::vector<std::string>& col_labels, const HeatmapOptions& opt);

// Several heat maps in a grid of `grid_cols` columns (e.g. layers × heads), each with its caption
// under it, sharing one colour scale (min/max over all panels) and one colour bar. Row labels are
// drawn left of the first panel column, column labels above the first panel row.
struct Panel {
  std::string caption;
  std::vector<float> values;
  int rows, cols;
};
std::string heatmap_grid_svg(const std::vector<Panel>& panels, int grid_cols,
                             const std::vector<std::string>& row_labels,
                             const std::vector<std::string>& col_labels, const HeatmapOptions& opt);

// Text or attribute content for XML: & < > " ' escaped; tab, newline and CR as character
// references; other control characters and invalid UTF-8 bytes become U+FFFD (so a byte-level BPE
// piece that splits a character still gives a well-formed document).
std::string xml_escape(std::string_view s);

namespace detail {

// Multiples of a 1-2-5×10^k step covering [lo, hi] (first ≤ lo, last ≥ hi) in about `target`
// intervals. lo == hi is widened first. Non-finite input gives {0, 1}; where the multiples would
// number more than 1,000 (a span past the largest double), {lo, hi}.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// (v − a) / (b − a), without overflowing where b − a passes the largest double (−1e308 … 1e308).
double fraction(double v, double a, double b);
// The step nice_ticks would use: the smallest 1, 2 or 5 × 10^k that is ≥ raw (raw > 0).
double nice_step(double raw);
// Ticks for a log axis covering [lo, hi] (0 < lo ≤ hi): m×10^k with m from {1..9}, {1,2,5} or {1}
// (decades, possibly every 2nd/3rd), the densest choice with at most 8 ticks.
std::vector<double> log_ticks(double lo, double hi);
// A tick label with as many decimals as `step` needs ("0.25" for step 0.05, "2000" for step 500).
std::string format_tick(double v, double step);
// A number in the shortest form up to 6 significant digits ("0.3", "1e-05" → "1e-5").
std::string format_number(double v);

struct Rgb {
  int r, g, b;
};
// The sequential scale: t = 0 → near-white, t = 1 → dark blue (matplotlib "Blues"); t is clamped.
Rgb sequential_color(double t);
std::string to_hex(Rgb c);  // "#08306b"

// Number of code points (for text-width estimates).
size_t utf8_length(std::string_view s);

}  // namespace detail
}  // namespace qkv::viz
