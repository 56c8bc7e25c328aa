#include "qkv/core/parallel.h"

#include <omp.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "qkv/core/error.h"
#include "qkv/core/machine.h"
#include "qkv/core/thread_budget.h"

namespace qkv {

int num_threads() { return omp_get_max_threads(); }

// The most threads a parallel region may ask for: 4 × the machine's hardware threads. OpenMP splits
// each region evenly and waits for the slowest thread, so threads past the cores only wait (the
// suite measured 2 threads on 1 free core many times slower than 1); 4× still lets one time
// oversubscription on purpose. Past it libgomp starts a thread (and its stack) per count: a million
// ended in a SIGSEGV inside libgomp when thread creation failed (issue 43).
int max_threads() { return 4 * hardware_threads(); }

void check_thread_count(int64_t n, const char* what) {
  QKV_CHECK(n >= 1 && n <= max_threads(), what, ": ", n, " threads asked for; qkv runs 1 to ", max_threads(),
            " (4 × this machine's ", hardware_threads(), " hardware threads)");
}

void set_num_threads(int n) {
  check_thread_count(n, "set_num_threads");
  omp_set_num_threads(n);
  note_requested_threads(n);  // the count the budget between ops starts from (core/thread_budget.h)
}

void check_omp_num_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (!env || !*env) return;
  // "8" or a list per nesting level ("8,2"): each level's count within the bound
  const char* p = env;
  while (*p) {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(p, &end, 10);
    QKV_CHECK(end != p && errno == 0, "OMP_NUM_THREADS=", env, ": not a thread count (e.g. OMP_NUM_THREADS=2)");
    check_thread_count(n, detail::concat("OMP_NUM_THREADS=", env).c_str());
    p = end;
    while (*p == ' ') ++p;
    if (*p == ',') ++p;
    else QKV_CHECK(*p == 0, "OMP_NUM_THREADS=", env, ": not a thread count (e.g. OMP_NUM_THREADS=2)");
  }
}

bool in_parallel_region() { return omp_in_parallel(); }

}  // namespace qkv
