#include "kernels/cpu/additive_score.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vec.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

// tanh x = 2σ(2x) − 1, as simd::tanh (the lanes and the tail agree)
float tanh_s(float x) { return 2.0f / (1.0f + std::exp(-(x + x))) - 1.0f; }

// Σ_a v_a tanh(q_a + k_a)
float score(const float* q, const float* k, const float* v, int64_t A) {
  int64_t a = 0;
  float sum = 0.f;
#if QKV_SIMD
  simd::vf acc0 = simd::zero(), acc1 = simd::zero();
  for (; a + 2 * simd::kLanes <= A; a += 2 * simd::kLanes) {
    acc0 = simd::fmadd(simd::load(v + a), simd::tanh(simd::add(simd::load(q + a), simd::load(k + a))), acc0);
    const int64_t b = a + simd::kLanes;
    acc1 = simd::fmadd(simd::load(v + b), simd::tanh(simd::add(simd::load(q + b), simd::load(k + b))), acc1);
  }
  for (; a + simd::kLanes <= A; a += simd::kLanes)
    acc0 = simd::fmadd(simd::load(v + a), simd::tanh(simd::add(simd::load(q + a), simd::load(k + a))), acc0);
  sum = simd::reduce_add(simd::add(acc0, acc1));
#endif
  for (; a < A; ++a) sum += v[a] * tanh_s(q[a] + k[a]);
  return sum;
}

// g_a = de v_a (1 − τ_a²) added to dq and dk; de τ_a added to dv
void score_backward(const float* q, const float* k, const float* v, float de, float* dq, float* dk, float* dv,
                    int64_t A) {
  int64_t a = 0;
#if QKV_SIMD
  const simd::vf d = simd::set1(de), one = simd::set1(1.f);
  for (; a + simd::kLanes <= A; a += simd::kLanes) {
    const simd::vf t = simd::tanh(simd::add(simd::load(q + a), simd::load(k + a)));
    const simd::vf g = simd::mul(simd::mul(d, simd::load(v + a)), simd::fnmadd(t, t, one));
    simd::store(dq + a, simd::add(simd::load(dq + a), g));
    simd::store(dk + a, simd::add(simd::load(dk + a), g));
    simd::store(dv + a, simd::fmadd(d, t, simd::load(dv + a)));
  }
#endif
  for (; a < A; ++a) {
    const float t = tanh_s(q[a] + k[a]), g = de * v[a] * (1.f - t * t);
    dq[a] += g, dk[a] += g, dv[a] += de * t;
  }
}

}  // namespace

void additive_score_forward(const float* q, const float* k, const float* v, float* e, int64_t B, int64_t T, int64_t S,
                            int64_t A) {
  // one (sentence, query) row per task: S scores of A terms each
  parallel_for(B * T, std::max<int64_t>(1, 32768 / std::max<int64_t>(S * A, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const float* kb = k + (bt / T) * S * A;
      for (int64_t j = 0; j < S; ++j) e[bt * S + j] = score(q + bt * A, kb + j * A, v, A);
    }
  });
}

void additive_score_backward(const float* q, const float* k, const float* v, const float* de, float* dq, float* dk,
                             float* dv, int64_t B, int64_t T, int64_t S, int64_t A) {
  // by sentence (dk_j sums over that sentence's queries); dv: one partial sum per chunk of sentences
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(num_threads(), B));
  std::vector<float> dv_part(static_cast<size_t>(chunks * A), 0.f);
  parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> q_buf(static_cast<size_t>(dq ? 0 : T * A)), k_buf(static_cast<size_t>(dk ? 0 : S * A));
    for (int64_t c = lo; c < hi; ++c) {
      for (int64_t b = c * B / chunks; b < (c + 1) * B / chunks; ++b) {
        float* dqb = dq ? dq + b * T * A : q_buf.data();
        float* dkb = dk ? dk + b * S * A : k_buf.data();
        std::memset(dqb, 0, sizeof(float) * static_cast<size_t>(T * A));
        std::memset(dkb, 0, sizeof(float) * static_cast<size_t>(S * A));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < S; ++j) {
            const float d = de[(b * T + t) * S + j];
            if (d != 0.f)  // masked positions (zero weight) pass no gradient
              score_backward(q + (b * T + t) * A, k + (b * S + j) * A, v, d, dqb + t * A, dkb + j * A,
                             dv_part.data() + c * A, A);
          }
      }
    }
  });
  if (dv) {
    std::memset(dv, 0, sizeof(float) * static_cast<size_t>(A));
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t a = 0; a < A; ++a) dv[a] += dv_part[static_cast<size_t>(c * A + a)];
  }
}

}  // namespace qkv::kernels::cpu
