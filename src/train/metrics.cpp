#include "metrics.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "qkv/io/config.h"
#include "qkv/io/file.h"
#include "qkv/io/json.h"
#include "qkv/viz/png.h"
#include "qkv/viz/svg.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

void Metrics::load_until(int64_t step) {
  std::ifstream in(path("metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      json r = io::parse_json(line, path("metrics.jsonl"));
      if (io::get_or(r, "step", int64_t{-1}) < step) rows_.push_back(r);  // the resumed run redoes step's evaluation
    } catch (const std::exception&) {
      // a torn last line (killed mid-write before atomic writes) is skipped
    }
  }
}

void Metrics::restore(const json& rows, int64_t step) {
  rows_.clear();
  for (const json& r : rows)
    if (r.is_object() && io::get_or(r, "step", int64_t{-1}) < step) rows_.push_back(r);
}

void Metrics::write() const {
  std::string jsonl, csv;
  std::vector<std::string> cols = {"step"};
  for (const json& r : rows_) {
    jsonl += r.dump() + "\n";
    for (auto& [k, v] : r.items())
      if (std::find(cols.begin(), cols.end(), k) == cols.end()) cols.push_back(k);
  }
  for (size_t i = 0; i < cols.size(); ++i) csv += (i ? "," : "") + cols[i];
  csv += "\n";
  for (const json& r : rows_) {
    for (size_t i = 0; i < cols.size(); ++i) {
      if (i) csv += ",";
      if (r.contains(cols[i])) csv += r[cols[i]].is_string() ? r[cols[i]].get<std::string>() : r[cols[i]].dump();
    }
    csv += "\n";
  }
  io::write_file_atomic(path("metrics.jsonl"), jsonl);
  io::write_file_atomic(path("metrics.csv"), csv);
  const std::string svg = plot();
  io::write_file_atomic(path("loss.svg"), svg);
  viz::write_picture(path("loss.png"), svg);
}

std::string Metrics::plot() const {
  viz::Series train{"train loss (per step)", {}, {}};
  std::map<std::string, viz::Series> evals;
  for (const json& r : rows_) {
    const auto step = static_cast<double>(io::get_or(r, "step", int64_t{0}));
    if (r.contains("loss")) train.x.push_back(step), train.y.push_back(r["loss"].get<double>());
    for (auto& [k, v] : r.items())
      if (k.ends_with("_loss") && v.is_number()) {
        auto& s = evals[k];
        s.name = k == "val_loss" ? "validation loss" : k == "train_loss" ? "train loss (eval)" : k;
        s.x.push_back(step), s.y.push_back(v.get<double>());
      }
  }
  std::vector<viz::Series> series;
  if (!train.x.empty()) series.push_back(train);
  for (auto& [k, s] : evals) series.push_back(s);
  viz::LinePlotOptions o;
  o.title = "Training loss";
  o.x_label = "step";
  o.y_label = "cross-entropy (nats/token)";
  return viz::line_plot_svg(series, o);
}

std::string Metrics::path(const char* name) const { return (fs::path(dir_) / name).string(); }

}  // namespace qkv::train
