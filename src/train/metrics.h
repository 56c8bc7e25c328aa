// The run's metrics: rows of {"step": …, name: value, …} — the logged steps and the evaluations —
// written as metrics.jsonl and metrics.csv and plotted as loss curves (loss.svg, loss.png) in the
// output folder. Private to the trainer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace qkv::train {

class Metrics {
 public:
  explicit Metrics(std::string dir) : dir_(std::move(dir)) {}

  // A resumed run keeps the rows of metrics.jsonl before its first step (the checkpoint's rows
  // are preferred: restore); a torn last line is skipped.
  void load_until(int64_t step);
  // The rows a checkpoint carries (every row before its step): restored on --resume, so that a kill
  // between writing the checkpoint and writing metrics.jsonl loses nothing.
  void restore(const nlohmann::json& rows, int64_t step);
  const std::vector<nlohmann::json>& rows() const { return rows_; }
  void add(nlohmann::json row) { rows_.push_back(std::move(row)); }
  // metrics.jsonl, metrics.csv (a column per key, in order of appearance), loss.svg and loss.png.
  void write() const;

 private:
  std::string plot() const;
  std::string path(const char* name) const;
  std::string dir_;
  std::vector<nlohmann::json> rows_;
};

}  // namespace qkv::train
