// One register of f32 lanes for the hot loops, on whatever the build targets:
//   AVX-512            16 lanes (Zen 4/5, Intel since Skylake-SP)
//   AVX2 + FMA          8 lanes (Zen 1–3, Intel Haswell to Alder Lake: most laptops)
//   neither             QKV_SIMD is 0 and the kernels' scalar loops do all the work.
// The kernels write each formula once over these operations (`simd::exp`, `simd::normal_cdf` and
// `dropout_keep` in vec.h; the GELU, cross-entropy, Adam and bf16 gemv loops); every operation is
// one or two instructions, inlined, so the AVX-512 code is what it was when it was written with
// intrinsics directly.
#pragma once

#include <cstdint>

#include "qkv/core/dtype.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define QKV_AVX512 1
#define QKV_SIMD 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define QKV_AVX512 0
#define QKV_SIMD 1
#else
#define QKV_AVX512 0
#define QKV_SIMD 0
#endif

// GCC 12's AVX-512 intrinsics pass an uninitialized `_mm512_undefined_ps()` as the unused source of
// their masked forms, and every inlined use warned that it "may be used uninitialized" (GCC bug
// 105593, fixed in GCC 13): some 490 false warnings a build on an AVX-512 machine. The code that calls
// the intrinsics (here and in vec.h) silences those two warnings alone where this is 1.
#if QKV_AVX512 && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#define QKV_GCC12_AVX512 1
#else
#define QKV_GCC12_AVX512 0
#endif

namespace qkv::kernels::cpu::simd {

#if QKV_AVX512
#if QKV_GCC12_AVX512  // (above)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

using vf = __m512;
using mask = __mmask16;  // lanes of a partial register
constexpr int64_t kLanes = 16;

inline vf load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf set1(float x) { return _mm512_set1_ps(x); }
inline vf zero() { return _mm512_setzero_ps(); }
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf sqrt(vf a) { return _mm512_sqrt_ps(a); }
inline vf fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }    // a·b + c
inline vf fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }  // c − a·b
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf abs(vf a) { return _mm512_abs_ps(a); }
inline vf round(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p · 2ⁿ for integral n in [−150, 128] (underflows to 0, overflows to +inf)
inline vf scale_pow2(vf p, vf n) { return _mm512_scalef_ps(p, n); }
// x < 0 ? a : b, lane by lane
inline vf select_negative(vf x, vf a, vf b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), b, a);
}
inline float reduce_add(vf v) { return _mm512_reduce_add_ps(v); }
// the lanes of each, in 256-bit halves added: [Σ lo + hi] (for reduce_add4)
inline __m256 fold256(vf v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
inline float reduce_max(vf v) { return _mm512_reduce_max_ps(v); }
// bf16 → f32 is a 16-bit shift
inline vf load_bf16(const bf16* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
// e4m3fn → f32 (dtype.h's f8e4m3_to_f32, lane by lane): a normal code's exponent rebiased (e + 120)
// and its fraction moved up; a subnormal one m · 2⁻⁹; 0x7f NaN; then the sign
inline vf load_f8e4m3(const f8e4m3* p) {
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i mag = _mm512_and_si512(x, _mm512_set1_epi32(0x7f));
  const __m512i normal = _mm512_slli_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(120 << 3)), 20);
  const __m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f)));
  __m512i r = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), normal, sub);
  r = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)), r, _mm512_set1_epi32(0x7fc00000));
  return _mm512_castsi512_ps(_mm512_or_si512(r, _mm512_slli_epi32(_mm512_xor_si512(x, mag), 24)));
}

// The first k lanes (0 < k < kLanes): loads leave the others 0, stores leave memory alone.
inline mask first(int64_t k) { return static_cast<mask>((1u << k) - 1); }
inline vf load(const float* p, mask m) { return _mm512_maskz_loadu_ps(m, p); }
inline void store(float* p, mask m, vf v) { _mm512_mask_storeu_ps(p, m, v); }
inline vf keep(mask m, vf v) { return _mm512_maskz_mov_ps(m, v); }  // the other lanes 0
inline mask greater_equal(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }

// Integer lanes of the same width, read as kLanes/2 × 64 bits (the dropout hash) or kLanes × 32.
using vi = __m512i;
inline vi iota64() { return _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0); }  // lane k holds k
inline vi set1_64(uint64_t x) { return _mm512_set1_epi64(static_cast<long long>(x)); }
inline vi add64(vi a, vi b) { return _mm512_add_epi64(a, b); }
inline vi mul64(vi a, vi b) { return _mm512_mullo_epi64(a, b); }  // a·b mod 2⁶⁴
template <int N> inline vi shr64(vi a) { return _mm512_srli_epi64(a, N); }
template <int N> inline vi shl64(vi a) { return _mm512_slli_epi64(a, N); }
inline vi bit_xor(vi a, vi b) { return _mm512_xor_si512(a, b); }
inline vi bit_and(vi a, vi b) { return _mm512_and_si512(a, b); }
inline vi bit_or(vi a, vi b) { return _mm512_or_si512(a, b); }
inline vf i32_to_f32(vi a) { return _mm512_cvtepi32_ps(a); }  // the 32-bit lanes as signed integers
#if QKV_GCC12_AVX512
#pragma GCC diagnostic pop
#endif

#elif QKV_SIMD

using vf = __m256;
using mask = __m256i;
constexpr int64_t kLanes = 8;

inline vf load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf set1(float x) { return _mm256_set1_ps(x); }
inline vf zero() { return _mm256_setzero_ps(); }
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf sqrt(vf a) { return _mm256_sqrt_ps(a); }
inline vf fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm256_min_ps(a, b); }
inline vf abs(vf a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
inline vf round(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// AVX2 has no scalef: 2ⁿ = 2^⌊n/2⌋ · 2^(n−⌊n/2⌋), each factor a normal f32 built from its exponent
// bits (both halves lie in [−75, 64]), so the range and the rounding of the product match scalef's.
inline vf scale_pow2(vf p, vf n) {
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i h1 = _mm256_srai_epi32(ni, 1), h2 = _mm256_sub_epi32(ni, h1);
  const __m256i bias = _mm256_set1_epi32(127);
  const vf f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, bias), 23));
  const vf f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
}
inline vf select_negative(vf x, vf a, vf b) {
  return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
}
inline float reduce_add(vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline __m256 fold256(vf v) { return v; }  // (for reduce_add4)
inline float reduce_max(vf v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
inline vf load_bf16(const bf16* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline vf load_f8e4m3(const f8e4m3* p) {
  const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7f));
  const __m256i normal = _mm256_slli_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(120 << 3)), 20);
  const __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f)));
  __m256i r = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc00000), _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
  return _mm256_castsi256_ps(_mm256_or_si256(r, _mm256_slli_epi32(_mm256_xor_si256(x, mag), 24)));
}

inline mask first(int64_t k) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline vf load(const float* p, mask m) { return _mm256_maskload_ps(p, m); }
inline void store(float* p, mask m, vf v) { _mm256_maskstore_ps(p, m, v); }
inline vf keep(mask m, vf v) { return _mm256_and_ps(_mm256_castsi256_ps(m), v); }
inline mask greater_equal(vf a, vf b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GE_OQ)); }

using vi = __m256i;
inline vi iota64() { return _mm256_set_epi64x(3, 2, 1, 0); }
inline vi set1_64(uint64_t x) { return _mm256_set1_epi64x(static_cast<long long>(x)); }
inline vi add64(vi a, vi b) { return _mm256_add_epi64(a, b); }
// AVX2 multiplies only 32 × 32 → 64 bits: a·b mod 2⁶⁴ = lo·lo + ((hi(a)·lo(b) + lo(a)·hi(b)) << 32).
inline vi mul64(vi a, vi b) {
  const vi cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                    _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(cross, 32));
}
template <int N> inline vi shr64(vi a) { return _mm256_srli_epi64(a, N); }
template <int N> inline vi shl64(vi a) { return _mm256_slli_epi64(a, N); }
inline vi bit_xor(vi a, vi b) { return _mm256_xor_si256(a, b); }
inline vi bit_and(vi a, vi b) { return _mm256_and_si256(a, b); }
inline vi bit_or(vi a, vi b) { return _mm256_or_si256(a, b); }
inline vf i32_to_f32(vi a) { return _mm256_cvtepi32_ps(a); }

#endif

#if QKV_SIMD
// out[0 … 3] = the lane sums of a, b, c and d (four horizontal sums in one: three hadds, one add)
inline void reduce_add4(vf a, vf b, vf c, vf d, float* out) {
  const __m256 ab = _mm256_hadd_ps(fold256(a), fold256(b)), cd = _mm256_hadd_ps(fold256(c), fold256(d));
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // [Σa Σb Σc Σd] in each 128-bit half, partly
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}
#endif

}  // namespace qkv::kernels::cpu::simd
