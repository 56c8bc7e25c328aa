// The host memory allocator behind every Storage: a caching allocator for large blocks.
//
// Training frees and re-allocates the same large activation buffers every step. glibc serves
// blocks above 32 MiB (its largest mmap threshold) with fresh mmaps, so without a cache every step
// page-faults and zeroes them again: 15% of a 6-layer/384 GPT step went to the kernel's
// clear_page. Blocks of at least 1 MiB are therefore kept on free (their sizes rounded up to
// classes 1/8 of a power of two apart) and handed out again to the next request they fit best,
// if they are at most 1.5× its class — the idea of PyTorch's CUDA caching allocator, on the
// host. Smaller blocks come from malloc (moved up to 64-byte alignment: glibc's aligned_alloc
// takes its slow paths on every call), and up to 512 KiB each thread keeps freed ones by size
// class (64-byte multiples, then 1/8 of a power of two; ≤ 32 a class, ≤ 8 MiB a thread) — a
// decoding step makes and drops dozens of tensors of the same few sizes.
//
// The cache holds at most max(256 MiB, twice the most bytes ever live at once) by default (training:
// with only once the peak, translation batches of varying shape filled the cache with blocks of the
// other shapes, and the 80 MB logits gradient was mapped and zeroed afresh every step: 4% of a
// Tatoeba step). Beyond the limit the least recently freed blocks go back to the system; large
// blocks are mappings of their own, so what goes back leaves the resident set. Decoding sets a
// tighter limit (set_cache_limit: a quarter of its peak), where the cache's blocks were half of a
// translation run's resident memory, and there a block the cache cannot serve first sends as many
// cached bytes back (CacheLimit::miss_evicts), so the cache never adds to the resident set's peak. empty_cache()
// returns everything (torch.cuda.empty_cache's counterpart), and QKV_CACHING_ALLOCATOR=0 in the environment turns the
// cache off.
//
// Every device has one Allocator (allocator_for): the host's is this cache; a device backend
// brings its own (a CUDA build would cache cudaMalloc blocks the same way).
#pragma once

#include <cstddef>
#include <cstdint>

#include "qkv/core/device.h"

namespace qkv {

// Memory of one device for Storages.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // A 64-byte aligned, uninitialized block of at least n bytes (nullptr when the device is out of
  // memory); *capacity receives its real size, which deallocate must be given back.
  virtual void* allocate(size_t n, size_t* capacity) = 0;
  virtual void deallocate(void* p, size_t capacity) = 0;
};

// The allocator of `d`; a device this build has no backend for is a qkv::Error naming it.
Allocator& allocator_for(Device d);

// The host allocator's blocks (what allocator_for(Device::cpu()) hands out).
void* alloc_block(size_t n, size_t* capacity);
void free_block(void* p, size_t capacity);

int64_t cached_bytes();  // host bytes held by the cache, not by any Storage

// The host cache's bound: max(at_least, peak_fraction × the most bytes of large blocks ever live).
struct CacheLimit {
  size_t at_least = size_t{256} << 20;
  double peak_fraction = 2.0;
  // A block the cache cannot serve takes the least recently freed cached block's place (its mapping
  // resized: the pages it keeps are not faulted in again), and the next oldest go back to the system
  // until as many bytes as it asks have left the cache: the cache then never raises the resident set
  // past the most bytes ever live (decoding's), where without it a new shape maps fresh memory beside
  // cached blocks of the shapes before.
  bool miss_evicts = false;
};
// Training's default; decoding_cache_limit() for translation, generation and serving. A
// peak_fraction that is negative or not finite is a qkv::Error. (Python: qkv.set_cache_limit.)
void set_cache_limit(CacheLimit limit);
CacheLimit decoding_cache_limit();  // a quarter of the peak, a miss evicting (src/core/allocator.cpp says why)
void empty_cache();

// While one lives on this thread, large host blocks that are freed go straight back to the system
// instead of into the cache: blocks of a size the workload has left behind for good (the KV caches
// a decoding batch outgrew), which the cache would otherwise hold — resident — at the very moment
// memory peaks, evicting the blocks that the next steps do ask for again.
class UncachedFrees {
 public:
  UncachedFrees();
  ~UncachedFrees();
  UncachedFrees(const UncachedFrees&) = delete;
  UncachedFrees& operator=(const UncachedFrees&) = delete;
};

}  // namespace qkv
