// Timing helpers shared by the `qkv bench …` commands.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace qkv::cli {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Mean and median (upper middle) of per-iteration times.
struct TimeStats {
  double mean = 0, median = 0;
};
inline TimeStats time_stats(std::vector<double> times) {
  TimeStats s;
  if (times.empty()) return s;
  for (double t : times) s.mean += t;
  s.mean /= static_cast<double>(times.size());
  std::sort(times.begin(), times.end());
  s.median = times[times.size() / 2];
  return s;
}

}  // namespace qkv::cli
