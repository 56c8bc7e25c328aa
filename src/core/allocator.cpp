#include "qkv/core/allocator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <string>
#include <malloc.h>
#include <sys/mman.h>
#include <mutex>
#include <vector>

#include "cuda_backend.h"
#include "qkv/core/cuda.h"
#include "qkv/core/error.h"

namespace qkv {
namespace {

constexpr size_t kMinCached = size_t{1} << 20;  // blocks below 1 MiB go to malloc directly

// The size class of a block of n >= kMinCached bytes: n rounded up to a multiple of 1/8 of the
// largest power of two not above it (so at most 12.5% is wasted, and shapes that differ a little
// share a class).
size_t size_class(size_t n) {
  size_t p = size_t{1} << (63 - __builtin_clzll(n));
  size_t step = p / 8;
  return (n + step - 1) / step * step;
}

// Blocks of at least kMinCached bytes are mappings of their own: what the cache gives back returns
// to the system at once. (From glibc's heap, below its 32 MiB mmap threshold, a freed block stayed
// resident wherever a live one sat above it: a translation run's heap grew to 46 MB with 0.4 MB in
// use.) Under AddressSanitizer they stay malloc's, whose bounds it checks.
#if defined(__SANITIZE_ADDRESS__)
#define QKV_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QKV_ASAN 1
#endif
#endif
#ifdef QKV_ASAN
void* system_alloc(size_t n) { return std::aligned_alloc(64, (n + 63) / 64 * 64); }
void system_free(void* p, size_t) { std::free(p); }
void* system_resize(void* p, size_t old, size_t n) {  // (what the block held is not kept)
  void* q = system_alloc(n);
  if (q) system_free(p, old);
  return q;
}
#else
void* system_alloc(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void system_free(void* p, size_t n) { munmap(p, n); }
// The mapping p of `old` bytes as one of n (nullptr, the mapping as it was, where it cannot be): the pages
// both sizes cover stay resident as they are — no fault, no zeroing — and pages past n go back.
void* system_resize(void* p, size_t old, size_t n) {
  void* q = mremap(p, old, n, MREMAP_MAYMOVE);
  return q == MAP_FAILED ? nullptr : q;
}
#endif

// A block below kMinCached: malloc(n + 64), the pointer moved up to the next multiple of 64 and
// the distance kept in the byte before it (glibc's aligned_alloc serves every call through
// _int_memalign, splitting off and freeing the misaligned rest).
void* small_alloc(size_t n) {
  auto* raw = static_cast<unsigned char*>(std::malloc(n + 64));
  if (!raw) return nullptr;
  const size_t shift = 64 - reinterpret_cast<uintptr_t>(raw) % 64;  // 1 … 64 (16 … 64: malloc aligns to 16)
  unsigned char* p = raw + shift;
  p[-1] = static_cast<unsigned char>(shift);
  return p;
}
void small_free(void* p) {
  auto* q = static_cast<unsigned char*>(p);
  std::free(q - q[-1]);
}

// Small blocks kept per thread (a decoding step makes and drops dozens of tensors of the same few
// sizes: 13 % of a greedy int8 run at batch 1 went to malloc's slow paths — _int_malloc,
// _int_free, malloc_consolidate — with aligned_alloc). Sizes are rounded to classes: multiples of
// 64 bytes up to 4 KiB, then 1/8 of a power of two (as the large blocks' classes); each thread
// keeps at most kSmallPerClass free blocks of a class and kSmallPerThread bytes in all, and gives
// them back to malloc when it ends. A block freed on another thread joins that thread's cache.
// Blocks above kSmallMax and below kMinCached are malloc's alone, at their exact size.
constexpr size_t kSmallLinear = 4096, kSmallMax = size_t{512} << 10, kSmallPerClass = 32,
                 kSmallPerThread = size_t{8} << 20;

size_t small_class(size_t n) {
  if (n > kSmallMax) return n;
  return n <= kSmallLinear ? (n + 63) / 64 * 64 : size_class(n);  // (≤ kSmallMax)
}
// The index of a class: 0 … 64 for the multiples of 64 (0 included), then 8 a power of two.
size_t small_index(size_t c) {
  if (c <= kSmallLinear) return c / 64;
  const int log2 = 63 - __builtin_clzll(c - 1);  // c in (2^log2, 2^(log2+1)]
  return 65 + static_cast<size_t>(log2 - 12) * 8 + ((c - 1) >> (log2 - 3)) % 8;
}
constexpr size_t kSmallClasses = 65 + 7 * 8;  // up to kSmallMax, 512 KiB

// (trivially destructible, so still readable after the thread's other thread_locals are gone:
// a Storage freed during the program's static destruction finds the cache gone, not destroyed)
thread_local bool small_cache_gone = false;

struct SmallCache {
  std::vector<void*> free[kSmallClasses];
  size_t bytes = 0;
  ~SmallCache() {
    small_cache_gone = true;
    for (auto& v : free)
      for (void* p : v) small_free(p);
  }
  void* take(size_t c) {
    auto& v = free[small_index(c)];
    if (v.empty()) return nullptr;
    void* p = v.back();
    v.pop_back();
    bytes -= c;
    return p;
  }
  bool keep(void* p, size_t c) {
    auto& v = free[small_index(c)];
    if (v.size() >= kSmallPerClass || bytes + c > kSmallPerThread) return false;
    v.push_back(p);
    bytes += c;
    return true;
  }
};
// This thread's cache; null once the thread is ending (its blocks then go straight to malloc).
SmallCache* small_cache() {
  if (small_cache_gone) return nullptr;
  thread_local SmallCache c;
  return &c;
}

// UncachedFrees scopes open on this thread.
thread_local int t_uncached_frees = 0;

class BlockCache {
 public:
  BlockCache() {
    const char* env = std::getenv("QKV_CACHING_ALLOCATOR");
    enabled_ = !(env && env[0] == '0');
    // Keep malloc's blocks (all below kMinCached) in the heap rather than in fresh mmaps, and do
    // not hand freed heap memory back to the kernel eagerly.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  }

  void* alloc(size_t n, size_t* capacity) {
    if (n < kMinCached) {
      if (!enabled_) {
        *capacity = n;
        return retrying(small_alloc, n);
      }
      const size_t c = small_class(n);
      *capacity = c;
      if (SmallCache* cache = c <= kSmallMax ? small_cache() : nullptr)
        if (void* p = cache->take(c)) return p;
      return retrying(small_alloc, c);
    }
    if (!enabled_) {
      *capacity = n;
      return retrying(system_alloc, n);
    }
    const size_t c = size_class(n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Best fit: the smallest cached block of at least c bytes, if it wastes at most half of c.
      // Batches of varying shape (translation batches by token count) ask for neighbouring
      // classes; an exact match alone missed often enough that the kernel's page zeroing of
      // fresh blocks took 4.4% of a Tatoeba training step.
      auto it = free_.lower_bound(c);
      if (it != free_.end() && it->first <= c + c / 2) {
        const size_t got = it->first;
        void* p = it->second->second;
        recent_.erase(it->second);
        free_.erase(it);
        cached_ -= got;
        note_live(got);
        *capacity = got;
        return p;
      }
      if (limit_.miss_evicts && !recent_.empty()) {
        // The least recently freed block becomes this one (its resident pages reused, not faulted in
        // afresh), and the next oldest go back until as many bytes as c have left the cache.
        const Block oldest = take_oldest_locked();
        trim_locked(cached_ + oldest.first > c ? cached_ + oldest.first - c : 0);
        if (void* p = system_resize(oldest.second, oldest.first, c)) {
          note_live(c);
          *capacity = c;
          return p;
        }
        system_free(oldest.second, oldest.first);  // (it could not be resized: it goes back as it is)
      }
      note_live(c);
    }
    *capacity = c;
    void* p = retrying(system_alloc, c);
    if (!p) {
      std::lock_guard<std::mutex> lock(mu_);
      live_ -= c;
    }
    return p;
  }

  void free(void* p, size_t capacity) {
    if (!p) return;
    if (capacity < kMinCached) {
      SmallCache* cache = enabled_ && capacity <= kSmallMax ? small_cache() : nullptr;
      if (!cache || !cache->keep(p, capacity)) small_free(p);
      return;
    }
    if (!enabled_) {
      system_free(p, capacity);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    live_ -= capacity;
    const size_t limit = limit_locked();
    if (capacity > limit || t_uncached_frees > 0) {
      system_free(p, capacity);
      return;
    }
    recent_.emplace_front(capacity, p);
    free_.emplace(capacity, recent_.begin());
    cached_ += capacity;
    trim_locked(limit);
  }

  void set_limit(CacheLimit limit) {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = limit;
    trim_locked(limit_locked());
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
  void* retrying(void* (*alloc)(size_t), size_t n) {
    void* p = alloc(n);
    if (p) return p;
    empty();
    return alloc(n);
  }

  void note_live(size_t c) {
    live_ += c;
    if (live_ > high_water_) high_water_ = live_;
  }

  size_t limit_locked() const {
    return std::max(limit_.at_least, static_cast<size_t>(limit_.peak_fraction * static_cast<double>(high_water_)));
  }

  // Gives the least recently freed blocks back until the cache holds at most `limit` bytes: the
  // blocks of the shapes a workload still asks for stay (the newest), those of shapes it has left
  // behind go (a translation batch's longer caches, an earlier batch size).
  void trim_locked(size_t limit) {
    while (cached_ > limit) {
      const Block oldest = take_oldest_locked();
      system_free(oldest.second, oldest.first);
    }
  }

  // The least recently freed block, out of the cache (which must hold one).
  using Block = std::pair<size_t, void*>;  // capacity, address
  Block take_oldest_locked() {
    const auto oldest = std::prev(recent_.end());
    auto it = free_.find(oldest->first);
    while (it->second != oldest) ++it;
    free_.erase(it);
    const Block b = *oldest;
    cached_ -= b.first;
    recent_.pop_back();
    return b;
  }

  void release_locked() { trim_locked(0); }

  bool enabled_ = true;
  std::mutex mu_;
  CacheLimit limit_;
  std::list<Block> recent_;                                   // the free blocks, last freed first
  std::multimap<size_t, std::list<Block>::iterator> free_;    // capacity -> its entry in recent_
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
void set_cache_limit(CacheLimit limit) {
  QKV_CHECK(std::isfinite(limit.peak_fraction) && limit.peak_fraction >= 0.0,
            "set_cache_limit: peak_fraction must be a finite number ≥ 0, got ", limit.peak_fraction);
  cache().set_limit(limit);
}

// Decoding's blocks: a quarter of the peak holds the blocks a step frees and asks for again (the
// vocabulary's [rows, V] scores above all). Measured on int8 beam 4 × 32, 1,000 sentences (Intel
// Xeon with AMX, docs/BENCHMARKS.md): a quarter 97.3 MB peak RSS; 0.15 96.3 MB at the same speed;
// 0.12 93.6 MB and 0.1 93.7 MB, ~10% slower (the scores' block faulted in afresh every step). The
// blocks of KV caches a batch outgrew leave at once instead (UncachedFrees in nn's KVCache): with
// them cached, 99.6 MB. And a block the cache cannot serve takes the least recently freed one's place
// (miss_evicts: that mapping resized by mremap, its pages kept, and older ones sent back until as many
// bytes as it asks have left), so a batch of a new shape takes the earlier batches' memory rather than
// mapping its own beside it: the int8 file, beam 4 × 32, 1,000 Tatoeba sentences on a Zen 3, medians
// of 5 alternated runs, peak RSS 88.1 → 81.1 MB at 1 thread (90.6 → 82.5 at 2; no cache at all: 75.0),
// 5.22 → 5.04 s (3.00 → 3.06 at 2 threads: the same within this host's noise); sending the blocks back
// and mapping afresh instead saved the same bytes at 3.5–4% more time (the pages faulted in again).
CacheLimit decoding_cache_limit() { return {0, 0.25, true}; }
void empty_cache() { cache().empty(); }

UncachedFrees::UncachedFrees() { ++t_uncached_frees; }
UncachedFrees::~UncachedFrees() { --t_uncached_frees; }

namespace {
class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t n, size_t* capacity) override { return alloc_block(n, capacity); }
  void deallocate(void* p, size_t capacity) override { free_block(p, capacity); }
};
}  // namespace

Allocator& allocator_for(Device d) {
  static HostAllocator host;
  if (d.is_cpu()) return host;
  return cuda_detail::allocator(d.index);  // an Error naming the device in a build without CUDA
}

// ---- devices -----------------------------------------------------------------------------------

Device Device::parse(std::string_view name) {
  if (name == "cpu") return cpu();
  if (name == "cuda") return cuda(0);
  if (name.starts_with("cuda:") && name.size() > 5 && name.size() <= 8 &&
      name.substr(5).find_first_not_of("0123456789") == std::string_view::npos)
    return cuda(std::stoi(std::string(name.substr(5))));
  throw Error(detail::concat("unknown device \"", name, "\" (expected cpu, cuda or cuda:N)"));
}

std::string Device::str() const {
  return type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

bool device_available(Device d) { return d.is_cpu() || d.index < cuda::device_count(); }

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n) {
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    if (n) std::memcpy(dst, src, n);
    return;
  }
  cuda_detail::copy(dst, dst_device, src, src_device, n);  // an Error naming the devices without CUDA
}

}  // namespace qkv
