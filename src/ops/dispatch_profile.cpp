// QKV_COUNT_OPS=1 and QKV_PROFILE=1 (ops/dispatch.h): what every QKV_DISPATCH costs, by op name.
//
// Counting keeps one number an op. Profiling also times each dispatch on the host (steady_clock
// around the statement) and, on a GPU, on the device: a mark (cuda::record_event) before and after
// the statement on the current stream; the pairs are resolved in batches of 4,096 (the host waits
// for the last mark then — a profiled run's own cost, not counted among its waits) and at exit.
//
// The report goes to standard error when the process exits, from an atexit handler registered at the
// first dispatch and again at the first GPU mark: the later one runs first, while the CUDA runtime
// (whose own exit handler was registered at its first call) still answers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dispatch.h"
#include "qkv/core/cuda.h"

namespace qkv::ops_detail {

namespace {

bool env_is_1(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string_view(v) == "1";
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

thread_local bool t_backward = false;

struct OpFigures {
  int64_t calls = 0, host_ns = 0;
  double device_ms = 0;
  int64_t timed_on_device = 0;
};

struct Profile {
  std::mutex mu;
  std::map<std::pair<std::string_view, bool>, OpFigures> ops;  // (op name, backward) → figures
  struct Marks {
    std::pair<std::string_view, bool> op;
    cuda::EventHandle start, stop;
  };
  std::vector<Marks> pending;  // GPU marks not yet read
  int64_t first_ns = 0;
  int64_t waits_at_start = 0;
  double wait_seconds_at_start = 0;
  bool reported = false;

  // Reads the pending marks (waits for the last one). Caller holds mu.
  void resolve() {
    for (const Marks& m : pending) {
      try {
        OpFigures& f = ops[m.op];
        f.device_ms += cuda::elapsed_ms(m.start, m.stop);
        ++f.timed_on_device;
      } catch (const Error&) {  // (a GPU gone at exit: those calls keep their host figures only)
      }
      cuda::release_event(m.start);
      cuda::release_event(m.stop);
    }
    pending.clear();
  }
};

Profile& profile() {
  static Profile* p = new Profile;  // never destroyed: read by the exit handler
  return *p;
}

std::string with_commas(int64_t v) {  // 1234567 → "1,234,567"
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void report() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.reported || p.ops.empty()) return;
  p.reported = true;
  p.resolve();
  std::vector<std::pair<std::pair<std::string_view, bool>, OpFigures>> rows(p.ops.begin(), p.ops.end());
  int64_t calls = 0;
  for (const auto& [op, f] : rows) calls += f.calls;
  if (!kProfileDispatches) {  // counting only: the QKV_COUNT_OPS=1 table
    std::map<std::string_view, int64_t> by_name;
    for (const auto& [op, f] : rows) by_name[op.first] += f.calls;
    std::fprintf(stderr, "qkv: op dispatches (QKV_COUNT_OPS=1): %lld in all\n", static_cast<long long>(calls));
    for (const auto& [op, n] : by_name)
      std::fprintf(stderr, "%12lld  %.*s\n", static_cast<long long>(n), static_cast<int>(op.size()), op.data());
    return;
  }
  // the heaviest first: device time where there is one, else host time
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.device_ms * 1e6 + static_cast<double>(a.second.host_ns) >
           b.second.device_ms * 1e6 + static_cast<double>(b.second.host_ns);
  });
  const double wall = static_cast<double>(now_ns() - p.first_ns) * 1e-9;
  int64_t host_ns = 0;
  double device_ms = 0;
  for (const auto& [op, f] : rows) host_ns += f.host_ns, device_ms += f.device_ms;
  const int64_t waits = cuda::host_waits() - p.waits_at_start;
  const double wait_s = cuda::host_wait_seconds() - p.wait_seconds_at_start;
  std::fprintf(stderr,
               "qkv: profile (QKV_PROFILE=1): %.3f s from the first op dispatch to exit; %s dispatches, %.3f s of "
               "host time in them; %s waits for a GPU, %.3f s\n",
               wall, with_commas(calls).c_str(), static_cast<double>(host_ns) * 1e-9, with_commas(waits).c_str(),
               wait_s);
  std::fprintf(stderr, "%-40s %10s %11s %9s %11s %9s\n", "op", "calls", "host ms", "µs/call", "device ms", "µs/call");
  for (const auto& [op, f] : rows) {
    const std::string name = std::string(op.first) + (op.second ? " (backward)" : "");
    const double h = static_cast<double>(f.host_ns) * 1e-6;
    std::fprintf(stderr, "%-40s %10s %11.2f %9.1f", name.c_str(), with_commas(f.calls).c_str(), h,
                 h * 1e3 / static_cast<double>(f.calls));
    if (f.timed_on_device)
      std::fprintf(stderr, " %11.2f %9.1f\n", f.device_ms, f.device_ms * 1e3 / static_cast<double>(f.timed_on_device));
    else
      std::fprintf(stderr, " %11s %9s\n", "-", "-");
  }
  std::fprintf(stderr, "%-40s %10s %11.2f %9s", "all ops", with_commas(calls).c_str(),
               static_cast<double>(host_ns) * 1e-6, "");
  if (device_ms > 0) std::fprintf(stderr, " %11.2f %9s", device_ms, "");
  std::fprintf(stderr, "\n");
  // what the host did besides dispatching and waiting: autograd's tape, tensors, the task's own work
  std::fprintf(stderr, "host time outside the dispatches and the waits: %.3f s (%.0f%% of the run)%s\n",
               wall - static_cast<double>(host_ns) * 1e-9 - wait_s,
               100.0 * (wall - static_cast<double>(host_ns) * 1e-9 - wait_s) / (wall > 0 ? wall : 1),
               device_ms > 0 ? detail::concat("; waiting for a GPU ", static_cast<int>(100.0 * wait_s / (wall > 0 ? wall : 1)),
                                              "% of the run").c_str()
                             : "");
}

void register_report() { std::atexit(report); }

}  // namespace

const bool kCountDispatches = env_is_1("QKV_COUNT_OPS");
const bool kProfileDispatches = env_is_1("QKV_PROFILE");

void DispatchScope::begin(const char* op, Device d) {
  op_ = op;
  device_ = d;
  if (!kProfileDispatches) return;
  {
    Profile& p = profile();
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.first_ns == 0) {
      p.first_ns = now_ns();
      p.waits_at_start = cuda::host_waits();
      p.wait_seconds_at_start = cuda::host_wait_seconds();
      register_report();
    }
  }
  if (!d.is_cpu() && !cuda::is_capturing()) {  // (a graph's capture runs nothing: no device time to mark)
    static const bool registered_after_cuda = (register_report(), true);
    (void)registered_after_cuda;
    start_ = cuda::record_event(d.index);
  }
  t0_ns_ = now_ns();
}

void DispatchScope::end() {
  const std::pair<std::string_view, bool> key{op_, t_backward};
  Profile& p = profile();
  if (!kProfileDispatches) {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.ops.empty()) register_report();
    ++p.ops[key].calls;
    return;
  }
  const int64_t t1 = now_ns();
  cuda::EventHandle stop = nullptr;
  if (start_) {
    try {
      stop = cuda::record_event(device_.index);
    } catch (const Error&) {  // (a destructor: the call keeps its host figures only)
      cuda::release_event(static_cast<cuda::EventHandle>(start_));
      start_ = nullptr;
    }
  }
  std::lock_guard<std::mutex> lock(p.mu);
  OpFigures& f = p.ops[key];
  ++f.calls;
  f.host_ns += t1 - t0_ns_;
  if (start_) {
    p.pending.push_back({key, static_cast<cuda::EventHandle>(start_), stop});
    if (p.pending.size() >= 4096) p.resolve();
  }
}

BackwardPhase::BackwardPhase() : previous_(t_backward) { t_backward = true; }
BackwardPhase::~BackwardPhase() { t_backward = previous_; }

}  // namespace qkv::ops_detail
