// Reading an e4m3 KV cache on the CPU (kernels/cpu/simd.h's load_f8e4m3, vec.h's load_widened,
// widen_f8e4m3_row and dot): a register's lanes and a row's elements widened are core/dtype.h's
// f8e4m3_to_f32 bit for bit, for all 256 codes in every lane and at every place in a row — also with the processor told to treat f32 subnormals as zero (MXCSR's DAZ and FTZ, as
// -ffast-math's start-up code or another library may leave them), since every e4m3 value is a normal
// f32 and the subnormal codes are a product of normal numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/vec.h"
#include "qkv/core/dtype.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace {

using qkv::f8e4m3;
namespace cpu = qkv::kernels::cpu;

// Every code in every lane: 256 + kLanes codes, read from each offset.
void expect_lanes_widen_exactly(const char* when) {
#if QKV_SIMD
  constexpr int64_t kLanes = cpu::kLanes;
  std::vector<f8e4m3> codes(256 + kLanes);
  for (size_t i = 0; i < codes.size(); ++i) codes[i].bits = static_cast<uint8_t>(i * 37 % 256);  // 37: a unit mod 256
  for (int64_t at = 0; at < 256; ++at) {
    float lanes[kLanes];
    cpu::simd::store(lanes, cpu::load_widened(codes.data() + at));
    for (int64_t l = 0; l < kLanes; ++l) {
      const float want = qkv::f8e4m3_to_f32(codes[static_cast<size_t>(at + l)]);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(lanes[l])) << when << ": code " << int{codes[static_cast<size_t>(at + l)].bits};
      else
        EXPECT_EQ(qkv::f32_bits(lanes[l]), qkv::f32_bits(want))
            << when << ": code " << int{codes[static_cast<size_t>(at + l)].bits} << " in lane " << l << ": " << lanes[l]
            << ", not " << want;
    }
  }
#endif
  // and a row at a time (the paged kernel's buffer: a table lookup on AVX-512BW), every length's tail
  std::vector<f8e4m3> row(300);
  for (size_t i = 0; i < row.size(); ++i) row[i].bits = static_cast<uint8_t>((i * 73 + 11) % 256);
  for (int64_t n : {0, 1, 15, 31, 32, 33, 64, 100, 256, 300}) {
    std::vector<float> out(static_cast<size_t>(n) + 1, 12345.f);
    cpu::widen_f8e4m3_row(row.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = qkv::f8e4m3_to_f32(row[static_cast<size_t>(i)]);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(out[static_cast<size_t>(i)])) << when << ": row of " << n << ", code " << int{row[static_cast<size_t>(i)].bits};
      else
        EXPECT_EQ(qkv::f32_bits(out[static_cast<size_t>(i)]), qkv::f32_bits(want))
            << when << ": row of " << n << ", element " << i << ", code " << int{row[static_cast<size_t>(i)].bits};
    }
    EXPECT_EQ(out[static_cast<size_t>(n)], 12345.f) << "written past the row of " << n;
  }
}

TEST(Fp8Widen, EveryCodeInEveryLaneIsTheScalarWidening) { expect_lanes_widen_exactly("default MXCSR"); }

TEST(Fp8Widen, SubnormalCodesSurviveDenormalsAreZero) {
#if defined(__SSE__)
  const unsigned before = _mm_getcsr();
  _mm_setcsr(before | 0x8040);  // FTZ (bit 15) and DAZ (bit 6)
  // (the check itself: under DAZ an f32 subnormal reads as 0)
  volatile float tiny = std::ldexp(1.f, -140), one = 1.f;
  const bool daz = tiny * one == 0.f;
  expect_lanes_widen_exactly("DAZ and FTZ");
  for (int c = 1; c < 8; ++c)  // the subnormal codes, one by one: m · 2⁻⁹
    EXPECT_EQ(qkv::f8e4m3_to_f32(f8e4m3{static_cast<uint8_t>(c)}), std::ldexp(static_cast<float>(c), -9)) << c;
  _mm_setcsr(before);
  EXPECT_TRUE(daz) << "MXCSR's DAZ did not take: the test checked nothing";
#else
  GTEST_SKIP() << "not an x86 processor";
#endif
}

// dot(a, e4m3 row): the widened row's products summed in f32, over lengths with and without a tail
TEST(Fp8Widen, DotOverAnE4m3RowIsTheWidenedRowsDot) {
  for (int64_t n : {1, 7, 16, 40, 64, 129}) {
    std::vector<float> a(static_cast<size_t>(n));
    std::vector<f8e4m3> b(static_cast<size_t>(n));
    double want = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
      a[static_cast<size_t>(i)] = std::sin(0.7f * static_cast<float>(i) + 0.3f);
      b[static_cast<size_t>(i)] = qkv::f32_to_f8e4m3(3.f * std::cos(1.3f * static_cast<float>(i)));
      const double w = qkv::f8e4m3_to_f32(b[static_cast<size_t>(i)]);
      want += a[static_cast<size_t>(i)] * w, scale += std::fabs(a[static_cast<size_t>(i)] * w);
    }
    EXPECT_NEAR(cpu::dot(a.data(), b.data(), n), want, 1e-6 * (scale + 1)) << "n " << n;
  }
}

}  // namespace
