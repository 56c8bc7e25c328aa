#include "qkv/core/allocator.h"

#include <cstdlib>
#include <malloc.h>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace qkv {
namespace {

constexpr size_t kMinCached = size_t{1} << 20;  // blocks below 1 MiB go to malloc directly
constexpr size_t kMinCacheLimit = size_t{256} << 20;

// The size class of a block of n >= kMinCached bytes: n rounded up to a multiple of 1/8 of the
// largest power of two not above it (so at most 12.5% is wasted, and shapes that differ a little
// share a class).
size_t size_class(size_t n) {
  size_t p = size_t{1} << (63 - __builtin_clzll(n));
  size_t step = p / 8;
  return (n + step - 1) / step * step;
}

void* system_alloc(size_t n) { return std::aligned_alloc(64, (n + 63) / 64 * 64); }

class BlockCache {
 public:
  BlockCache() {
    const char* env = std::getenv("QKV_CACHING_ALLOCATOR");
    enabled_ = !(env && env[0] == '0');
    // Keep blocks below 32 MiB (glibc's largest allowed threshold) in the heap rather than in
    // fresh mmaps, and do not hand freed heap memory back to the kernel eagerly.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  }

  void* alloc(size_t n, size_t* capacity) {
    if (!enabled_ || n < kMinCached) {
      *capacity = n;
      return retrying(n);
    }
    const size_t c = size_class(n);
    *capacity = c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_ += c;
      if (live_ > high_water_) high_water_ = live_;
      auto it = free_.find(c);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= c;
        return p;
      }
    }
    void* p = retrying(c);
    if (!p) {
      std::lock_guard<std::mutex> lock(mu_);
      live_ -= c;
    }
    return p;
  }

  void free(void* p, size_t capacity) {
    if (!p) return;
    if (!enabled_ || capacity < kMinCached) {
      std::free(p);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    live_ -= capacity;
    const size_t limit = high_water_ > kMinCacheLimit ? high_water_ : kMinCacheLimit;
    if (cached_ + capacity > limit) {
      std::free(p);
      return;
    }
    free_[capacity].push_back(p);
    cached_ += capacity;
  }

  int64_t cached() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(cached_);
  }

  void empty() {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked();
  }

 private:
  // A failed allocation first returns the cache to the system, then tries once more.
  void* retrying(size_t n) {
    void* p = system_alloc(n);
    if (p) return p;
    empty();
    return system_alloc(n);
  }

  void release_locked() {
    for (auto& [c, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

  bool enabled_ = true;
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  size_t cached_ = 0, live_ = 0, high_water_ = 0;        // bytes, of cached-size blocks only
};

// Never destroyed: Storages freed during static destruction still find it.
BlockCache& cache() {
  static BlockCache* c = new BlockCache;
  return *c;
}

}  // namespace

void* alloc_block(size_t n, size_t* capacity) { return cache().alloc(n, capacity); }
void free_block(void* p, size_t capacity) { cache().free(p, capacity); }
int64_t cached_bytes() { return cache().cached(); }
void empty_cache() { cache().empty(); }

}  // namespace qkv
