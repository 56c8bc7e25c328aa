#include "qkv/io/sample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

namespace qkv::io {
namespace {

TEST(Sample, DistinctSortedInRangeAndSeeded) {
  const std::vector<int64_t> a = sample_indices(10000, 300, 0);
  ASSERT_EQ(a.size(), 300u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 300u);
  EXPECT_GE(a.front(), 0);
  EXPECT_LT(a.back(), 10000);
  EXPECT_EQ(sample_indices(10000, 300, 0), a);  // the same seed, the same sample
  EXPECT_NE(sample_indices(10000, 300, 1), a);
  // not the first 300 (a length-sorted file's shortest lines): spread over the whole range
  EXPECT_GT(a.back(), 9000);
  EXPECT_LT(a.front(), 1000);
  double mean = 0;
  for (int64_t i : a) mean += static_cast<double>(i) / 300;
  EXPECT_NEAR(mean, 5000, 600);
}

TEST(Sample, NoLimitOrLimitPastTheEndTakesAll) {
  const std::vector<int64_t> all = {0, 1, 2, 3, 4};
  EXPECT_EQ(sample_indices(5, 0, 7), all);
  EXPECT_EQ(sample_indices(5, 5, 7), all);
  EXPECT_EQ(sample_indices(5, 50, 7), all);
  EXPECT_TRUE(sample_indices(0, 3, 7).empty());
  EXPECT_EQ(take(std::vector<std::string>{"a", "b", "c"}, {0, 2}), (std::vector<std::string>{"a", "c"}));
}

TEST(Sample, EveryIndexIsDrawnAboutEquallyOften) {
  std::vector<int> hits(20, 0);
  for (uint64_t seed = 0; seed < 2000; ++seed)
    for (int64_t i : sample_indices(20, 5, seed)) ++hits[static_cast<size_t>(i)];
  for (int h : hits) EXPECT_NEAR(h, 500, 80);  // 2000 × 5 / 20
}

TEST(Sample, HoldOutSplitsEveryRowOnceAsSampleIndicesDraws) {
  const HeldOut split = hold_out(10, 3, 42);
  EXPECT_EQ(split.held, sample_indices(10, 3, 42));
  ASSERT_EQ(split.rest.size(), 7u);
  std::vector<int64_t> all = split.held;
  all.insert(all.end(), split.rest.begin(), split.rest.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_TRUE(std::is_sorted(split.rest.begin(), split.rest.end()));
}

}  // namespace
}  // namespace qkv::io
