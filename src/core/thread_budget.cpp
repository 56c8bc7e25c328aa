#include "qkv/core/thread_budget.h"

#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace qkv {

namespace {

// Tasks runnable right now, this one included (−1: unknown): the R of /proc/loadavg's "1.00 0.50
// 0.25 R/T last-pid" — the kernel's nr_running(), as /proc/stat's procs_running, at half the cost
// of that file (7.8 against 14.5 µs a read on a 2-core VM).
int procs_running() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return -1;
  int n = -1;
  if (std::fscanf(f, "%*s %*s %*s %d/", &n) != 1) n = -1;
  std::fclose(f);
  return n;
}

// Thread `tid`'s stat line (/proc/self/task/<tid>/stat, "tid (name) S ppid …") read into buf, and
// where its fields after the name start (the name may hold spaces and ')'): the state, then the rest;
// null when it cannot be read.
const char* task_stat_fields(long tid, char (&buf)[1024]) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  FILE* f = std::fopen(path, "r");
  if (!f) return nullptr;
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');
  return p && p[1] == ' ' ? p + 2 : nullptr;
}

// Whether thread `tid` of this process is running or runnable (state R in its stat line).
bool running(long tid) {
  char buf[1024];
  const char* fields = task_stat_fields(tid, buf);
  return fields && fields[0] == 'R';
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

// Clock ticks (USER_HZ) the machine's CPUs spent busy: user, nice, system, irq, softirq (guest time
// is inside user) of /proc/stat's "cpu" line; −1 when it cannot be read.
long long machine_ticks() {
  long long t = -1;
  if (FILE* f = std::fopen("/proc/stat", "r")) {
    long long user, nice, system, idle, iowait, irq, softirq;
    if (std::fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld", &user, &nice, &system, &idle, &iowait, &irq, &softirq) == 7)
      t = user + nice + system + irq + softirq;
    std::fclose(f);
  }
  return t;
}

// Clock ticks thread `tid` of this process has run, in its lifetime (utime + stime); −1 when unknown.
long long thread_ticks(long tid) {
  char buf[1024];
  const char* fields = task_stat_fields(tid, buf);
  long long utime, stime;  // fields 14 and 15 of the line: the 11th and 12th after the name
  if (!fields || std::sscanf(fields, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &utime, &stime) != 2)
    return -1;
  return utime + stime;
}

// The cores the rest of the machine — all but this thread and its OpenMP team, `tids` — kept busy, on
// average, over the last 50–100 ms of this thread's asks (−1: not known yet). Two snapshots, the
// newer at most 50 ms old: the window runs from the older, so asks a few milliseconds apart (small
// training steps, decoding batches) still see a window long enough for the clock ticks (5 ticks of a
// core in 50 ms at USER_HZ 100). A team's first window runs from when qkv was loaded, with its
// threads' lifetime ticks as theirs.
struct Snapshot {
  long long machine = -1, team = 0;
  std::chrono::steady_clock::time_point at;
};
const Snapshot g_at_load{machine_ticks(), 0, std::chrono::steady_clock::now()};

// Only `wanted` when the looks counted others; otherwise only when a snapshot is due (the newer is
// 50 ms old), so that the window stays recent for the next ask that wants it without a quiet ask
// reading the ticks each time.
double others_recently(const std::vector<long>& tids, bool wanted) {
  thread_local std::vector<long> team_of;  // the team the snapshots count
  thread_local Snapshot older, newer;
  const auto at = std::chrono::steady_clock::now();
  if (!wanted && team_of == tids && std::chrono::duration<double>(at - newer.at).count() < 0.05) return -1;
  Snapshot now{machine_ticks(), 0, at};
  for (long tid : tids) {
    const long long t = thread_ticks(tid);
    if (t < 0) return -1;
    now.team += t;
  }
  if (now.machine < 0 || g_at_load.machine < 0) return -1;
  if (team_of != tids) team_of = tids, older = g_at_load, newer = now;
  auto seconds = [](const Snapshot& from, const Snapshot& to) {
    return std::chrono::duration<double>(to.at - from.at).count();
  };
  if (seconds(newer, now) >= 0.05) older = newer, newer = now;
  const double window = seconds(older, now);
  if (window < 0.05) return -1;
  static const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  return std::max(0.0, static_cast<double>((now.machine - older.machine) - (now.team - older.team)) / (hz * window));
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::atomic<bool> g_fixed{[] {  // set_fixed_threads; QKV_THREAD_BUDGET=off (or 0) at start
  const char* e = std::getenv("QKV_THREAD_BUDGET");
  return e && (std::strcmp(e, "off") == 0 || std::strcmp(e, "0") == 0);
}()};

}  // namespace

bool set_fixed_threads(bool fixed) { return g_fixed.exchange(fixed); }
bool fixed_threads() { return g_fixed.load(); }

int threads_free_now(int requested) {
  if (fixed_threads() || requested <= 1 || omp_in_parallel()) return std::max(1, requested);
  // A busy core's answer, the ticks agreeing, holds for their window, 50 ms: the three looks that give
  // it, 50 µs of sleep apart, cost ~350 µs beside a busy core — 9 % of a greedy sentence decoded batch
  // by batch, where two threads then ran behind one (docs/BENCHMARKS.md, 2026-12-06) —, and a task
  // that keeps a core busy is still there 50 ms on. A quiet answer is never held: a task that starts
  // is counted at the next ask.
  thread_local struct {
    int requested = 0, threads = 0;
    std::chrono::steady_clock::time_point until{};
  } held;
  const auto asked_at = std::chrono::steady_clock::now();
  if (held.requested == requested && asked_at < held.until) return held.threads;
  // The team first (its first use starts its threads, which then spin a while), then the count
  // between two looks at the team: a worker counts as ours only if it was runnable in both, so one
  // that woke or fell asleep around the count leaves others counted, never hidden.
  const std::vector<long>& tids = team(requested);
  const long self = syscall(SYS_gettid);
  std::vector<char> before(tids.size());
  auto others_now = [&]() -> int {
    for (size_t i = 0; i < tids.size(); ++i) before[i] = tids[i] != self && running(tids[i]);
    const int all = procs_running();
    if (all < 0) return -1;
    int own = 1;  // this thread, running the count
    for (size_t i = 0; i < tids.size(); ++i)
      if (before[i] && running(tids[i])) ++own;
    return std::max(0, all - own);
  };
  // A task that keeps a core busy is runnable at every look; the machine's own short tasks (kernel
  // workers, a shell's fork) are runnable at one look in 8–15 on a quiet 2-core machine (measured:
  // 5,000 reads of procs_running), and at two looks 50 µs apart in under 1 in 200. So others are
  // the fewest of up to kLooks looks that far apart — a quiet machine's first look is 0 and ends it —
  // and a passing task no longer puts a whole training step or decoding batch on fewer threads.
  constexpr int kLooks = 3;
  int others = others_now();
  for (int look = 1; look < kLooks && others > 0; ++look) {
    usleep(50);
    const int again = others_now();
    if (again >= 0) others = std::min(others, again);
  }
  if (others < 0) return requested;
  // And a look is an instant: the machine's kernel threads that write this process's files out
  // (a trainer's metrics each step: jbd2, kworkers) are runnable at all three looks now and then,
  // though they use a few hundredths of a core. So when the clock ticks of the last 50–100 ms say the
  // rest of the machine kept fewer cores busy than the looks count, on average, the ticks win (a task
  // that has just started and not yet shown in them costs its thread from the next ask on).
  const double window = others_recently(tids, others > 0);
  if (window >= 0) others = std::min(others, static_cast<int>(window + 0.8));  // a fifth of a core counts
  const int threads = std::clamp(usable_cores() - others, 1, requested);
  // (held only where the ticks agree with the looks: in a team's first 50 ms they are not known yet,
  // and a busy answer that three looks gave alone may be a passing task's)
  const bool confirmed = window >= 0 && threads < requested;
  held = {requested, threads, confirmed ? asked_at + std::chrono::milliseconds(50) : asked_at};
  return threads;
}

namespace {

// The budget between ops, per calling thread: the count the user asked for, the count last set (the
// OpenMP count differs from it only when someone else set it: that count is then the one asked
// for), the ThreadBudget scopes open, and when to look again.
struct BetweenOps {
  int requested = 0, applied = 0, scopes = 0;  // 0: not looked at yet
  std::chrono::steady_clock::time_point next{};
};
thread_local BetweenOps t_between;

// The count asked for on this thread: the user's, or the OpenMP count if someone set it since.
int asked_for(const BetweenOps& b) {
  const int current = omp_get_max_threads();
  return b.requested > 0 && current == b.applied ? b.requested : current;
}

}  // namespace

int requested_threads() { return t_between.scopes > 0 ? omp_get_max_threads() : asked_for(t_between); }

void note_requested_threads(int n) { t_between.requested = t_between.applied = n; }

void budget_between_ops() {
  BetweenOps& b = t_between;
  if (b.scopes > 0) return;  // a scope's count holds for its whole step or batch
  const auto now = std::chrono::steady_clock::now();
  if (now < b.next) return;
  b.next = now + std::chrono::milliseconds(50);
  if (omp_in_parallel()) return;
  b.requested = asked_for(b);
  b.applied = threads_free_now(b.requested);  // the count asked for when the budget is off (fixed)
  if (b.applied != omp_get_max_threads()) omp_set_num_threads(b.applied);
}

// A scope starts from the count the user asked for (not one the budget between ops lowered) and puts
// that count back; the budget between ops looks again 50 ms after the outermost scope ends.
ThreadBudget::ThreadBudget() : requested_(requested_threads()), threads_(threads_free_now(requested_)) {
  if (t_between.scopes++ == 0) note_requested_threads(requested_);
  if (threads_ != omp_get_max_threads()) omp_set_num_threads(threads_);
}

ThreadBudget::~ThreadBudget() {
  if (requested_ != omp_get_max_threads()) omp_set_num_threads(requested_);
  if (--t_between.scopes == 0) t_between.next = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
}

}  // namespace qkv
