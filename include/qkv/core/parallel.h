// Threading: OpenMP everywhere, sharing one pool with oneDNN (also built on OpenMP), so the BLAS
// and qkv's own loops never oversubscribe the cores.
#pragma once

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>

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

// An exception may not leave an OpenMP region (libgomp calls std::terminate: a oneDNN GEMM that
// ran out of memory inside attention's region aborted `qkv train`), nor skip a worksharing loop
// that the region's other threads reach. So a region runs its bodies through run(), which keeps the
// first exception and skips every body after it, and its owner calls rethrow() after the region.
class RegionErrors {
 public:
  template <typename F>
  void run(F&& f) noexcept {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      if (!first_) first_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  void rethrow() {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::mutex m_;
  std::exception_ptr first_;
};

// Runs f(begin, end) over [0, n) split into contiguous chunks, one per thread; serial when n is
// smaller than `grain` or when already inside a parallel region. An exception from f is thrown
// here, after the region.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n < grain || num_threads() == 1 || in_parallel_region()) {
    f(int64_t{0}, n);
    return;
  }
  RegionErrors errors;
#pragma omp parallel
  {
    int nt = omp_get_num_threads();
    int t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = t * chunk, e = b + chunk < n ? b + chunk : n;
    if (b < e) errors.run([&] { f(b, e); });
  }
  errors.rethrow();
}

}  // namespace qkv
