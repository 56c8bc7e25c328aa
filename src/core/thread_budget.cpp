#include "qkv/core/thread_budget.h"

#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace qkv {

namespace {

// "procs_running N" of /proc/stat: tasks runnable right now, this one included (−1: unknown).
int procs_running() {
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return -1;
  char line[256];
  int n = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "procs_running ", 14) == 0) {
      n = std::atoi(line + 14);
      break;
    }
  std::fclose(f);
  return n;
}

// Whether thread `tid` of this process is running or runnable (state R in its stat line).
bool running(long tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // "tid (name) S …": the name may hold spaces and ')'
  return p && p[1] == ' ' && p[2] == 'R';
}

// The thread ids of this thread's OpenMP team of `n` threads (libgomp keeps one team per thread
// that starts parallel regions, and reuses it): found once per team size.
const std::vector<long>& team(int n) {
  thread_local std::vector<long> tids;
  thread_local int size = 0;
  if (size != n) {
    tids.assign(static_cast<size_t>(n), 0);
    long* out = tids.data();  // (not `tids` inside the region: each thread has its own thread_local)
#pragma omp parallel num_threads(n)
    out[omp_get_thread_num()] = syscall(SYS_gettid);
    size = n;
  }
  return tids;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

int threads_free_now(int requested) {
  static const bool off = [] {
    const char* e = std::getenv("QKV_THREAD_BUDGET");
    return e && (std::strcmp(e, "off") == 0 || std::strcmp(e, "0") == 0);
  }();
  if (off || requested <= 1 || omp_in_parallel()) return std::max(1, requested);
  // The team first (its first use starts its threads, which then spin a while), then the count
  // between two looks at the team: a worker counts as ours only if it was runnable in both, so
  // one that woke or fell asleep around the count leaves others counted, never hidden.
  const std::vector<long>& tids = team(requested);
  const long self = syscall(SYS_gettid);
  std::vector<char> before(tids.size());
  for (size_t i = 0; i < tids.size(); ++i) before[i] = tids[i] != self && running(tids[i]);
  const int all = procs_running();
  if (all < 0) return requested;
  int own = 1;  // this thread, running the count
  for (size_t i = 0; i < tids.size(); ++i)
    if (before[i] && running(tids[i])) ++own;
  const int others = std::max(0, all - own);
  return std::clamp(usable_cores() - others, 1, requested);
}

ThreadBudget::ThreadBudget() : requested_(omp_get_max_threads()), threads_(threads_free_now(requested_)) {
  if (threads_ != requested_) omp_set_num_threads(threads_);
}

ThreadBudget::~ThreadBudget() {
  if (threads_ != requested_) omp_set_num_threads(requested_);
}

}  // namespace qkv
