#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/vec.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

void check_targets(const int32_t* y, int64_t N, int64_t C, int64_t ignore) {
  for (int64_t n = 0; n < N; ++n)
    QKV_CHECK(y[n] == ignore || (y[n] >= 0 && y[n] < C), "cross_entropy: target ", y[n], " at row ", n,
              " is outside [0, ", C, ")");
}

namespace {

// Σ_c exp(x_c − m) and Σ_c (x_c − m), in one pass over the row.
void exp_and_plain_sums(const float* x, int64_t n, float m, float* sum_exp, float* sum_x) {
  int64_t i = 0;
  float se = 0.f, sx = 0.f;
#if QKV_SIMD
  const simd::vf vm = simd::set1(m);
  simd::vf ae = simd::zero(), ax = simd::zero();
  for (; i + kLanes <= n; i += kLanes) {
    const simd::vf d = simd::sub(simd::load(x + i), vm);
    ae = simd::add(ae, simd::exp(d));
    ax = simd::add(ax, d);
  }
  se = simd::reduce_add(ae), sx = simd::reduce_add(ax);
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

void cross_entropy_reduce(const float* loss, const int32_t* y, int64_t N, int64_t ignore, bool mean, float* out,
                          float* divisor) {
  const double s = sum_f64(loss, N);
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) count += y[n] != ignore;
  // (PyTorch: a mean over zero counted rows is NaN; here 0, with zero gradients)
  *out = static_cast<float>(!mean ? s : count ? s / static_cast<double>(count) : 0.0);
  *divisor = mean ? static_cast<float>(count) : 1.f;
}

void cross_entropy_backward(const float* x, const int32_t* y, const float* lse, const float* g, int64_t g_stride,
                            const float* divisor, int64_t N, int64_t C, float eps, int64_t ignore, float* dx,
                            bf16* dx16) {
  const float floor = eps / static_cast<float>(C), dv = divisor ? *divisor : 1.f;
  parallel_for(N, 1 + 16384 / (C + 1), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      float* d = dx + n * C;
      if (y[n] == ignore) {
        std::memset(d, 0, static_cast<size_t>(C) * sizeof(float));
        if (dx16) bf16_row(d, dx16 + n * C, C);
        continue;
      }
      const float* xr = x + n * C;
      const float s = dv != 0.f ? g[n * g_stride] / dv : 0.f, l = lse[n];
      int64_t c = 0;
#if QKV_SIMD
      const simd::vf vl = simd::set1(l), vfloor = simd::set1(floor), vs = simd::set1(s);
      for (; c + kLanes <= C; c += kLanes) {
        const simd::vf p = simd::exp(simd::sub(simd::load(xr + c), vl));
        simd::store(d + c, simd::mul(simd::sub(p, vfloor), vs));
      }
#endif
      for (; c < C; ++c) d[c] = (std::exp(xr[c] - l) - floor) * s;
      d[y[n]] -= (1.f - eps) * s;
      if (dx16) bf16_row(d, dx16 + n * C, C);
    }
  });
}

}  // namespace qkv::kernels::cpu
