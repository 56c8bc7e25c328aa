// Division by a number fixed for a launch — a dim's size, a row's length — without a divide
// instruction. A GPU has none: nvcc lowers `n / d` and `n % d` on int64_t to a subroutine, ~20–30
// instructions where both operands fit 32 bits and ~70 where not, and a kernel that splits each
// element's index into coordinates (a strided copy, a broadcast, a pre-pass's row) ran several per
// element — more issue slots than moving the element's bytes takes. Instead, Granlund & Montgomery's
// multiplication by a rounded-up reciprocal ("Division by invariant integers using multiplication",
// 1994, Theorem 4.2; PyTorch's IntDivider is the 32-bit form), with the reciprocal made once on the host:
//
//   s = ⌈log₂ d⌉,   m = ⌊2⁶⁴ (2ˢ − d) / d⌋ + 1                 (host, 128-bit arithmetic)
//   n / d = (mulhi(n, m) + n) >> s,   n % d = n − (n / d)·d      for 0 ≤ n < 2⁶³, 1 ≤ d < 2⁶³
//
// Why: 2⁶⁴ + m = ⌊2^(64+s) / d⌋ + 1 =: M, so M·d lies in (2^(64+s), 2^(64+s) + d] with d ≤ 2ˢ — the
// theorem's condition for ⌊n·M / 2^(64+s)⌋ = ⌊n / d⌋ for every n < 2⁶⁴ — and ⌊n·M / 2^(64+s)⌋ =
// (n + ⌊n·m / 2⁶⁴⌋) >> s; mulhi(n, m) < n keeps that sum below 2⁶⁴ for n < 2⁶³. On sm_90: ~4 integer
// multiplies and a few adds and shifts a quotient (tests/kernels/divisor_emulation_test.cpp checks it
// against `/` and `%`, edge values and random ones). nvcc, or g++ under the host emulation
// (tests/kernels/cuda_emulation.h gives __umul64hi). In an unnamed namespace, as every kernel header's: a
// test that compiles it on the host has its own, never the library's symbols.
#pragma once

#include <cstdint>

#include "qkv/core/error.h"

namespace qkv::kernels::cuda {
namespace {

class Divisor {
 public:
  Divisor() = default;  // 1
  // d in [1, 2⁶³)
  explicit Divisor(int64_t d) : d_(static_cast<uint64_t>(d)) {
    QKV_CHECK(d >= 1, "Divisor: ", d, " is not a positive divisor");
    while ((uint64_t{1} << s_) < d_) ++s_;  // s = ⌈log₂ d⌉ (≤ 63)
    const unsigned __int128 over = static_cast<unsigned __int128>((uint64_t{1} << s_) - d_) << 64;
    m_ = static_cast<uint64_t>(over / d_) + 1;
  }
  // A dim's extent as a divisor: 1 where the extent is 0 (a launch over an empty extent runs no thread, so
  // nothing divides by it)
  static Divisor of_extent(int64_t extent) { return Divisor(extent > 0 ? extent : 1); }
  // n / d for 0 ≤ n < 2⁶³
  __device__ int64_t div(int64_t n) const {
    const uint64_t u = static_cast<uint64_t>(n);
    return static_cast<int64_t>((__umul64hi(u, m_) + u) >> s_);
  }
  // n / d, and n % d in r
  __device__ int64_t divmod(int64_t n, int64_t& r) const {
    const int64_t q = div(n);
    r = n - q * static_cast<int64_t>(d_);
    return q;
  }
  __host__ __device__ int64_t value() const { return static_cast<int64_t>(d_); }

 private:
  uint64_t d_ = 1, m_ = 1;  // d = 1: s = 0, m = ⌊2⁶⁴·0 / 1⌋ + 1 = 1
  unsigned s_ = 0;
};

}  // namespace
}  // namespace qkv::kernels::cuda
