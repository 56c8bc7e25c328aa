// The vector math of kernels/cpu/vec.h on this build's register (16 lanes on AVX-512, 8 on AVX2),
// against the C library in double precision: exp over the whole f32 range (−inf → 0 exactly, the
// subnormal underflow, overflow to +inf), Φ(x) for GELU, and the masked tail of exp_shift_sum.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {
namespace {

#if QKV_SIMD
// f(x) for every x, a register at a time.
template <typename F>
std::vector<float> lanewise(const std::vector<float>& x, F f) {
  std::vector<float> y(x.size());
  size_t i = 0;
  for (; i + simd::kLanes <= x.size(); i += simd::kLanes) simd::store(&y[i], f(simd::load(&x[i])));
  std::vector<float> tail(simd::kLanes, 0.f), out(simd::kLanes);
  for (size_t j = i; j < x.size(); ++j) tail[j - i] = x[j];
  simd::store(out.data(), f(simd::load(tail.data())));
  for (size_t j = i; j < x.size(); ++j) y[j] = out[j - i];
  return y;
}

// distance in units in the last place of the f32 nearest to `want`
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp = std::nextafter(std::abs(w), std::numeric_limits<float>::infinity()) - std::abs(w);
  return std::abs(got - want) / ulp;
}
#endif

TEST(SimdMath, ExpIsAccurateOverTheWholeRange) {
#if QKV_SIMD
  std::vector<float> x;
  for (double v = -110; v <= 90; v += 0.00731) x.push_back(static_cast<float>(v));
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {-inf, -200.f, -104.f, -103.9f, -87.3f, 0.f, -0.f, 88.7f, 88.72f, 88.8f, 89.f, 1000.f, inf})
    x.push_back(v);
  std::vector<float> y = lanewise(x, [](simd::vf v) { return simd::exp(v); });
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    if (want > std::numeric_limits<float>::max()) {
      EXPECT_EQ(y[i], inf) << "exp(" << x[i] << ") overflows to +inf";
    } else if (want < std::numeric_limits<float>::min()) {  // subnormal or below: absolute error
      EXPECT_LE(std::abs(y[i] - want), 4 * std::numeric_limits<float>::denorm_min()) << "exp(" << x[i] << ")";
    } else {
      worst = std::max(worst, ulps(y[i], want));
    }
  }
  EXPECT_LT(worst, 4.0) << "worst error of exp in ulps";
  EXPECT_EQ(y[x.size() - 13], 0.f) << "exp(-inf) is exactly 0 (masked scores)";
  EXPECT_EQ(y[x.size() - 8], 1.f) << "exp(0) is exactly 1";
#else
  GTEST_SKIP() << "built without AVX2 or AVX-512";
#endif
}

TEST(SimdMath, NormalCdfMatchesErfc) {
#if QKV_SIMD
  std::vector<float> x;
  for (double v = -12; v <= 12; v += 0.0013) x.push_back(static_cast<float>(v));
  std::vector<float> y = lanewise(x, [](simd::vf v) { return simd::normal_cdf(v); });
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = 0.5 * std::erfc(-static_cast<double>(x[i]) / std::sqrt(2.0));
    // Relative error, so the far lower tail counts too; there the f32 exponent −z² (z = |x|/√2)
    // carries a rounding error of about z²·2⁻²⁴, which the bound allows for.
    const double z2 = static_cast<double>(x[i]) * x[i] / 2;
    worst = std::max(worst, std::abs(y[i] - want) / want / (1 + z2));
  }
  EXPECT_LT(worst, 5e-7);  // the fit (1.2e-7) plus f32 arithmetic
#else
  GTEST_SKIP() << "built without AVX2 or AVX-512";
#endif
}

// GELU's loops take four registers a step, then one, then scalars; Φ and e^x over four registers
// (normal_cdf_n, exp_n) are the one-register formulas interleaved, so every element must get the
// same bits as simd::normal_cdf / simd::exp on its own register, whatever the length.
TEST(SimdMath, GeluFourRegisterStepsEqualOneRegisterFormulas) {
#if QKV_SIMD
  for (int64_t n : {int64_t{0}, int64_t{7}, 3 * kLanes + 5, 4 * kLanes, 9 * kLanes + 3, 4096 + 4 * kLanes + kLanes + 1}) {
    const auto N = static_cast<size_t>(n);
    std::vector<float> x(N), dy(N), y(N), cdf(N), dx(N), dx_nocdf(N);
    for (size_t i = 0; i < N; ++i) {
      x[i] = 9.f * std::sin(0.37f * static_cast<float>(i)) - 1.f;  // both tails and the middle
      dy[i] = std::cos(0.11f * static_cast<float>(i));
    }
    gelu_forward(x.data(), y.data(), n, false, cdf.data());
    gelu_backward(x.data(), dy.data(), dx.data(), n, false, cdf.data());
    gelu_backward(x.data(), dy.data(), dx_nocdf.data(), n, false, nullptr);
    const size_t vec_end = N / static_cast<size_t>(kLanes) * static_cast<size_t>(kLanes);  // then the scalar tail
    std::vector<float> want_c = lanewise(std::vector<float>(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(vec_end)),
                                         [](simd::vf v) { return simd::normal_cdf(v); });
    std::vector<float> want_e(vec_end);
    for (size_t i = 0; i < vec_end; ++i) want_e[i] = -0.5f * x[i] * x[i];
    want_e = lanewise(want_e, [](simd::vf v) { return simd::exp(v); });
    for (size_t i = 0; i < vec_end; ++i) {
      ASSERT_EQ(cdf[i], want_c[i]) << "n " << n << " i " << i;
      ASSERT_EQ(y[i], x[i] * want_c[i]) << "n " << n << " i " << i;
      const float want_dx = dy[i] * std::fma(x[i], 0.39894228040143268f * want_e[i], want_c[i]);
      ASSERT_EQ(dx[i], want_dx) << "n " << n << " i " << i;
      ASSERT_EQ(dx_nocdf[i], want_dx) << "n " << n << " i " << i;
    }
    for (size_t i = vec_end; i < N; ++i)  // the scalar tail: erf, to f32 rounding
      EXPECT_NEAR(y[i], x[i] * 0.5 * std::erfc(-x[i] / std::sqrt(2.0)), 1e-6 * (1 + std::abs(x[i]))) << "n " << n;
  }
#else
  GTEST_SKIP() << "built without AVX2 or AVX-512";
#endif
}

TEST(SimdMath, ExpShiftSumCoversEveryTailLength) {
  for (int64_t n = 0; n <= 140; ++n) {  // past four AVX-512 registers (exp_n) and every tail
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n) + 1, -7.f);
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(0.7f * static_cast<float>(i)) * 5.f;
    const float s = exp_shift_sum(x.data(), y.data(), n, 1.5f);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(static_cast<double>(x[static_cast<size_t>(i)]) - 1.5);
      EXPECT_NEAR(y[static_cast<size_t>(i)], want, 4e-7 * want) << "n " << n << " i " << i;
      want_sum += want;
    }
    EXPECT_NEAR(s, want_sum, 1e-6 * want_sum + 1e-30) << "n " << n;
    EXPECT_EQ(y[static_cast<size_t>(n)], -7.f) << "n " << n << ": wrote past the end";
  }
}

}  // namespace
}  // namespace qkv::kernels::cpu
