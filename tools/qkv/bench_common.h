// Helpers shared by the `qkv bench …` commands: timing, and the options of the training and decoding benches.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/core/cuda.h"
#include "qkv/ops/autocast.h"

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

// The median of `reps` timed runs of f after one warm-up, in milliseconds; on a GPU each waits for the
// queued work (cuda::synchronize) before the clock is read.
template <typename F>
double median_ms(int reps, Device device, F&& f) {
  std::vector<double> ts;
  for (int i = 0; i <= reps; ++i) {
    if (!device.is_cpu()) cuda::synchronize(device.index);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    if (!device.is_cpu()) cuda::synchronize(device.index);
    if (i > 0) ts.push_back(1e3 * seconds_since(t0));
  }
  return time_stats(ts).median;
}

// --iters, --warmup, --dtype (f32 | bf16 mixed precision), --threads and --json of `bench … train`.
inline void add_train_bench_options(CLI::App* tr, int64_t& iters, int64_t& warmup, AutocastDType& dtype, int& threads,
                                    bool& json) {
  tr->add_option("--iters", iters, "timed iterations")->capture_default_str()->check(greater_than_zero());
  tr->add_option("--warmup", warmup, "untimed iterations first")->capture_default_str()->check(zero_or_more());
  add_choice(tr, "--dtype", dtype, "f32, or bf16 for mixed precision (bf16 GEMMs, f32 weights; as torch.autocast)");
  add_threads_option(tr, threads);
  tr->add_flag("--json", json, "one JSON object on stdout");
}

// --dtype (the weights the decoding steps read), --threads, --no-naive and --json of the decoding
// benches (`bench gpt generate`, `bench seq2seq translate`).
inline void add_decode_bench_options(CLI::App* app, DecodeArgs& decode, bool& no_naive, bool& json) {
  add_decode_options(app, decode, kWeights | kThreads);
  app->add_flag("--no-naive", no_naive, "skip the run without cache");
  app->add_flag("--json", json, "one JSON object on stdout");
}

}  // namespace qkv::cli
