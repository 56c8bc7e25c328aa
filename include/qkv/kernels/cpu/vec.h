// Small vector helpers for the hot loops: AVX-512 where the build targets it, scalar otherwise.
// exp is a Cody–Waite range reduction + degree-6 polynomial, accurate to ~2 ulp over the f32
// range, with exp(-inf) = 0 exactly (masked scores) and overflow to +inf.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "qkv/core/rng.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define QKV_AVX512 1
#else
#define QKV_AVX512 0
#endif

namespace qkv::kernels::cpu {

#if QKV_AVX512
// e^x for 16 lanes: x = n·ln2 + r, |r| ≤ ln2/2; e^r by polynomial; scale by 2^n (scalef).
inline __m512 exp512(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // below: result is 0 (also maps -inf → 0)
  x = _mm512_min_ps(x, _mm512_set1_ps(88.8f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// Φ(x), the standard normal CDF, for GELU: Φ(x) = ½ erfc(−x/√2), with erfc(z) for z = |x|/√2 ≥ 0
// from the Chebyshev fit of Numerical Recipes (§6.2; relative error < 1.2e-7 everywhere):
//   t = 1/(1 + z/2),  erfc(z) ≈ t·exp(−z² − 1.26551223 + t(1.00002368 + t(0.37409196 + …)))
// so the lower tail (x ≪ 0), where GELU is tiny, keeps its relative accuracy.
inline __m512 normal_cdf512(__m512 x) {
  const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f));
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.f), _mm512_fmadd_ps(z, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.f)));
  __m512 p = _mm512_set1_ps(0.17087277f);
  for (float c : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                  1.00002368f, -1.26551223f})
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
  const __m512 q = _mm512_mul_ps(_mm512_mul_ps(t, exp512(_mm512_fnmadd_ps(z, z, p))), _mm512_set1_ps(0.5f));  // P(X > |x|)
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(1.f), q), q);
}

// Dropout's keep decisions for counters c0 … c0+15 (c0 even), bit i set iff
// Generator::paired_uniform(seed, c0+i) ≥ p: the same splitmix64 hashes of k = c0/2 … c0/2+7, one
// per 64-bit lane; lane k's bits 40–63 and 8–31 become the 32-bit lanes 2k and 2k+1, so the mask
// equals the scalar one exactly.
inline __mmask16 dropout_keep16(uint64_t seed, uint64_t c0, float p) {
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
#endif

// y[i] = exp(x[i] - shift); returns Σ y[i].
inline float exp_shift_sum(const float* x, float* y, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.f;
#if QKV_AVX512
  __m512 vs = _mm512_set1_ps(shift), acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
    _mm512_storeu_ps(y + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
    _mm512_mask_storeu_ps(y + i, m, e);
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, e));
    i = n;
  }
  sum = _mm512_reduce_add_ps(acc);
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
#if QKV_AVX512
  __m512 vm = _mm512_set1_ps(-INFINITY);
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
  m = _mm512_reduce_max_ps(vm);
#endif
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

inline float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if QKV_AVX512
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  s = _mm512_reduce_add_ps(acc);
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Σ x[i]
inline float sum_of(const float* x, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if QKV_AVX512
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + i));
  s = _mm512_reduce_add_ps(acc);
#endif
  for (; i < n; ++i) s += x[i];
  return s;
}

// Σ a[i]·(b[i] − c)
inline float dot_centered(const float* a, const float* b, float c, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if QKV_AVX512
  const __m512 vc = _mm512_set1_ps(c);
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_sub_ps(_mm512_loadu_ps(b + i), vc), acc);
  s = _mm512_reduce_add_ps(acc);
#endif
  for (; i < n; ++i) s += a[i] * (b[i] - c);
  return s;
}

// Σ (x[i] − c)²
inline float sum_sq_dev(const float* x, float c, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if QKV_AVX512
  const __m512 vc = _mm512_set1_ps(c);
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), vc);
    acc = _mm512_fmadd_ps(d, d, acc);
  }
  s = _mm512_reduce_add_ps(acc);
#endif
  for (; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

inline void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace qkv::kernels::cpu
