#include "kernels/cpu/gemv.h"

#include "qkv/core/parallel.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

namespace {

// w[k] as f32 lanes, whichever the weights' type
#if QKV_SIMD
inline simd::vf load_weights(const bf16* w) { return simd::load_bf16(w); }
inline simd::vf load_weights(const float* w) { return simd::load(w); }
#endif
inline float weight(const bf16 w) { return bf16_to_f32(w); }
inline float weight(const float w) { return w; }

// Σ_k x[k] · f32(w[k])
template <typename T>
inline float dot(const float* x, const T* w, int64_t K) {
  int64_t k = 0;
  float s = 0.f;
#if QKV_SIMD
  simd::vf a0 = simd::zero(), a1 = simd::zero();
  for (; k + 2 * kLanes <= K; k += 2 * kLanes) {
    a0 = simd::fmadd(simd::load(x + k), load_weights(w + k), a0);
    a1 = simd::fmadd(simd::load(x + k + kLanes), load_weights(w + k + kLanes), a1);
  }
  s = simd::reduce_add(simd::add(a0, a1));
#endif
  for (; k < K; ++k) s += x[k] * weight(w[k]);
  return s;
}

// y[m, n] = Σ_k x[m, k] · f32(W[n, k]) (+ b[n]): x [M, K], W [N, K], y [M, N]
template <typename T>
void gemv(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const T* W, const float* bias, float* y,
          int64_t ldy) {
  // Threads split the output features, so each reads its own share of W once for all M rows.
  parallel_for(N, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const T* w = W + n * K;
      for (int64_t m = 0; m < M; ++m) y[m * ldy + n] = dot(x + m * ldx, w, K) + (bias ? bias[n] : 0.f);
    }
  });
}

}  // namespace

void gemv_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const bf16* W, const float* bias, float* y,
               int64_t ldy) {
  gemv(M, N, K, x, ldx, W, bias, y, ldy);
}

void gemv_f32(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* W, const float* bias, float* y,
              int64_t ldy) {
  gemv(M, N, K, x, ldx, W, bias, y, ldy);
}

}  // namespace qkv::kernels::cpu
