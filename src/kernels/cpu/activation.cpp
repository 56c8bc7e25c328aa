#include "kernels/cpu/activation.h"

#include <cmath>

#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

namespace {
constexpr float kSqrt1_2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr int64_t kGrain = 1 << 15;
}  // namespace

// The pointers are captured by value and every operand is read unconditionally, so both loops
// vectorize into compares and blends (the branchy form with a conditional load of dy stayed
// scalar and mispredicted on every other element).
void relu_forward(const float* x, float* y, int64_t n) {
  parallel_for(n, kGrain, [x, y](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i];
      y[i] = v > 0.f ? v : 0.f;
    }
  });
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  parallel_for(n, kGrain, [x, dy, dx](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i], g = dy[i];
      dx[i] = v > 0.f ? g : 0.f;
    }
  });
}

void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    if (tanh_approx) {
      for (int64_t i = b; i < e; ++i) {
        float v = x[i];
        y[i] = 0.5f * v * (1.f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
      }
    } else {
      int64_t i = b;
#if QKV_SIMD
      i = simd::by_registers(b, e, [&]<int U>(std::integral_constant<int, U>, int64_t at) {  // y = x Φ(x)
        simd::vf v[U], c[U];
        for (int u = 0; u < U; ++u) v[u] = simd::load(x + at + u * kLanes);
        simd::normal_cdf_n(v, c);
        for (int u = 0; u < U; ++u) {
          simd::store(y + at + u * kLanes, simd::mul(v[u], c[u]));
          if (cdf) simd::store(cdf + at + u * kLanes, c[u]);
        }
      });
#endif
      for (; i < e; ++i) {
        const float c = 0.5f * (1.f + std::erf(x[i] * kSqrt1_2));
        y[i] = x[i] * c;
        if (cdf) cdf[i] = c;
      }
    }
  });
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx, const float* cdf) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    if (tanh_approx) {
      for (int64_t i = b; i < e; ++i) {
        float v = x[i];
        float inner = kSqrt2OverPi * (v + 0.044715f * v * v * v);
        float t = std::tanh(inner);
        float dinner = kSqrt2OverPi * (1.f + 3.f * 0.044715f * v * v);
        dx[i] = dy[i] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * dinner);
      }
    } else {
      int64_t i = b;
#if QKV_SIMD
      // dx = dy (Φ(x) + x φ(x)),  φ(x) = e^(−x²/2)/√(2π)
      i = simd::by_registers(b, e, [&]<int U>(std::integral_constant<int, U>, int64_t at) {
        simd::vf v[U], g[U], c[U];  // g: e^(−x²/2), then φ = g/√(2π)
        for (int u = 0; u < U; ++u) {
          v[u] = simd::load(x + at + u * kLanes);
          g[u] = simd::mul(simd::mul(v[u], v[u]), simd::set1(-0.5f));
        }
        simd::exp_n(g);
        if (cdf)
          for (int u = 0; u < U; ++u) c[u] = simd::load(cdf + at + u * kLanes);
        else
          simd::normal_cdf_n(v, c);
        for (int u = 0; u < U; ++u)
          simd::store(dx + at + u * kLanes, simd::mul(simd::load(dy + at + u * kLanes),
                                                      simd::fmadd(v[u], simd::mul(simd::set1(kInvSqrt2Pi), g[u]), c[u])));
      });
#endif
      for (; i < e; ++i) {
        float v = x[i];
        float c = cdf ? cdf[i] : 0.5f * (1.f + std::erf(v * kSqrt1_2));
        float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
        dx[i] = dy[i] * (c + v * pdf);
      }
    }
  });
}

// y = x·z/(1−p), z ~ Bernoulli(1−p) drawn by Generator::paired_uniform(seed, counter + i).
void dropout_apply(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t counter) {
  const float keep_scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  auto scalar = [&](int64_t i) {
    y[i] = Generator::paired_uniform(seed, counter + static_cast<uint64_t>(i)) >= p ? x[i] * keep_scale : 0.f;
  };
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    int64_t i = b;
#if QKV_SIMD
    if (i < e && ((counter + static_cast<uint64_t>(i)) & 1)) scalar(i++);  // the vector loop starts on an even counter
    const simd::vf vs = simd::set1(keep_scale);
    for (; i + kLanes <= e; i += kLanes) {
      const simd::mask keep = dropout_keep(seed, counter + static_cast<uint64_t>(i), p);
      simd::store(y + i, simd::keep(keep, simd::mul(simd::load(x + i), vs)));
    }
#endif
    for (; i < e; ++i) scalar(i);
  });
}

}  // namespace qkv::kernels::cpu
