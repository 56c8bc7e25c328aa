#include "kernels/cpu/adam.h"

#include <cmath>

#include "kernels/cpu/simd.h"
#include "kernels/cpu/vec.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {
namespace {

// One tensor's update; Scaled: the gradient multiplied by s first (rounded to f32 on its own, as
// clip_grad_norm_'s in-place scaling stores it); copy (or null): bf16(θ), each piece of kPiece
// elements right after its update, while it is in cache (bf16_row: convert_to_bf16's rounding).
constexpr int64_t kPiece = 4096;  // a multiple of the vector width: the same elements take the vector loop

template <bool Scaled>
void update(float* p, const float* gp, float* m, float* v, int64_t n, const AdamCoefficients& c, float s,
            bf16* copy) {
  const float b1 = c.beta1, b2 = c.beta2, eps = c.eps, step_size = c.step_size, inv_sqrt_bc2 = c.inv_sqrt_bc2,
              decay = c.decay, l2 = c.l2;
  parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
#if QKV_SIMD
    const simd::vf vb1 = simd::set1(b1), vb2 = simd::set1(b2), vc1 = simd::set1(1.f - b1), vc2 = simd::set1(1.f - b2),
                   vdecay = simd::set1(decay), vl2 = simd::set1(l2), vstep = simd::set1(step_size),
                   vinv = simd::set1(inv_sqrt_bc2), veps = simd::set1(eps), vs = simd::set1(s);
#endif
    for (int64_t a = lo; a < hi; a += kPiece) {
      const int64_t end = a + kPiece < hi ? a + kPiece : hi;
      int64_t i = a;
#if QKV_SIMD
      for (; i + simd::kLanes <= end; i += simd::kLanes) {
        const simd::vf pi = simd::load(p + i);
        const simd::vf g = Scaled ? simd::mul(simd::load(gp + i), vs) : simd::load(gp + i);  // g · s
        const simd::vf gi = simd::fmadd(vl2, pi, g);                                         // g + l2·θ
        const simd::vf mi = simd::fmadd(vb1, simd::load(m + i), simd::mul(vc1, gi));        // β₁ m + (1 − β₁) g
        const simd::vf vi = simd::fmadd(vb2, simd::load(v + i), simd::mul(vc2, simd::mul(gi, gi)));  // β₂ v + (1 − β₂) g²
        const simd::vf denom = simd::fmadd(simd::sqrt(vi), vinv, veps);                      // √v · inv_sqrt_bc2 + ε
        simd::store(m + i, mi);
        simd::store(v + i, vi);
        simd::store(p + i, simd::fnmadd(vstep, simd::div(mi, denom), simd::mul(pi, vdecay)));
      }
#endif
      for (; i < end; ++i) {
        // std::fma: g + l2·θ with one rounding, as the vector loop (and not contracted with g · s)
        const float gi = std::fma(l2, p[i], Scaled ? gp[i] * s : gp[i]);
        m[i] = b1 * m[i] + (1.f - b1) * gi;
        v[i] = b2 * v[i] + (1.f - b2) * gi * gi;
        p[i] = p[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
      }
      if (copy) bf16_row(p + a, copy + a, end - a);
    }
  });
}

}  // namespace

// On the CPU the list is a loop: each tensor's update is already one pass over its four arrays.
void adam_update_list(float* const* param, const float* const* grad, float* const* exp_avg, float* const* exp_avg_sq,
                      const int64_t* n, int64_t count, const AdamCoefficients& coefficients,
                      const float* step_numbers, const float* clip_factor, bf16* const* bf16_copy) {
  const AdamCoefficients c = with_step_numbers(coefficients, step_numbers);
  for (int64_t i = 0; i < count; ++i) {
    bf16* copy = bf16_copy ? bf16_copy[i] : nullptr;
    if (clip_factor) update<true>(param[i], grad[i], exp_avg[i], exp_avg_sq[i], n[i], c, *clip_factor, copy);
    else update<false>(param[i], grad[i], exp_avg[i], exp_avg_sq[i], n[i], c, 1.f, copy);
  }
}

}  // namespace qkv::kernels::cpu
