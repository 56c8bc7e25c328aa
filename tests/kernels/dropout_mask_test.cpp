// The vectorized dropout mask draws exactly the scalar generator's decisions, so the f32 and AVX-512
// paths (and the reference and flash attention kernels) drop the same elements.
#include <gtest/gtest.h>

#include "qkv/core/rng.h"
#include "qkv/kernels/cpu/activation.h"
#include "qkv/kernels/cpu/vec.h"

namespace qkv::kernels::cpu {
namespace {

TEST(DropoutMask, VectorDecisionsEqualScalar) {
#if QKV_AVX512
  for (uint64_t seed : {0ull, 1ull, 0x5eedull, ~0ull})
    for (float p : {0.f, 0.1f, 0.5f, 0.9f, 1.f})
      for (uint64_t c0 : {0ull, 15ull, 123456789ull, (1ull << 63) - 3})
        for (int rep = 0; rep < 16; ++rep) {
          const uint64_t c = c0 + static_cast<uint64_t>(rep) * 16;
          const __mmask16 m = dropout_keep16(seed, c, p);
          for (int i = 0; i < 16; ++i)
            ASSERT_EQ(((m >> i) & 1) != 0, Generator::uniform(seed, c + static_cast<uint64_t>(i)) >= p)
                << "seed " << seed << " counter " << c + i << " p " << p;
        }
#else
  GTEST_SKIP() << "built without AVX-512";
#endif
}

TEST(DropoutMask, ApplyMatchesScalarFormulaIncludingTail) {
  const int64_t n = 1000 + 7;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 13) - 6.f;
  dropout_apply(x.data(), y.data(), n, 0.3f, 42, 1000);
  int dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = Generator::uniform(42, 1000 + static_cast<uint64_t>(i)) >= 0.3f;
    EXPECT_EQ(y[i], keep ? x[i] * (1.f / (1.f - 0.3f)) : 0.f) << i;  // the kernel multiplies by 1/(1−p)
    dropped += !keep;
  }
  EXPECT_NEAR(dropped / static_cast<double>(n), 0.3, 0.05);
}

}  // namespace
}  // namespace qkv::kernels::cpu
