#include "qkv/core/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "qkv/core/tensor.h"

namespace qkv {
namespace {

TEST(Allocator, SmallBlocksAreExactAndAligned) {
  size_t cap = 0;
  void* p = alloc_block(1000, &cap);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(cap, 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  free_block(p, cap);
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
