// kernels/cuda/divisor.cuh — division by a launch's fixed numbers through a multiply by a rounded-up
// reciprocal — on the host through tests/kernels/cuda_emulation.h (its __umul64hi): every quotient and
// remainder is `/`'s and `%`'s, at the edges the proof turns on (divisors at and beside powers of two,
// dividends up to 2⁶³ − 1) and at random. A wrong reciprocal (m one less, s one less) fails here; the
// kernels that index through it (the strided elementwise loops, the attention pre-pass, dq's zeroing, the
// gathers) are tested in their own files. Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/divisor.cuh"

namespace {

using qkv::kernels::cuda::Divisor;
constexpr int64_t kMax = INT64_MAX;  // 2⁶³ − 1, the largest dividend and divisor

// every dividend of `ns` by d: quotient and remainder as the CPU's
void expect_divides(int64_t d, const std::vector<int64_t>& ns) {
  const Divisor div(d);
  ASSERT_EQ(div.value(), d);
  for (int64_t n : ns) {
    int64_t r = -1;
    const int64_t q = div.divmod(n, r);
    ASSERT_EQ(q, n / d) << n << " / " << d;
    ASSERT_EQ(r, n % d) << n << " % " << d;
    ASSERT_EQ(div.div(n), n / d) << n << " / " << d;
  }
}

// dividends near 0, near multiples of d, near powers of two and at the top of the range, and random ones
std::vector<int64_t> dividends(int64_t d, std::mt19937_64& rng) {
  std::vector<int64_t> ns;
  for (int64_t n = 0; n < 64; ++n) ns.push_back(n);
  for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1000}, int64_t{1} << 20, int64_t{1} << 40}) {
    if (k > kMax / d) continue;
    for (int64_t e = -1; e <= 1; ++e)
      if (k * d + e >= 0) ns.push_back(k * d + e);
  }
  for (int b = 1; b < 63; ++b)
    for (int64_t e = -1; e <= 1; ++e) ns.push_back((int64_t{1} << b) + e);
  for (int64_t e = 0; e < 4; ++e) ns.push_back(kMax - e);
  ns.push_back(kMax - kMax % d);  // the largest multiple of d
  ns.push_back(kMax - kMax % d - 1);
  std::uniform_int_distribution<int64_t> any(0, kMax), small(0, int64_t{1} << 32);
  for (int i = 0; i < 200; ++i) ns.push_back(i % 2 ? any(rng) : small(rng));
  return ns;
}

TEST(DivisorEmulated, QuotientsAndRemaindersAreTheCpusAtTheEdgesAndAtRandom) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> ds;
  for (int64_t d = 1; d <= 1100; ++d) ds.push_back(d);  // every small divisor: dims, rows, heads
  for (int b = 10; b < 63; ++b)                         // at and beside every power of two
    for (int64_t e = -2; e <= 2; ++e) ds.push_back((int64_t{1} << b) + e);
  for (int64_t e = 0; e < 3; ++e) ds.push_back(kMax - e);
  std::uniform_int_distribution<int64_t> any(1, kMax);
  std::uniform_int_distribution<int64_t> shift(0, 62);
  for (int i = 0; i < 400; ++i) ds.push_back(1 + (any(rng) >> shift(rng)));  // random, of every magnitude
  for (int64_t d : ds) {
    SCOPED_TRACE(d);
    expect_divides(d, dividends(d, rng));
    if (HasFatalFailure()) return;
  }
}

TEST(DivisorEmulated, TheDefaultDividesByOneAndABadDivisorIsRefused) {
  const Divisor one;
  int64_t r = -1;
  EXPECT_EQ(one.divmod(kMax, r), kMax);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(one.value(), 1);
  EXPECT_THROW(Divisor(0), qkv::Error);
  EXPECT_THROW(Divisor(-5), qkv::Error);
}

}  // namespace

#else
TEST(DivisorEmulated, QuotientsAndRemaindersAreTheCpusAtTheEdgesAndAtRandom) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(DivisorEmulated, TheDefaultDividesByOneAndABadDivisorIsRefused) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
