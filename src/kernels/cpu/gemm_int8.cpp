#include "kernels/cpu/gemm_int8.h"

#include <oneapi/dnnl/dnnl.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

constexpr float kWeightLevels = 127.f, kActivationLevels = 63.f;
constexpr uint8_t kZeroPoint = 64;  // X8 + 64 ∈ [1, 127]: oneDNN's u8 operand

// One row of activations: returns s = max|r| / 63 and writes round(r / s) + 64 (round half to even,
// as nearbyint; eight lanes at a time where the build has AVX2).
float quantize_row(const float* r, int64_t K, uint8_t* q) {
  int64_t k = 0;
  float amax = 0.f;
#if defined(__AVX2__)
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 vmax = _mm256_setzero_ps();
  for (; k + 8 <= K; k += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(r + k)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  for (float v : lanes) amax = std::max(amax, v);
#endif
  for (; k < K; ++k) amax = std::max(amax, std::fabs(r[k]));
  const float s = amax > 0.f ? amax / kActivationLevels : 1.f, inv = 1.f / s;
  k = 0;
#if defined(__AVX2__)
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-kActivationLevels), hi = _mm256_set1_ps(kActivationLevels);
  const __m256i zp = _mm256_set1_epi32(kZeroPoint);
  for (; k + 8 <= K; k += 8) {
    __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(r + k), vinv), lo), hi);
    __m256i i = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), zp);
    // 8 int32 in [1, 127] → 8 bytes
    __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + k), _mm_packus_epi16(p16, p16));
  }
#endif
  for (; k < K; ++k)
    q[k] = static_cast<uint8_t>(
        static_cast<int>(std::clamp(std::nearbyint(r[k] * inv), -kActivationLevels, kActivationLevels)) + kZeroPoint);
  return s;
}

// A decoding step's few rows (M ≤ kGemvRows): one pass over the weights, each row of W8 read once
// for all M activation rows (oneDNN's GEMM packs the weights first, which a handful of rows does
// not repay). acc[m, n] = Σ_k (xq[m,k] − 64) · W8[n,k] = Σ_k xq·W8 − 64 · Σ_k W8.
constexpr int64_t kGemvRows = 8;

void gemv_u8s8(int64_t M, int64_t N, int64_t K, const uint8_t* xq, const int8_t* W8, int64_t ldw, int32_t* acc) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const int8_t* w = W8 + n * ldw;
      int32_t sums[kGemvRows] = {}, wsum = 0;
      int64_t k = 0;
#if defined(__AVX2__)
      // _mm256_maddubs_epi16: u8 · s8 pairs summed into int16 — never saturating here, since
      // xq ≤ 127 and |W8| ≤ 127 (2 · 127 · 127 < 2¹⁵); _mm256_madd_epi16 by 1 widens to int32
      const __m256i ones16 = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
      __m256i vacc[kGemvRows], vw = _mm256_setzero_si256();
      for (int64_t m = 0; m < M; ++m) vacc[m] = _mm256_setzero_si256();
      for (; k + 32 <= K; k += 32) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
        vw = _mm256_add_epi32(vw, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, wv), ones16));
        for (int64_t m = 0; m < M; ++m) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + m * K + k));
          vacc[m] = _mm256_add_epi32(vacc[m], _mm256_madd_epi16(_mm256_maddubs_epi16(xv, wv), ones16));
        }
      }
      auto hsum = [](__m256i v) {
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        return _mm_cvtsi128_si32(s);
      };
      wsum = hsum(vw);
      for (int64_t m = 0; m < M; ++m) sums[m] = hsum(vacc[m]);
#endif
      for (; k < K; ++k) {
        wsum += w[k];
        for (int64_t m = 0; m < M; ++m) sums[m] += static_cast<int32_t>(xq[m * K + k]) * w[k];
      }
      for (int64_t m = 0; m < M; ++m) acc[m * N + n] = sums[m] - static_cast<int32_t>(kZeroPoint) * wsum;
    }
  });
}

}  // namespace

void quantize_rows_int8(int64_t N, int64_t K, const float* W, int8_t* W8, float* scale) {
  parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* w = W + n * K;
      float amax = 0.f;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(w[k]));
      // s_w = max|W[n,:]| / 127; W8 = round(W / s_w)
      const float s = amax > 0.f ? amax / kWeightLevels : 1.f;
      const float inv = 1.f / s;
      for (int64_t k = 0; k < K; ++k)
        W8[n * K + k] = static_cast<int8_t>(std::clamp(std::nearbyint(w[k] * inv), -kWeightLevels, kWeightLevels));
      scale[n] = s;
    }
  });
}

void linear_int8(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const int8_t* W8, int64_t ldw,
                 const float* scale, const float* bias, float* y, int64_t ldy) {
  if (M <= 0 || N <= 0) return;
  // per thread, reused across calls: the quantized activations, their scales, the int32 sums
  thread_local std::vector<uint8_t> xq;
  thread_local std::vector<float> sx;
  thread_local std::vector<int32_t> acc;
  xq.resize(static_cast<size_t>(M * K));
  sx.resize(static_cast<size_t>(M));
  acc.resize(static_cast<size_t>(M * N));
  uint8_t* xq_p = xq.data();
  float* sx_p = sx.data();
  int32_t* acc_p = acc.data();
  // s_x[m] = max|x[m,:]| / 63; X8 = round(x / s_x), stored + 64
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* r = x + m * ldx;
      const float s = quantize_row(r, K, xq_p + m * K);
      sx_p[m] = s;
    }
  });
  // acc = (Xq − 64) · W8ᵀ, exact in int32 (K · 63 · 127 < 2³¹ for K < 268,000): the same integers
  // either way, so a decoding step gives the same numbers whichever path its batch takes
  if (M <= kGemvRows) {
    gemv_u8s8(M, N, K, xq_p, W8, ldw, acc_p);
  } else {
    const int32_t co = 0;
    const dnnl_status_t st = dnnl_gemm_u8s8s32('N', 'T', 'F', M, N, K, 1.f, xq_p, K, kZeroPoint, W8, ldw, 0, 0.f,
                                               acc_p, N, &co);
    QKV_CHECK(st == dnnl_success, "linear_int8: oneDNN's dnnl_gemm_u8s8s32 failed (status ", static_cast<int>(st),
              ") for M=", M, " N=", N, " K=", K);
  }
  // y = s_x[m] · s_w[n] · acc (+ b)
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const int32_t* a = acc_p + m * N;
      float* out = y + m * ldy;
      const float s = sx_p[m];
      if (bias)
        for (int64_t n = 0; n < N; ++n) out[n] = static_cast<float>(a[n]) * (s * scale[n]) + bias[n];
      else
        for (int64_t n = 0; n < N; ++n) out[n] = static_cast<float>(a[n]) * (s * scale[n]);
    }
  });
}

}  // namespace qkv::kernels::cpu
