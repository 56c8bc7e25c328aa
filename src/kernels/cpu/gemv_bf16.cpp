#include "kernels/cpu/gemv_bf16.h"

#include "qkv/core/parallel.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

namespace {

// Σ_k x[k] · f32(w[k])
inline float dot_bf16(const float* x, const bf16* w, int64_t K) {
  int64_t k = 0;
  float s = 0.f;
#if QKV_SIMD
  simd::vf a0 = simd::zero(), a1 = simd::zero();
  for (; k + 2 * kLanes <= K; k += 2 * kLanes) {
    a0 = simd::fmadd(simd::load(x + k), simd::load_bf16(w + k), a0);
    a1 = simd::fmadd(simd::load(x + k + kLanes), simd::load_bf16(w + k + kLanes), a1);
  }
  s = simd::reduce_add(simd::add(a0, a1));
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
