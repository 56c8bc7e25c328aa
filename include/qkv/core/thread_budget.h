// Threads that hold up on a busy machine (issue 27). OpenMP splits each operation evenly over its
// threads and waits for the slowest: when another process keeps one of two cores busy, the thread
// that shares that core runs a fraction of the time, every one of a decoding step's hundreds of
// parallel regions waits for it, and two threads take many times longer than one (measured: a
// greedy sentence 18 ms on 1 thread, 240–300 ms on 2 with a busy core; docs/BENCHMARKS.md).
//
// So decoding asks, before each batch (and every few generated tokens), how many cores are free:
//
//   others = runnable tasks on the machine (/proc/stat procs_running) − this thread and its
//            OpenMP team's running threads (/proc/self/task/<tid>/stat state R)
//   threads = clamp(cores this process may use − others, 1, threads asked for)
//
// and runs that many. A quiet machine keeps every thread; a busy core costs one thread, not the
// step. Linux only (elsewhere: the threads asked for). QKV_THREAD_BUDGET=off keeps the threads
// asked for whatever the machine is doing (fixed threads for timing experiments).
#pragma once

namespace qkv {

// How many of `requested` threads can run now without sharing a core with another task.
int threads_free_now(int requested);

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
