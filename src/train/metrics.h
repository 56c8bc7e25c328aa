// The run's metrics: rows of {"step": …, name: value, …} — the logged steps and the evaluations —
// written as metrics.jsonl and metrics.csv and plotted as loss curves (loss.svg, loss.png) in the
// output folder. Private to the trainer.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace qkv::train {

class Metrics {
 public:
  explicit Metrics(std::string dir)
      : dir_(std::move(dir)),
        start_time_(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

  // A resumed run keeps the rows of metrics.jsonl before its first step (the checkpoint's rows
  // are preferred: restore); a torn last line is skipped.
  void load_until(int64_t step);
  // The rows a checkpoint carries (every row before its step): restored on --resume, so that a kill
  // between writing the checkpoint and writing metrics.jsonl loses nothing.
  void restore(const nlohmann::json& rows, int64_t step);
  const std::vector<nlohmann::json>& rows() const { return rows_; }
  void add(nlohmann::json row) { rows_.push_back(std::move(row)); }
  // metrics.jsonl, metrics.csv (a column per key, in order of appearance), a TensorBoard event file
  // (events.out.tfevents.qkv: every numeric key a scalar, by step), loss.svg and loss.png.
  void write() const;

 private:
  std::string plot() const;
  std::string path(const char* name) const;
  std::string dir_;
  double start_time_;  // Unix seconds: the events' wall_time is this + the row's elapsed_s
  std::vector<nlohmann::json> rows_;
};

// The rows as a TensorBoard event file (TFRecord of Event protos, written by hand): a version
// event, then one event a row at its step with every numeric key but "step" as a scalar.
std::string tensorboard_events(const std::vector<nlohmann::json>& rows, double start_time);

}  // namespace qkv::train
