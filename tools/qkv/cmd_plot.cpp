// qkv plot — one metric of several training runs in one SVG line plot, to compare them (f32
// against bf16, one learning rate against another): reads each run's metrics.csv (written by
// `qkv train`), takes the rows where the metric is present, and draws metric against step.
// Any CSV with a header row will do, with -x naming another column than "step": `qkv eval
// --by-length-csv` writes BLEU by source length, drawn as `qkv plot a.csv b.csv -x length -y bleu`.
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "commands.h"
#include "qkv/core/error.h"
#include "qkv/io/file.h"
#include "qkv/viz/png.h"
#include "qkv/viz/svg.h"

namespace qkv::cli {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

// (x, value) of every row of RUN/metrics.csv (or the csv file itself) where `metric` is set.
viz::Series read_series(const std::string& run, const std::string& x, const std::string& metric,
                        const std::string& name) {
  const fs::path csv = fs::is_directory(run) ? fs::path(run) / "metrics.csv" : fs::path(run);
  // (bounded: /dev/zero given as a run would otherwise be read until the memory ran out; a million
  // steps of 20 metrics are ~200 MB)
  std::istringstream in(io::read_file(csv.string(), int64_t{256} << 20, "plot: the metrics file"));
  std::string line;
  QKV_CHECK(std::getline(in, line), "plot: '", csv.string(), "' is empty");
  std::vector<std::string> head = split_csv_line(line);
  int step_col = -1, col = -1;
  for (size_t i = 0; i < head.size(); ++i) {
    if (head[i] == x) step_col = static_cast<int>(i);
    if (head[i] == metric) col = static_cast<int>(i);
  }
  // (the header as read, cut: a file of one 100 MB line is not a header to print)
  const std::string has = line.size() > 200 ? line.substr(0, 200) + "…" : line;
  QKV_CHECK(step_col >= 0, "plot: '", csv.string(), "' has no \"", x, "\" column",
            x == "step" ? "; is it a qkv metrics.csv?" : "", " (it has: ", has, ")");
  QKV_CHECK(col >= 0, "plot: '", csv.string(), "' has no column \"", metric, "\" (it has: ", has, ")");
  viz::Series s;
  s.name = name;
  while (std::getline(in, line)) {
    std::vector<std::string> cells = split_csv_line(line);
    if (static_cast<int>(cells.size()) <= std::max(col, step_col) || cells[col].empty()) continue;
    try {
      s.x.push_back(std::stod(cells[step_col]));
      s.y.push_back(std::stod(cells[col]));
    } catch (const std::exception&) {
      QKV_CHECK(false, "plot: '", csv.string(),
                "': a row has a value that is not a number: ", line.size() > 200 ? line.substr(0, 200) + "…" : line);
    }
  }
  return s;
}

}  // namespace

void add_plot(CLI::App& app) {
  auto* sub = app.add_subcommand("plot", "plot one metric of several training runs against step (SVG or PNG)");
  struct Args {
    std::vector<std::string> runs, names;
    std::string metric = "val_loss", x = "step", out = "plot.svg", title, x_label, y_label;
    bool log_y = false, markers = false;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("runs", a->runs, "training output folders (their metrics.csv) or metrics.csv files")
      ->required()
      ->check(CLI::ExistingPath);
  sub->add_option("-y,--metric", a->metric, "column to plot: val_loss, loss, val_bleu, lr, tokens_per_s, …")
      ->capture_default_str();
  sub->add_option("-x,--x", a->x, "column for the x axis")->capture_default_str();
  sub->add_flag("--markers", a->markers, "a dot at every point");
  sub->add_option("-n,--name", a->names, "legend name of each run, in order (default: the folder names)");
  sub->add_option("-o,--out", a->out, "picture to write (atomically): PNG when it ends in .png, SVG otherwise")->capture_default_str();
  sub->add_option("--title", a->title, "plot title");
  sub->add_option("--x-label", a->x_label, "x axis label (default: the column's name)");
  sub->add_option("--y-label", a->y_label, "y axis label (default: the metric's name)");
  sub->add_flag("--log-y", a->log_y, "logarithmic y axis");
  sub->footer("Example: qkv plot out/shakespeare-char out/shakespeare-char-bf16 -n f32 -n bf16 -y val_loss -o cmp.svg");
  register_runner(sub, [a] {
    QKV_CHECK(a->names.empty() || a->names.size() == a->runs.size(), "plot: ", a->names.size(), " names for ",
              a->runs.size(), " runs");
    std::vector<viz::Series> series;
    for (size_t i = 0; i < a->runs.size(); ++i) {
      const fs::path p(a->runs[i]);
      std::string name = !a->names.empty() ? a->names[i]
                         : fs::is_directory(p) ? fs::absolute(p).lexically_normal().filename().string()
                                               : p.string();
      if (name.empty()) name = fs::absolute(p).lexically_normal().parent_path().filename().string();
      series.push_back(read_series(a->runs[i], a->x, a->metric, name));
    }
    viz::LinePlotOptions o;
    o.title = a->title.empty() ? a->metric : a->title;
    o.x_label = a->x_label.empty() ? a->x : a->x_label, o.y_label = a->y_label.empty() ? a->metric : a->y_label;
    o.log_y = a->log_y, o.markers = a->markers;
    viz::write_picture(a->out, viz::line_plot_svg(series, o));
    for (auto& s : series)
      std::fprintf(stderr, "%s: %zu points%s\n", s.name.c_str(), s.y.size(),
                   s.y.empty() ? "" : (", last " + std::to_string(s.y.back())).c_str());
    std::fprintf(stderr, "wrote %s\n", a->out.c_str());
    return 0;
  });
}

}  // namespace qkv::cli
