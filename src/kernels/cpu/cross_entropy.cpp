#include "qkv/kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstring>

#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

namespace {

// Σ_c exp(x_c − m) and Σ_c (x_c − m), in one pass over the row.
void exp_and_plain_sums(const float* x, int64_t n, float m, float* sum_exp, float* sum_x) {
  int64_t i = 0;
  float se = 0.f, sx = 0.f;
#if QKV_AVX512
  const __m512 vm = _mm512_set1_ps(m);
  __m512 ae = _mm512_setzero_ps(), ax = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), vm);
    ae = _mm512_add_ps(ae, exp512(d));
    ax = _mm512_add_ps(ax, d);
  }
  se = _mm512_reduce_add_ps(ae), sx = _mm512_reduce_add_ps(ax);
#endif
  // The rest (all of the row in a scalar build) in double: a serial f32 sum over a wide vocabulary
  // row would lose the last digits of log p.
  double de = se, dx = sx;
  for (; i < n; ++i) {
    de += std::exp(x[i] - m);
    dx += x[i] - m;
  }
  *sum_exp = static_cast<float>(de), *sum_x = static_cast<float>(dx);
}

}  // namespace

void cross_entropy_forward(const float* x, const int32_t* y, int64_t N, int64_t C, float eps, int64_t ignore,
                           float* lse, float* loss) {
  parallel_for(N, 1 + 16384 / (C + 1), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* xr = x + n * C;
      if (y[n] == ignore) {
        lse[n] = 0.f, loss[n] = 0.f;
        continue;
      }
      const float m = max_of(xr, C);
      float se, sx;
      exp_and_plain_sums(xr, C, m, &se, &sx);
      const float log_s = std::log(se);  // lse = m + log s, kept apart for precision below
      lse[n] = m + log_s;
      // x_y − lse = (x_y − m) − log s;  Σ_c (x_c − lse) = Σ_c (x_c − m) − C log s
      const double logp_y = (static_cast<double>(xr[y[n]]) - m) - log_s;
      const double sum_logp = static_cast<double>(sx) - static_cast<double>(C) * log_s;
      loss[n] = static_cast<float>(-(1.0 - eps) * logp_y - eps / static_cast<double>(C) * sum_logp);
    }
  });
}

void cross_entropy_backward(const float* x, const int32_t* y, const float* lse, const float* scale, int64_t N,
                            int64_t C, float eps, int64_t ignore, float* dx) {
  const float floor = eps / static_cast<float>(C);
  parallel_for(N, 1 + 16384 / (C + 1), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      float* d = dx + n * C;
      if (y[n] == ignore) {
        std::memset(d, 0, static_cast<size_t>(C) * sizeof(float));
        continue;
      }
      const float* xr = x + n * C;
      const float s = scale[n], l = lse[n];
      int64_t c = 0;
#if QKV_AVX512
      const __m512 vl = _mm512_set1_ps(l), vf = _mm512_set1_ps(floor), vs = _mm512_set1_ps(s);
      for (; c + 16 <= C; c += 16) {
        const __m512 p = exp512(_mm512_sub_ps(_mm512_loadu_ps(xr + c), vl));
        _mm512_storeu_ps(d + c, _mm512_mul_ps(_mm512_sub_ps(p, vf), vs));
      }
#endif
      for (; c < C; ++c) d[c] = (std::exp(xr[c] - l) - floor) * s;
      d[y[n]] -= (1.f - eps) * s;
    }
  });
}

}  // namespace qkv::kernels::cpu
