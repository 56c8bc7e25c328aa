// Small vector helpers for the hot loops, over simd.h's register (16 lanes on AVX-512, 8 on
// AVX2), scalar where the build targets neither. exp is a Cody–Waite range reduction + degree-6
// polynomial, accurate to ~2 ulp over the f32 range, with exp(-inf) = 0 exactly (masked scores)
// and overflow to +inf.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "qkv/core/rng.h"
#include "kernels/cpu/simd.h"
#include "kernels/dropout_mask.h"
#include "kernels/residual_gradient.h"

namespace qkv::kernels::cpu {

#if QKV_GCC12_AVX512  // (simd.h)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if QKV_SIMD
namespace simd {

// e^x lane by lane: x = n·ln2 + r, |r| ≤ ln2/2; e^r by polynomial; scaled by 2^n.
// exp_n does it for U registers at once, step by step across them: the U dependency chains are
// independent, so the core overlaps them (one register alone waits on the polynomial's latency).
template <int U>
inline void exp_n(vf (&x)[U]) {
  vf n[U], r[U], p[U];
  for (int u = 0; u < U; ++u) {
    x[u] = max(x[u], set1(-104.0f));  // below: result is 0 (also maps -inf → 0)
    x[u] = min(x[u], set1(88.8f));
    n[u] = round(mul(x[u], set1(1.44269504088896341f)));  // log2(e)
    r[u] = fnmadd(n[u], set1(0.693359375f), x[u]);         // ln2, high part
    r[u] = fnmadd(n[u], set1(-2.12194440e-4f), r[u]);      // ln2, low part
    p[u] = set1(1.9875691500e-4f);
  }
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    for (int u = 0; u < U; ++u) p[u] = fmadd(p[u], r[u], set1(c));
  for (int u = 0; u < U; ++u) x[u] = scale_pow2(fmadd(p[u], mul(r[u], r[u]), add(r[u], set1(1.0f))), n[u]);
}

inline vf exp(vf x) {
  vf a[1] = {x};
  exp_n(a);
  return a[0];
}

// σ(x) = 1 / (1 + e^−x);  tanh x = 2σ(2x) − 1 (the recurrent gates). sigmoid_n: σ of U registers
// at once into `out`, their exps overlapped as exp_n's.
template <int U>
inline void sigmoid_n(const vf (&x)[U], vf (&out)[U]) {
  for (int u = 0; u < U; ++u) out[u] = sub(zero(), x[u]);
  exp_n(out);
  for (int u = 0; u < U; ++u) out[u] = div(set1(1.0f), add(set1(1.0f), out[u]));
}

inline vf sigmoid(vf x) { return div(set1(1.0f), add(set1(1.0f), exp(sub(zero(), x)))); }
inline vf tanh(vf x) { return fmadd(set1(2.0f), sigmoid(add(x, x)), set1(-1.0f)); }

// Φ(x), the standard normal CDF, for GELU: Φ(x) = ½ erfc(−x/√2), with erfc(z) for z = |x|/√2 ≥ 0
// from the Chebyshev fit of Numerical Recipes (§6.2; relative error < 1.2e-7 everywhere):
//   t = 1/(1 + z/2),  erfc(z) ≈ t·exp(−z² − 1.26551223 + t(1.00002368 + t(0.37409196 + …)))
// so the lower tail (x ≪ 0), where GELU is tiny, keeps its relative accuracy. normal_cdf_n: for U
// registers at once, as exp_n.
template <int U>
inline void normal_cdf_n(const vf (&x)[U], vf (&out)[U]) {
  vf z[U], t[U], p[U];
  for (int u = 0; u < U; ++u) {
    z[u] = mul(abs(x[u]), set1(0.70710678118654752f));
    t[u] = div(set1(1.f), fmadd(z[u], set1(0.5f), set1(1.f)));
    p[u] = set1(0.17087277f);
  }
  for (float c : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                  1.00002368f, -1.26551223f})
    for (int u = 0; u < U; ++u) p[u] = fmadd(p[u], t[u], set1(c));
  vf e[U];
  for (int u = 0; u < U; ++u) e[u] = fnmadd(z[u], z[u], p[u]);
  exp_n(e);
  for (int u = 0; u < U; ++u) {
    const vf q = mul(mul(t[u], e[u]), set1(0.5f));  // P(X > |x|)
    out[u] = select_negative(x[u], q, sub(set1(1.f), q));
  }
}

inline vf normal_cdf(vf x) {
  const vf a[1] = {x};
  vf c[1];
  normal_cdf_n(a, c);
  return c[0];
}

// The register loop of a kernel over exp_n / normal_cdf_n: step(std::integral_constant<int, U>{}, i)
// handles the U registers from element i, with U = kInterleave while they fit before `end`, then
// U = 1 (four independent chains keep the FMA units busy where one waits on latency: Zen 3,
// one core, Φ 1.6 → 1.1 ns per element, the same bits). Returns where the tail starts.
inline constexpr int kInterleave = 4;
template <typename F>
inline int64_t by_registers(int64_t i, int64_t end, F&& step) {
  for (; i + kInterleave * kLanes <= end; i += kInterleave * kLanes) step(std::integral_constant<int, kInterleave>{}, i);
  for (; i + kLanes <= end; i += kLanes) step(std::integral_constant<int, 1>{}, i);
  return i;
}

}  // namespace simd
#endif

#if QKV_SIMD
using simd::kLanes;

// Dropout's keep decisions for counters c0 … c0+kLanes−1 (c0 even), lane i set iff
// Generator::paired_uniform(seed, c0+i) ≥ p: the same splitmix64 hashes (Generator::bits) of
// k = c0/2 … c0/2+kLanes/2−1, one per 64-bit lane; lane k's bits 40–63 and 8–31 become the 32-bit
// lanes 2k and 2k+1, so the mask equals the scalar one exactly.
inline simd::mask dropout_keep(uint64_t seed, uint64_t c0, float p) {
  namespace s = simd;
  const s::vi c = s::add64(s::set1_64(c0 >> 1), s::iota64());
  s::vi z = s::add64(s::mul64(c, s::set1_64(Generator::kCounterMul)),
                     s::set1_64(seed * Generator::kSeedMul + Generator::kOffset));
  z = s::mul64(s::bit_xor(z, s::shr64<30>(z)), s::set1_64(Generator::kMix1));
  z = s::mul64(s::bit_xor(z, s::shr64<27>(z)), s::set1_64(Generator::kMix2));
  z = s::bit_xor(z, s::shr64<31>(z));
  const s::vi u24 = s::bit_or(s::shr64<40>(z), s::shl64<32>(s::bit_and(s::shr64<8>(z), s::set1_64(0xFFFFFF))));
  return s::greater_equal(s::mul(s::i32_to_f32(u24), s::set1(1.0f / 16777216.0f)), s::set1(p));
}
#endif

// y[i] = m(x[i], i) for i < n (kernels/dropout_mask.h): dropout_apply's loop, and the dropped residual
// of the fused norms, the same bits. The vector loop starts on an even counter (one hash, two lanes).
inline void dropout_row(const float* x, float* y, int64_t n, const DropoutMask& mask) {
  const DropoutMask m = mask.resolved();
  int64_t i = 0;
#if QKV_SIMD
  if (i < n && (m.counter & 1)) y[i] = m(x[i], 0), ++i;
  const simd::vf vs = simd::set1(m.keep_scale);
  for (; i + kLanes <= n; i += kLanes) {
    const simd::mask keep = dropout_keep(m.seed, m.counter + static_cast<uint64_t>(i), m.p);
    simd::store(y + i, simd::keep(keep, simd::mul(simd::load(x + i), vs)));
  }
#endif
  for (; i < n; ++i) y[i] = m(x[i], static_cast<uint64_t>(i));
}

// s = x + m(res) over one row of n that starts at element `at` of the dense residual (the fused
// norms' residual; m: kernels/dropout_mask.h, inactive: s = x + res): the dropped row is written to s
// first, as dropout_apply writes it, then x added to it — the bits of add(x, dropout(res)).
inline void add_dropped_row(const float* x, const float* res, const DropoutMask& m, int64_t at, float* s, int64_t n) {
  if (m.active()) {
    dropout_row(res, s, n, m.from(static_cast<uint64_t>(at)));
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) s[j] = x[j] + s[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) s[j] = x[j] + res[j];
  }
}

// dst[0, n) = bf16(src[0, n)) on this thread: convert_to_bf16's kernel, and the bf16 copy an op writes
// of its output in its own pass (ops/autocast.h's activation copies) — so both have the same bits.
inline void bf16_row(const float* src, bf16* dst, int64_t n) {
#if defined(__AVX512BF16__)
  // vcvtne2ps2bf16 rounds to nearest even, as f32_to_bf16 does (it also flushes f32 subnormals,
  // below 1.2e-38, to zero; bf16 training never needs them). Every element goes through it, the
  // tail's too (masked), so an element's bits do not depend on where a row or a thread's range starts.
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(reinterpret_cast<void*>(dst + i), reinterpret_cast<__m512i>(h));
  }
  if (i < n) {
    const int left = static_cast<int>(n - i);  // 1 … 31
    const __mmask32 m = (__mmask32{1} << left) - 1;
    const __mmask16 lo = static_cast<__mmask16>(m), hi = static_cast<__mmask16>(m >> 16);
    __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + i + 16), _mm512_maskz_loadu_ps(lo, src + i));
    _mm512_mask_storeu_epi16(reinterpret_cast<void*>(dst + i), m, reinterpret_cast<__m512i>(h));
  }
#else
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
#endif
}

// The residual's part of a fused norm's backward over one row of n that starts at element `at`
// (kernels/residual_gradient.h): dx += dsum, then dres = drop(dx) — after the norm's dx is written,
// each its own rounded operation —, then the residual's gradient's bf16 copy.
inline void residual_gradient_row(const ResidualGradient& res, int64_t at, float* dx, int64_t n) {
  if (res.dsum) {
    const float* ds = res.dsum + at;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dx[j] = dx[j] + ds[j];
  }
  if (res.dres) dropout_row(dx, res.dres + at, n, res.drop.from(static_cast<uint64_t>(at)));
  if (res.grad16) bf16_row(res.dres ? res.dres + at : dx, res.grad16 + at, n);
}

// y[i] = exp(x[i] - shift); returns Σ y[i].
inline float exp_shift_sum(const float* x, float* y, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.f;
#if QKV_SIMD
  const simd::vf vs = simd::set1(shift);
  simd::vf acc = simd::zero();
  i = simd::by_registers(0, n, [&]<int U>(std::integral_constant<int, U>, int64_t at) {
    simd::vf e[U];  // the exps overlap across registers (exp_n); the sum still adds them in order
    for (int u = 0; u < U; ++u) e[u] = simd::sub(simd::load(x + at + u * kLanes), vs);
    simd::exp_n(e);
    for (int u = 0; u < U; ++u) {
      simd::store(y + at + u * kLanes, e[u]);
      acc = simd::add(acc, e[u]);
    }
  });
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

// A stored element as f32: itself, or a bf16 or e4m3 one widened (exactly: dtype.h), one at a time
// or a register's lanes at a time.
inline float widen(float x) { return x; }
inline float widen(bf16 x) { return bf16_to_f32(x); }
inline float widen(f8e4m3 x) { return f8e4m3_to_f32(x); }
#if QKV_SIMD
inline simd::vf load_widened(const float* p) { return simd::load(p); }
inline simd::vf load_widened(const bf16* p) { return simd::load_bf16(p); }
inline simd::vf load_widened(const f8e4m3* p) { return simd::load_f8e4m3(p); }
#endif

// dst[0, n) = the e4m3 codes src[0, n) as f32 (f8e4m3_to_f32's values, bit for bit). With AVX-512BW,
// a table: every e4m3 value is a bf16 one exactly (8 exponent bits, 7 fraction bits), so each code's
// magnitude looks its bf16 bits up among 128 (NaN's too; no arithmetic, so no subnormal to flush),
// two 64-entry permutes and a blend on bit 6, 32 codes at a time; its sign is bit 15; bf16 → f32 is a
// shift. Half the instructions of load_f8e4m3's arithmetic, which the other builds use.
inline void widen_f8e4m3_row(const f8e4m3* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512BW__)
  alignas(64) static const auto table = [] {
    std::array<uint16_t, 128> t{};
    for (int c = 0; c < 128; ++c) t[static_cast<size_t>(c)] = static_cast<uint16_t>(f32_bits(f8e4m3_to_f32(f8e4m3{static_cast<uint8_t>(c)})) >> 16);
    return t;
  }();
  const __m512i t0 = _mm512_load_si512(table.data()), t1 = _mm512_load_si512(table.data() + 32),
                t2 = _mm512_load_si512(table.data() + 64), t3 = _mm512_load_si512(table.data() + 96);
  for (; i + 32 <= n; i += 32) {
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m512i low = _mm512_permutex2var_epi16(t0, x, t1), high = _mm512_permutex2var_epi16(t2, x, t3);  // bits 0 … 5
    __m512i h = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(x, _mm512_set1_epi16(0x40)), low, high);
    h = _mm512_ternarylogic_epi32(_mm512_slli_epi16(x, 8), h, _mm512_set1_epi16(static_cast<int16_t>(0x8000)), 0xe4);  // sign from x
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16)));
    _mm512_storeu_ps(dst + i + 16,
                     _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16)));
  }
#elif QKV_SIMD
  for (; i + kLanes <= n; i += kLanes) simd::store(dst + i, simd::load_f8e4m3(src + i));
#endif
  for (; i < n; ++i) dst[i] = f8e4m3_to_f32(src[i]);
}

// Σ a[i] · b[i], b f32, bf16 or e4m3 (each widened as it is read)
template <typename B>
inline float dot(const float* a, const B* b, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if QKV_SIMD
  simd::vf acc = simd::zero();
  for (; i + kLanes <= n; i += kLanes) acc = simd::fmadd(simd::load(a + i), load_widened(b + i), acc);
  s = simd::reduce_add(acc);
#endif
  for (; i < n; ++i) s += a[i] * widen(b[i]);
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

// x ← cap · tanh(x / cap) over a row (attention's soft-capped scores, kernels/attention.inc): the
// register tanh on every lane, a short tail's lanes masked, so that a score and its recomputation in
// the backward round alike wherever they fall in a row.
inline void softcap_row(float* x, int64_t n, float cap) {
  const float inv = 1.f / cap;
  int64_t i = 0;
#if QKV_SIMD
  const simd::vf vc = simd::set1(cap), vi = simd::set1(inv);
  for (; i < n; i += kLanes) {
    const simd::mask m = simd::first(std::min<int64_t>(kLanes, n - i));
    simd::store(x + i, m, simd::mul(vc, simd::tanh(simd::mul(simd::load(x + i, m), vi))));
  }
#endif
  for (; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

// d ← d ∘ (1 − (c / cap)²) over a row: the soft cap's derivative, c its capped scores.
inline void softcap_backward_row(float* d, const float* c, int64_t n, float cap) {
  const float inv = 1.f / cap;
  for (int64_t i = 0; i < n; ++i) {
    const float t = c[i] * inv;
    d[i] *= 1.f - t * t;
  }
}

#if QKV_GCC12_AVX512
#pragma GCC diagnostic pop
#endif

}  // namespace qkv::kernels::cpu
