// Small vector helpers for the hot loops, over simd.h's register (16 lanes on AVX-512, 8 on
// AVX2), scalar where the build targets neither. exp is a Cody–Waite range reduction + degree-6
// polynomial, accurate to ~2 ulp over the f32 range, with exp(-inf) = 0 exactly (masked scores)
// and overflow to +inf.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "qkv/core/rng.h"
#include "qkv/kernels/cpu/simd.h"

namespace qkv::kernels::cpu {

#if QKV_SIMD
namespace simd {

// e^x lane by lane: x = n·ln2 + r, |r| ≤ ln2/2; e^r by polynomial; scaled by 2^n.
inline vf exp(vf x) {
  const vf log2e = set1(1.44269504088896341f);
  const vf ln2_hi = set1(0.693359375f);
  const vf ln2_lo = set1(-2.12194440e-4f);
  x = max(x, set1(-104.0f));  // below: result is 0 (also maps -inf → 0)
  x = min(x, set1(88.8f));
  vf n = round(mul(x, log2e));
  vf r = fnmadd(n, ln2_hi, x);
  r = fnmadd(n, ln2_lo, r);
  vf p = set1(1.9875691500e-4f);
  p = fmadd(p, r, set1(1.3981999507e-3f));
  p = fmadd(p, r, set1(8.3334519073e-3f));
  p = fmadd(p, r, set1(4.1665795894e-2f));
  p = fmadd(p, r, set1(1.6666665459e-1f));
  p = fmadd(p, r, set1(5.0000001201e-1f));
  vf r2 = mul(r, r);
  p = fmadd(p, r2, add(r, set1(1.0f)));
  return scale_pow2(p, n);
}

// Φ(x), the standard normal CDF, for GELU: Φ(x) = ½ erfc(−x/√2), with erfc(z) for z = |x|/√2 ≥ 0
// from the Chebyshev fit of Numerical Recipes (§6.2; relative error < 1.2e-7 everywhere):
//   t = 1/(1 + z/2),  erfc(z) ≈ t·exp(−z² − 1.26551223 + t(1.00002368 + t(0.37409196 + …)))
// so the lower tail (x ≪ 0), where GELU is tiny, keeps its relative accuracy.
inline vf normal_cdf(vf x) {
  const vf z = mul(abs(x), set1(0.70710678118654752f));
  const vf t = div(set1(1.f), fmadd(z, set1(0.5f), set1(1.f)));
  vf p = set1(0.17087277f);
  for (float c : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                  1.00002368f, -1.26551223f})
    p = fmadd(p, t, set1(c));
  const vf q = mul(mul(t, exp(fnmadd(z, z, p))), set1(0.5f));  // P(X > |x|)
  return select_negative(x, q, sub(set1(1.f), q));
}

}  // namespace simd
#endif

// Dropout's keep decisions for counters c0 … c0+kLanes−1 (c0 even), lane i set iff
// Generator::paired_uniform(seed, c0+i) ≥ p: the same splitmix64 hashes of k = c0/2 … c0/2+kLanes/2−1,
// one per 64-bit lane; lane k's bits 40–63 and 8–31 become the 32-bit lanes 2k and 2k+1, so the
// mask equals the scalar one exactly.
#if QKV_AVX512
inline simd::mask dropout_keep(uint64_t seed, uint64_t c0, float p) {
  const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i k1 = _mm512_set1_epi64(static_cast<long long>(Generator::kCounterMul));
  const __m512i add = _mm512_set1_epi64(static_cast<long long>(seed * Generator::kSeedMul + Generator::kOffset));
  const __m512i m1 = _mm512_set1_epi64(static_cast<long long>(Generator::kMix1));
  const __m512i m2 = _mm512_set1_epi64(static_cast<long long>(Generator::kMix2));
  const __m512i c = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(c0 >> 1)), lane);
  __m512i z = _mm512_add_epi64(_mm512_mullo_epi64(c, k1), add);
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), m1);
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), m2);
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
  const __m512i even = _mm512_srli_epi64(z, 40);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi64(z, 8), _mm512_set1_epi64(0xFFFFFF));
  const __m512i u24 = _mm512_or_si512(even, _mm512_slli_epi64(odd, 32));
  const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(u24), _mm512_set1_ps(1.0f / 16777216.0f));
  return _mm512_cmp_ps_mask(u, _mm512_set1_ps(p), _CMP_GE_OQ);
}
#elif QKV_SIMD
// AVX2 multiplies only 32 × 32 → 64 bits: a·b mod 2⁶⁴ = lo·lo + ((hi(a)·lo(b) + lo(a)·hi(b)) << 32).
inline __m256i mullo_epi64(__m256i a, __m256i b) {
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                         _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(cross, 32));
}
inline simd::mask dropout_keep(uint64_t seed, uint64_t c0, float p) {
  const __m256i lane = _mm256_set_epi64x(3, 2, 1, 0);
  const __m256i k1 = _mm256_set1_epi64x(static_cast<long long>(Generator::kCounterMul));
  const __m256i add = _mm256_set1_epi64x(static_cast<long long>(seed * Generator::kSeedMul + Generator::kOffset));
  const __m256i m1 = _mm256_set1_epi64x(static_cast<long long>(Generator::kMix1));
  const __m256i m2 = _mm256_set1_epi64x(static_cast<long long>(Generator::kMix2));
  const __m256i c = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(c0 >> 1)), lane);
  __m256i z = _mm256_add_epi64(mullo_epi64(c, k1), add);
  z = mullo_epi64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), m1);
  z = mullo_epi64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), m2);
  z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
  const __m256i even = _mm256_srli_epi64(z, 40);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi64(z, 8), _mm256_set1_epi64x(0xFFFFFF));
  const __m256i u24 = _mm256_or_si256(even, _mm256_slli_epi64(odd, 32));
  const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(u24), _mm256_set1_ps(1.0f / 16777216.0f));
  return _mm256_castps_si256(_mm256_cmp_ps(u, _mm256_set1_ps(p), _CMP_GE_OQ));
}
#endif

#if QKV_SIMD
using simd::kLanes;
#endif

// y[i] = exp(x[i] - shift); returns Σ y[i].
inline float exp_shift_sum(const float* x, float* y, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.f;
#if QKV_SIMD
  const simd::vf vs = simd::set1(shift);
  simd::vf acc = simd::zero();
  for (; i + kLanes <= n; i += kLanes) {
    const simd::vf e = simd::exp(simd::sub(simd::load(x + i), vs));
    simd::store(y + i, e);
    acc = simd::add(acc, e);
  }
  if (i < n) {
    const simd::mask m = simd::first(n - i);
    const simd::vf e = simd::exp(simd::sub(simd::load(x + i, m), vs));
    simd::store(y + i, m, e);
    acc = simd::add(acc, simd::keep(m, e));
    i = n;
  }
  sum = simd::reduce_add(acc);
#endif
  for (; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    sum += y[i];
  }
  return sum;
}

inline float max_of(const float* x, int64_t n) {
  float m = -INFINITY;
  int64_t i = 0;
#if QKV_SIMD
  simd::vf vm = simd::set1(-INFINITY);
  for (; i + kLanes <= n; i += kLanes) vm = simd::max(vm, simd::load(x + i));
  m = simd::reduce_max(vm);
#endif
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

inline float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if QKV_SIMD
  simd::vf acc = simd::zero();
  for (; i + kLanes <= n; i += kLanes) acc = simd::fmadd(simd::load(a + i), simd::load(b + i), acc);
  s = simd::reduce_add(acc);
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Σ x[i]
inline float sum_of(const float* x, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if QKV_SIMD
  simd::vf acc = simd::zero();
  for (; i + kLanes <= n; i += kLanes) acc = simd::add(acc, simd::load(x + i));
  s = simd::reduce_add(acc);
#endif
  for (; i < n; ++i) s += x[i];
  return s;
}

// Σ a[i]·(b[i] − c)
inline float dot_centered(const float* a, const float* b, float c, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if QKV_SIMD
  const simd::vf vc = simd::set1(c);
  simd::vf acc = simd::zero();
  for (; i + kLanes <= n; i += kLanes)
    acc = simd::fmadd(simd::load(a + i), simd::sub(simd::load(b + i), vc), acc);
  s = simd::reduce_add(acc);
#endif
  for (; i < n; ++i) s += a[i] * (b[i] - c);
  return s;
}

// Σ (x[i] − c)²
inline float sum_sq_dev(const float* x, float c, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if QKV_SIMD
  const simd::vf vc = simd::set1(c);
  simd::vf acc = simd::zero();
  for (; i + kLanes <= n; i += kLanes) {
    const simd::vf d = simd::sub(simd::load(x + i), vc);
    acc = simd::fmadd(d, d, acc);
  }
  s = simd::reduce_add(acc);
#endif
  for (; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

inline void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace qkv::kernels::cpu
