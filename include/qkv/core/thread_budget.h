// Threads that hold up on a busy machine (issue 27). OpenMP splits each operation evenly over its
// threads and waits for the slowest: when another process keeps one of two cores busy, the thread
// that shares that core runs a fraction of the time, every one of a decoding step's hundreds of
// parallel regions waits for it, and two threads take many times longer than one (measured: a
// greedy sentence 18 ms on 1 thread, 240–300 ms on 2 with a busy core; docs/BENCHMARKS.md).
//
// So decoding asks, before each batch (and every few generated tokens), and the trainer before each
// step, how many cores are free:
//
//   look   = runnable tasks on the machine (/proc/loadavg's R of R/T, the kernel's nr_running) −
//            this thread and its OpenMP team's running threads (/proc/self/task/<tid>/stat state R)
//   ticks  = cores the machine kept busy over the last 50–100 ms (/proc/stat's cpu line) − those
//            this thread and its team ran (their utime + stime)
//   others = min(the fewest of up to 3 looks 50 µs apart, ⌊ticks + 0.8⌋)
//   threads = clamp(cores this process may use − others, 1, threads asked for)
//
// and runs that many; a count below the threads asked for holds for 50 ms on the asking thread (the
// ticks' window: a busy task stays; its looks cost ~350 µs, a quiet ask's ~30). A quiet machine
// keeps every thread; a busy core costs one thread, not the step; a task that runs for an instant (a
// kernel thread writing this process's files out) is neither in every look nor in the ticks, and
// costs nothing. Linux only (elsewhere: the threads asked
// for). QKV_THREAD_BUDGET=off keeps the threads asked for whatever the machine is doing (fixed
// threads for timing experiments).
//
// Ops called one by one — from C++, or from Python as a PyTorch user writes a model — run outside
// any such scope; for them each CPU dispatch asks between ops, at most once per 50 ms per calling
// thread (a clock read otherwise): budget_between_ops() sets the thread's OpenMP count to
// threads_free_now(the count the user asked for) and keeps that count as the one asked for.
#pragma once

namespace qkv {

// How many of `requested` threads can run now without sharing a core with another task.
int threads_free_now(int requested);

// Fixed threads: the budget off for the whole process (the threads asked for, whatever the machine
// is doing), so that a training run repeats bit for bit at 2 threads as at 1 — sums split over another
// number of threads round differently. Off by default; QKV_THREAD_BUDGET=off sets it at start. Returns
// the setting before. (A test that compares two runs' bits takes it for its scope: FixedThreads.)
bool set_fixed_threads(bool fixed);
bool fixed_threads();

// The threads the user asked for on this thread (set_num_threads, OMP_NUM_THREADS): what a scope or
// the budget between ops starts from, and what torch.get_num_threads would say — num_threads() is
// what the next parallel region runs on, which the budget may have lowered.
int requested_threads();
// set_num_threads(n) on this thread: n is the count asked for from now on.
void note_requested_threads(int n);
// The budget between ops: called by every CPU dispatch (ops/dispatch.h); outside any ThreadBudget
// scope, every 50 ms, the thread's OpenMP count set to the threads free now of those asked for.
void budget_between_ops();

class FixedThreads {
 public:
  FixedThreads() : before_(set_fixed_threads(true)) {}
  ~FixedThreads() { set_fixed_threads(before_); }
  FixedThreads(const FixedThreads&) = delete;
  FixedThreads& operator=(const FixedThreads&) = delete;

 private:
  bool before_;
};

// Sets this thread's OpenMP thread count to threads_free_now(its current count) for a scope and
// puts the count back after.
class ThreadBudget {
 public:
  ThreadBudget();
  ~ThreadBudget();
  ThreadBudget(const ThreadBudget&) = delete;
  ThreadBudget& operator=(const ThreadBudget&) = delete;
  int threads() const { return threads_; }

 private:
  int requested_, threads_;
};

}  // namespace qkv
