// The vectorized dropout mask (AVX-512 or AVX2) draws exactly the scalar generator's decisions, so
// the scalar and vector paths (and the reference and flash attention kernels) drop the same elements.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/core/rng.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {
namespace {

TEST(DropoutMask, VectorDecisionsEqualScalar) {
#if QKV_SIMD
  float kept[simd::kLanes];
  for (uint64_t seed : {0ull, 1ull, 0x5eedull, ~0ull})
    for (float p : {0.f, 0.1f, 0.5f, 0.9f, 1.f})
      for (uint64_t c0 : {0ull, 16ull, 123456788ull, (1ull << 63) - 4, ~0ull - 255})
        for (int rep = 0; rep < 16; ++rep) {
          const uint64_t c = c0 + static_cast<uint64_t>(rep) * simd::kLanes;
          simd::store(kept, simd::keep(dropout_keep(seed, c, p), simd::set1(1.f)));  // 1 where kept
          for (int i = 0; i < simd::kLanes; ++i)
            ASSERT_EQ(kept[i] == 1.f, Generator::paired_uniform(seed, c + static_cast<uint64_t>(i)) >= p)
                << "seed " << seed << " counter " << c + i << " p " << p;
        }
#else
  GTEST_SKIP() << "built without AVX2 or AVX-512";
#endif
}

TEST(DropoutMask, ApplyMatchesScalarFormulaIncludingTail) {
  const int64_t n = 1000 + 7;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 13) - 6.f;
  for (uint64_t counter : {1000ull, 1001ull}) {  // an odd first counter starts with one scalar draw
    dropout_apply(x.data(), y.data(), n, dropout_mask(0.3f, 42, counter));
    int dropped = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = Generator::paired_uniform(42, counter + static_cast<uint64_t>(i)) >= 0.3f;
      EXPECT_EQ(y[i], keep ? x[i] * (1.f / (1.f - 0.3f)) : 0.f) << counter << " " << i;  // the kernel multiplies by 1/(1−p)
      dropped += !keep;
    }
    EXPECT_NEAR(dropped / static_cast<double>(n), 0.3, 0.05);
  }
}

// The two draws of one hash are independent enough for dropout: over 2^20 pairs, the even and odd
// decisions at p = 0.5 agree half the time, and each keeps half.
TEST(DropoutMask, PairedDrawsAreBalancedAndUncorrelated) {
  const int64_t pairs = 1 << 20;
  int64_t keep_even = 0, keep_odd = 0, agree = 0;
  for (int64_t k = 0; k < pairs; ++k) {
    const bool e = Generator::paired_uniform(7, 2 * static_cast<uint64_t>(k)) >= 0.5f;
    const bool o = Generator::paired_uniform(7, 2 * static_cast<uint64_t>(k) + 1) >= 0.5f;
    keep_even += e, keep_odd += o, agree += e == o;
  }
  const double n = static_cast<double>(pairs), tol = 4 * 0.5 / std::sqrt(n);  // 4 standard deviations
  EXPECT_NEAR(keep_even / n, 0.5, tol);
  EXPECT_NEAR(keep_odd / n, 0.5, tol);
  EXPECT_NEAR(agree / n, 0.5, tol);
}

}  // namespace
}  // namespace qkv::kernels::cpu
