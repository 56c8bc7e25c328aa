#include "qkv/core/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {
namespace {

TEST(Allocator, SmallBlocksAreAlignedAndKeptPerThreadByClass) {
  size_t cap = 0;
  void* p = alloc_block(1000, &cap);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(cap, 1024u);  // its class, a multiple of 64
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  free_block(p, cap);
  // every size below the large blocks' (malloc's blocks moved up to 64 bytes, kept per thread by
  // class up to 512 KiB): aligned, at least as large as asked, writable to the last byte, given
  // back in any order, and a freed block of a class handed out again for the same class (the
  // fuzz build's AddressSanitizer checks the bounds)
  std::vector<std::pair<void*, size_t>> held;
  for (size_t n = 0; n < (size_t{1} << 20); n = n * 3 / 2 + 7) {
    void* q = alloc_block(n, &cap);
    ASSERT_NE(q, nullptr) << n;
    EXPECT_GE(cap, n);
    EXPECT_LE(cap, n <= 4096 ? n + 63 : n + n / 8) << n;
    EXPECT_LT(cap, size_t{1} << 20) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u) << n;
    std::fill_n(static_cast<unsigned char*>(q), n, static_cast<unsigned char>(n));
    held.emplace_back(q, cap);
  }
  for (size_t i = 0; i < held.size(); i += 2) free_block(held[i].first, held[i].second);
  for (size_t i = 1; i < held.size(); i += 2) free_block(held[i].first, held[i].second);
  void* a = alloc_block(1000, &cap);
  free_block(a, cap);
  size_t cap2 = 0;
  EXPECT_EQ(alloc_block(990, &cap2), a) << "the same class (1,024 bytes) gets the freed block back";
  EXPECT_EQ(cap2, cap);
  free_block(a, cap2);
  for (size_t n : {size_t{600} << 10, (size_t{1} << 20) - 1}) {  // past the kept classes: exact
    void* b = alloc_block(n, &cap);
    EXPECT_EQ(cap, n);
    free_block(b, cap);
  }
}

TEST(Allocator, LargeBlocksAreReusedByBestFit) {
  empty_cache();
  const size_t n = (size_t{4} << 20) + 123;  // a little over 4 MiB: class 4.5 MiB
  size_t cap = 0;
  void* p = alloc_block(n, &cap);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(cap, size_t{9} << 19);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  free_block(p, cap);
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(cap));

  // A request of the same class gets the same block back, and the cache is empty again.
  size_t cap2 = 0;
  void* q = alloc_block((size_t{9} << 19) - 5, &cap2);
  EXPECT_EQ(q, p);
  EXPECT_EQ(cap2, cap);
  EXPECT_EQ(cached_bytes(), 0);

  // A larger class does not take it.
  free_block(q, cap2);
  size_t cap3 = 0;
  void* r = alloc_block(size_t{5} << 20, &cap3);
  EXPECT_NE(r, q);
  EXPECT_EQ(cap3, size_t{5} << 20);
  free_block(r, cap3);
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(cap + cap3));

  // A smaller class takes the smallest cached block that fits (4.5 MiB, not 5), and is told its
  // real capacity, which is what it gives back.
  size_t cap4 = 0;
  void* s = alloc_block(size_t{4} << 20, &cap4);
  EXPECT_EQ(s, p);
  EXPECT_EQ(cap4, cap);
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(cap3));
  free_block(s, cap4);

  // A block more than 1.5x the request's class is left for a larger one.
  size_t cap5 = 0;
  void* t = alloc_block(size_t{5} << 19, &cap5);  // 2.5 MiB: 1.5x is 3.75 MiB
  EXPECT_NE(t, p);
  EXPECT_NE(t, r);
  EXPECT_EQ(cap5, size_t{5} << 19);
  free_block(t, cap5);

  empty_cache();
  EXPECT_EQ(cached_bytes(), 0);
}

// Over the limit, the least recently freed blocks go back to the system, the newest stay; a tighter
// limit set later trims the cache at once; a block larger than the limit is not kept at all.
TEST(Allocator, CacheLimitGivesBackTheLeastRecentlyFreed) {
  empty_cache();
  struct Restore {
    ~Restore() { set_cache_limit(CacheLimit{}); }
  } restore;
  set_cache_limit({size_t{7} << 20, 0.0});  // 7 MiB, whatever the peak
  const size_t MiB = size_t{1} << 20;
  size_t ca = 0, cb = 0, cc = 0;
  void* a = alloc_block(2 * MiB, &ca);
  void* b = alloc_block(3 * MiB, &cb);
  void* c = alloc_block(4 * MiB, &cc);
  ASSERT_TRUE(a && b && c);
  std::fill_n(static_cast<unsigned char*>(c), 4 * MiB, 1);  // writable to the last byte
  free_block(a, ca);
  free_block(b, cb);
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(5 * MiB));
  free_block(c, cc);  // 9 MiB cached > 7: a (the oldest) goes, b and c stay
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(7 * MiB));
  size_t cap = 0;
  void* b2 = alloc_block(3 * MiB, &cap);
  EXPECT_EQ(b2, b) << "b was kept";
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(4 * MiB));
  free_block(b2, cap);  // the newest now: c is the oldest
  set_cache_limit({3 * MiB, 0.0});
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(3 * MiB)) << "c trimmed, b kept";
  void* d = alloc_block(5 * MiB, &cap);
  free_block(d, cap);  // larger than the whole limit: straight back
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(3 * MiB));
  set_cache_limit({0, 0.0});
  EXPECT_EQ(cached_bytes(), 0);
}

// miss_evicts (decoding's limit): a block the cache cannot serve first sends the least recently freed
// cached blocks back, as many bytes as it asks for, so that cached + live bytes never pass what was
// resident before; a block it can serve takes none out; what the cache holds beyond the miss stays.
TEST(Allocator, AMissEvictsAsManyCachedBytesAsItAsksFor) {
  empty_cache();
  struct Restore {
    ~Restore() { set_cache_limit(CacheLimit{}); }
  } restore;
  const size_t MiB = size_t{1} << 20;
  set_cache_limit({64 * MiB, 0.0, true});
  size_t ca = 0, cb = 0, cc = 0, cap = 0;
  void* a = alloc_block(2 * MiB, &ca);
  void* b = alloc_block(3 * MiB, &cb);
  void* c = alloc_block(4 * MiB, &cc);
  ASSERT_TRUE(a && b && c);
  free_block(a, ca);  // the oldest
  free_block(b, cb);
  free_block(c, cc);
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(9 * MiB));
  void* c2 = alloc_block(4 * MiB, &cap);  // served: nothing evicted
  EXPECT_EQ(c2, c);
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(5 * MiB));
  free_block(c2, cap);
  // 12 MiB fits no cached block: a (2), b (3) and c (4) go, oldest first,
  // until 12 MiB are out — all 9 here, as fewer would not free 12
  void* big = alloc_block(12 * MiB, &cap);
  ASSERT_TRUE(big);
  EXPECT_EQ(cached_bytes(), 0);
  free_block(big, cap);
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(12 * MiB));
  empty_cache();
  // 2, 3 and 4 MiB cached (2 the oldest): a 5 MiB block sends 5 MiB of the oldest back — the 2 and the 3 —
  // and the 4 stays for the next 4 MiB block
  void* x = alloc_block(2 * MiB, &ca);
  void* y = alloc_block(3 * MiB, &cb);
  void* z = alloc_block(4 * MiB, &cc);
  ASSERT_TRUE(x && y && z);
  std::fill_n(static_cast<unsigned char*>(x), 2 * MiB, 7);
  free_block(x, ca);
  free_block(y, cb);
  free_block(z, cc);
  void* f = alloc_block(5 * MiB, &cap);
  ASSERT_TRUE(f);
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(4 * MiB)) << "the 2 and 3 MiB blocks out, the 4 kept";
  EXPECT_EQ(cap, 5 * MiB);
#if !defined(__SANITIZE_ADDRESS__)
  // the oldest block (x) became f: its pages as they were (mremap), not mapped and zeroed afresh
  EXPECT_EQ(static_cast<unsigned char*>(f)[0], 7);
  EXPECT_EQ(static_cast<unsigned char*>(f)[2 * MiB - 1], 7);
#endif
  std::fill_n(static_cast<unsigned char*>(f), 5 * MiB, 1);  // writable to the last byte
  size_t cz = 0;
  void* z2 = alloc_block(4 * MiB, &cz);
  EXPECT_EQ(z2, z);
  free_block(z2, cz);
  free_block(f, cap);
  // the default (training's) keeps its cache on a miss
  set_cache_limit({64 * MiB, 0.0});
  const int64_t held = cached_bytes();
  void* g = alloc_block(20 * MiB, &cap);
  EXPECT_EQ(cached_bytes(), held);
  free_block(g, cap);
  empty_cache();
}

TEST(Allocator, UncachedFreesGiveLargeBlocksBackAtOnce) {
  empty_cache();
  const size_t MiB = size_t{1} << 20;
  size_t ca = 0, cb = 0, cc = 0;
  void* a = alloc_block(2 * MiB, &ca);
  void* b = alloc_block(3 * MiB, &cb);
  void* small = alloc_block(1000, &cc);  // a small block: its own per-thread cache, as before
  ASSERT_TRUE(a && b && small);
  {
    UncachedFrees outgrown;
    {
      UncachedFrees nested;  // scopes nest
    }
    free_block(a, ca);
    EXPECT_EQ(cached_bytes(), 0) << "freed inside the scope: back to the system, not cached";
    free_block(small, cc);
  }
  free_block(b, cb);
  EXPECT_EQ(cached_bytes(), static_cast<int64_t>(3 * MiB)) << "after the scope: cached again";
  size_t cap = 0;
  void* b2 = alloc_block(3 * MiB, &cap);
  EXPECT_EQ(b2, b);
  free_block(b2, cap);
  empty_cache();
}

TEST(Allocator, TensorsCountTheirBytesNotTheirClass) {
  empty_cache();
  const int64_t before = allocated_bytes();
  {
    TensorBase t = TensorBase::empty({(1 << 20) + 1});  // 4 MiB + 4 bytes of data
    EXPECT_EQ(allocated_bytes() - before, 4 * ((1 << 20) + 1));
    std::fill_n(t.data(), t.numel(), 2.f);
    EXPECT_EQ(t.to_vector().back(), 2.f);
  }
  EXPECT_EQ(allocated_bytes(), before);
  EXPECT_GT(cached_bytes(), 0);  // the block waits for the next tensor of its class
  empty_cache();
}

}  // namespace
}  // namespace qkv
