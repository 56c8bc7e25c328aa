#include "metrics.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <map>
#include <mutex>

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

namespace {

// ---- TensorBoard's event file, written by hand (no TensorFlow, no protobuf library) --------------
// A TFRecord file of Event protos: each record is len (u64 LE), masked CRC-32C of len (u32), the
// bytes, masked CRC-32C of them. Event {1: wall_time double, 2: step int64, 3: file_version
// string, 5: summary {1: value {1: tag string, 2: simple_value float}}}.

uint32_t crc32c(const std::string& b) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char ch : b) c = table[(c ^ ch) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc(const std::string& b) {
  const uint32_t c = crc32c(b);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

void put_varint(std::string& o, uint64_t v) {
  while (v >= 0x80) o += static_cast<char>((v & 0x7F) | 0x80), v >>= 7;
  o += static_cast<char>(v);
}

template <class T>
void put_fixed(std::string& o, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts (x86-64, ARM64)
  o.append(b, sizeof(T));
}

void put_bytes(std::string& o, uint32_t field, const std::string& b) {
  put_varint(o, field << 3 | 2);
  put_varint(o, b.size());
  o += b;
}

void put_record(std::string& file, const std::string& event) {
  std::string len;
  put_fixed<uint64_t>(len, event.size());
  file += len;
  put_fixed<uint32_t>(file, masked_crc(len));
  file += event;
  put_fixed<uint32_t>(file, masked_crc(event));
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_varint(e, 1 << 3 | 1);
  put_fixed<double>(e, wall_time);
  put_varint(e, 2 << 3 | 0);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

std::string tensorboard_events(const std::vector<json>& rows, double start_time) {
  std::string file;
  std::string first = event_header(start_time, 0);
  put_bytes(first, 3, "brain.Event:2");
  put_record(file, first);
  for (const json& r : rows) {
    std::string summary;
    for (auto& [k, v] : r.items()) {
      if (k == "step" || !v.is_number()) continue;
      std::string value;
      put_bytes(value, 1, k);
      put_varint(value, 2 << 3 | 5);
      put_fixed<float>(value, static_cast<float>(v.get<double>()));
      put_bytes(summary, 1, value);
    }
    if (summary.empty()) continue;
    std::string e = event_header(start_time + io::get_or(r, "elapsed_s", 0.0), io::get_or(r, "step", int64_t{0}));
    put_bytes(e, 5, summary);
    put_record(file, e);
  }
  return file;
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
  // TensorBoard (`tensorboard --logdir out/`): the same rows, rewritten whole each time
  io::write_file_atomic(path("events.out.tfevents.qkv"), tensorboard_events(rows_, start_time_));
  const std::string svg = plot();
  io::write_file_atomic(path("loss.svg"), svg);
  // loss.png too where the picture libraries are installed (librsvg2-2: scripts/setup.sh). A machine
  // without them trains all the same, with loss.svg alone, and is told once.
  if (const std::string& why = viz::png_unavailable(); why.empty()) {
    viz::write_picture(path("loss.png"), svg);
  } else {
    static std::once_flag told;
    std::call_once(told, [&] { std::fprintf(stderr, "qkv: loss.svg without loss.png: %s\n", why.c_str()); });
  }
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
