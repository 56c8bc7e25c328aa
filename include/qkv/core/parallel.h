// Threading: OpenMP everywhere, sharing one pool with oneDNN (also built on OpenMP), so the BLAS
// and qkv's own loops never oversubscribe the cores.
#pragma once

#include <omp.h>

#include <cstdint>

namespace qkv {

int num_threads();              // threads a parallel region will use
int max_threads();              // the most a count may ask for: 4 × the machine's hardware threads
// Throws qkv::Error "<what>: N threads asked for; qkv runs 1 to M …" unless 1 ≤ n ≤ max_threads().
void check_thread_count(int64_t n, const char* what);
void set_num_threads(int n);    // torch.set_num_threads's counterpart (n checked as above)
// OMP_NUM_THREADS, which libgomp obeys at a process's first parallel region, checked the same way
// (each level of a list): the command line and the Python module call it before any region runs.
void check_omp_num_threads();
bool in_parallel_region();

// Runs f(begin, end) over [0, n) split into contiguous chunks, one per thread; serial when n is
// smaller than `grain` or when already inside a parallel region.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n < grain || num_threads() == 1 || in_parallel_region()) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    int nt = omp_get_num_threads();
    int t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = t * chunk, e = b + chunk < n ? b + chunk : n;
    if (b < e) f(b, e);
  }
}

}  // namespace qkv
