#include "qkv/kernels/cpu/gemv_bf16.h"

#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

namespace {

// Σ_k x[k] · f32(w[k])
inline float dot_bf16(const float* x, const bf16* w, int64_t K) {
  int64_t k = 0;
  float s = 0.f;
#if QKV_AVX512
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  auto widen = [](const bf16* p) {  // bf16 → f32 is a 16-bit shift
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  };
  for (; k + 32 <= K; k += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), widen(w + k), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k + 16), widen(w + k + 16), a1);
  }
  s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
#endif
  for (; k < K; ++k) s += x[k] * bf16_to_f32(w[k]);
  return s;
}

}  // namespace

void gemv_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const bf16* W, const float* bias,
               float* y, int64_t ldy) {
  // Threads split the output features, so each reads its own share of W once for all M rows.
  parallel_for(N, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const bf16* w = W + n * K;
      for (int64_t m = 0; m < M; ++m) y[m * ldy + n] = dot_bf16(x + m * ldx, w, K) + (bias ? bias[n] : 0.f);
    }
  });
}

}  // namespace qkv::kernels::cpu
