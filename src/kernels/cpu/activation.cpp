#include "kernels/cpu/activation.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "kernels/cpu/column_sums.h"
#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

namespace {
constexpr float kSqrt1_2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr int64_t kGrain = 1 << 15;

// [b, e) in blocks of kBlock (32 KB of floats, in L1 or L2), f on each: a dropped output is dropped
// while the block is still in cache — the forward's act then the mask over y, the backward's mask over
// dy (into dx) then act' over it.
constexpr int64_t kBlock = 8192;
template <class F>
void in_blocks(int64_t b, int64_t e, F f) {
  for (int64_t s = b; s < e; s += kBlock) f(s, s + kBlock < e ? s + kBlock : e);
}

// f(i, k, b) over the pieces [i, k) of [s, t) that lie in one row: b = the bias of element i on (its
// column's), or null without a bias — the block functions, run over [0, k − i) from x + i, add it to
// each x they load (x̂ = x + b, the addition's bits) rather than read a copy of x̂ written first. (A
// block function's results do not depend on where its range starts: gelu's vector tails below.)
template <class F>
void by_row_pieces(const float* bias, int64_t cols, int64_t s, int64_t t, F f) {
  if (!bias) return f(s, t, nullptr);
  for (int64_t i = s, j = s % cols; i < t; j = 0) {
    const int64_t k = std::min(t, i + (cols - j));
    f(i, k, bias + j);
    i = k;
  }
}
}  // namespace

// The pointers are captured by value and every operand is read unconditionally, so both loops
// vectorize into compares and blends (the branchy form with a conditional load of dy stayed
// scalar and mispredicted on every other element). x̂ = x + bias where bias is given.
static void relu_block(const float* x, const float* bias, float* y, int64_t b, int64_t e) {
  if (bias) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i] + bias[i];
      y[i] = v > 0.f ? v : 0.f;
    }
    return;
  }
  for (int64_t i = b; i < e; ++i) {
    const float v = x[i];
    y[i] = v > 0.f ? v : 0.f;
  }
}
static void relu_backward_block(const float* x, const float* bias, const float* dy, float* dx, int64_t b,
                                int64_t e) {
  if (bias) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i] + bias[i], g = dy[i];
      dx[i] = v > 0.f ? g : 0.f;
    }
    return;
  }
  for (int64_t i = b; i < e; ++i) {
    const float v = x[i], g = dy[i];
    dx[i] = v > 0.f ? g : 0.f;
  }
}

#if QKV_SIMD
// The vector code over the last e − i < kLanes elements too, on zero-padded copies (f(ins…, outs…)
// over one register from the copies' start; a null pointer stays null): an element's bits then do not
// depend on where its block, row or thread's range starts — the scalar tail's erf and exp are libm's,
// not vec.h's polynomials.
template <class F>
void vector_tail(int64_t i, int64_t e, std::array<const float*, 4> in, std::array<float*, 2> out, F f) {
  if (i >= e) return;
  float a[4][kLanes] = {}, o[2][kLanes] = {};
  for (size_t k = 0; k < in.size(); ++k)
    if (in[k]) std::copy(in[k] + i, in[k] + e, a[k]);
  f(in[0] ? a[0] : nullptr, in[1] ? a[1] : nullptr, in[2] ? a[2] : nullptr, in[3] ? a[3] : nullptr,
    out[0] ? o[0] : nullptr, out[1] ? o[1] : nullptr);
  for (size_t k = 0; k < out.size(); ++k)
    if (out[k]) std::copy(o[k] + 0, o[k] + (e - i), out[k] + i);
}

// U registers of x̂ from x (and bias)
template <int U>
void load_biased(const float* x, const float* bias, simd::vf (&v)[U]) {
  for (int u = 0; u < U; ++u) {
    v[u] = simd::load(x + u * kLanes);
    if (bias) v[u] = simd::add(v[u], simd::load(bias + u * kLanes));
  }
}
#endif

// y = x̂ Φ(x̂), Φ kept in cdf when asked; or the tanh form
template <int U>
static void gelu_vectors(const float* x, const float* bias, float* y, float* cdf) {
#if QKV_SIMD
  simd::vf v[U], c[U];
  load_biased(x, bias, v);
  simd::normal_cdf_n(v, c);
  for (int u = 0; u < U; ++u) {
    simd::store(y + u * kLanes, simd::mul(v[u], c[u]));
    if (cdf) simd::store(cdf + u * kLanes, c[u]);
  }
#endif
}

// The tanh form, ½ x̂ (1 + tanh u) with u = √(2/π)(x̂ + 0.044715 x̂³), as x̂ σ(2u) (1 + tanh u = 2σ(2u)):
// one exp a lane, no libm call (libm's tanhf was a third of an int8 ALBERT's time)
#if QKV_SIMD
// s = σ(2u), u = √(2/π)(x̂ + 0.044715 x̂³), for U registers of x̂: the forward's and backward's common part
template <int U>
static void gelu_tanh_sigmoid(const simd::vf (&v)[U], simd::vf (&s)[U]) {
  simd::vf two_u[U];
  for (int u = 0; u < U; ++u)
    two_u[u] = simd::mul(simd::set1(2.f * kSqrt2OverPi),
                         simd::fmadd(simd::mul(simd::set1(0.044715f), v[u]), simd::mul(v[u], v[u]), v[u]));
  simd::sigmoid_n(two_u, s);
}
#endif

template <int U>
static void gelu_tanh_vectors(const float* x, const float* bias, float* y) {
#if QKV_SIMD
  simd::vf v[U], s[U];
  load_biased(x, bias, v);
  gelu_tanh_sigmoid(v, s);
  for (int u = 0; u < U; ++u) simd::store(y + u * kLanes, simd::mul(v[u], s[u]));
#endif
}

static void gelu_block(const float* x, const float* bias, float* y, int64_t b, int64_t e, bool tanh_approx,
                       float* cdf) {
  if (tanh_approx) {
    int64_t i = b;
#if QKV_SIMD
    i = simd::by_registers(b, e, [&]<int U>(std::integral_constant<int, U>, int64_t at) {
      gelu_tanh_vectors<U>(x + at, bias ? bias + at : nullptr, y + at);
    });
    vector_tail(i, e, {x, bias, nullptr, nullptr}, {y, nullptr},
                [](const float* xt, const float* bt, const float*, const float*, float* yt, float*) {
                  gelu_tanh_vectors<1>(xt, bt, yt);
                });
    i = e;
#endif
    for (; i < e; ++i) {
      const float v = bias ? x[i] + bias[i] : x[i];
      y[i] = 0.5f * v * (1.f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
    }
    return;
  }
  int64_t i = b;
#if QKV_SIMD
  i = simd::by_registers(b, e, [&]<int U>(std::integral_constant<int, U>, int64_t at) {  // y = x̂ Φ(x̂)
    gelu_vectors<U>(x + at, bias ? bias + at : nullptr, y + at, cdf ? cdf + at : nullptr);
  });
  vector_tail(i, e, {x, bias, nullptr, nullptr}, {y, cdf},
              [](const float* xt, const float* bt, const float*, const float*, float* yt, float* ct) {
                gelu_vectors<1>(xt, bt, yt, ct);
              });
  i = e;
#endif
  for (; i < e; ++i) {
    const float v = bias ? x[i] + bias[i] : x[i];
    const float c = 0.5f * (1.f + std::erf(v * kSqrt1_2));
    y[i] = v * c;
    if (cdf) cdf[i] = c;
  }
}

// dx = dy (Φ(x̂) + x̂ φ(x̂)),  φ(x) = e^(−x²/2)/√(2π)   (Φ read from cdf when kept)
template <int U>
static void gelu_backward_vectors(const float* x, const float* bias, const float* dy, const float* cdf, float* dx) {
#if QKV_SIMD
  simd::vf v[U], g[U], c[U];  // g: e^(−x̂²/2), then φ = g/√(2π)
  load_biased(x, bias, v);
  for (int u = 0; u < U; ++u) g[u] = simd::mul(simd::mul(v[u], v[u]), simd::set1(-0.5f));
  simd::exp_n(g);
  if (cdf)
    for (int u = 0; u < U; ++u) c[u] = simd::load(cdf + u * kLanes);
  else
    simd::normal_cdf_n(v, c);
  for (int u = 0; u < U; ++u)
    simd::store(dx + u * kLanes, simd::mul(simd::load(dy + u * kLanes),
                                           simd::fmadd(v[u], simd::mul(simd::set1(kInvSqrt2Pi), g[u]), c[u])));
#endif
}

// The tanh form's derivative, ½(1 + t) + ½ x̂ (1 − t²) u' with t = tanh u = 2s − 1, s = σ(2u):
// dx = dy (s + 2 x̂ s (1 − s) u'),  u' = √(2/π)(1 + 3·0.044715 x̂²)
template <int U>
static void gelu_tanh_backward_vectors(const float* x, const float* bias, const float* dy, float* dx) {
#if QKV_SIMD
  simd::vf v[U], s[U];
  load_biased(x, bias, v);
  gelu_tanh_sigmoid(v, s);
  for (int u = 0; u < U; ++u) {
    const simd::vf du = simd::mul(simd::set1(kSqrt2OverPi),
                                  simd::fmadd(simd::set1(3.f * 0.044715f), simd::mul(v[u], v[u]), simd::set1(1.f)));
    const simd::vf s1 = simd::mul(s[u], simd::sub(simd::set1(1.f), s[u]));  // s (1 − s)
    const simd::vf g = simd::fmadd(simd::mul(simd::set1(2.f), v[u]), simd::mul(s1, du), s[u]);
    simd::store(dx + u * kLanes, simd::mul(simd::load(dy + u * kLanes), g));
  }
#endif
}

// dx = dy · gelu'(x̂)
static void gelu_backward_block(const float* x, const float* bias, const float* dy, float* dx, int64_t b, int64_t e,
                                bool tanh_approx, const float* cdf) {
  if (tanh_approx) {
    int64_t i = b;
#if QKV_SIMD
    i = simd::by_registers(b, e, [&]<int U>(std::integral_constant<int, U>, int64_t at) {
      gelu_tanh_backward_vectors<U>(x + at, bias ? bias + at : nullptr, dy + at, dx + at);
    });
    vector_tail(i, e, {x, bias, dy, nullptr}, {dx, nullptr},
                [](const float* xt, const float* bt, const float* dyt, const float*, float* dxt, float*) {
                  gelu_tanh_backward_vectors<1>(xt, bt, dyt, dxt);
                });
    i = e;
#endif
    for (; i < e; ++i) {
      const float v = bias ? x[i] + bias[i] : x[i];
      float inner = kSqrt2OverPi * (v + 0.044715f * v * v * v);
      float t = std::tanh(inner);
      float dinner = kSqrt2OverPi * (1.f + 3.f * 0.044715f * v * v);
      dx[i] = dy[i] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * dinner);
    }
    return;
  }
  int64_t i = b;
#if QKV_SIMD
  i = simd::by_registers(b, e, [&]<int U>(std::integral_constant<int, U>, int64_t at) {
    gelu_backward_vectors<U>(x + at, bias ? bias + at : nullptr, dy + at, cdf ? cdf + at : nullptr, dx + at);
  });
  vector_tail(i, e, {x, bias, dy, cdf}, {dx, nullptr},
              [](const float* xt, const float* bt, const float* dyt, const float* ct, float* dxt, float*) {
                gelu_backward_vectors<1>(xt, bt, dyt, ct, dxt);
              });
  i = e;
#endif
  for (; i < e; ++i) {
    const float v = bias ? x[i] + bias[i] : x[i];
    float c = cdf ? cdf[i] : 0.5f * (1.f + std::erf(v * kSqrt1_2));
    float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
    dx[i] = dy[i] * (c + v * pdf);
  }
}

// (with a bias: each block's row pieces through the block functions, each with its row's bias)
void relu_forward(const float* x, float* y, int64_t n, const DropoutMask& drop, bf16* y16, const float* bias,
                  int64_t cols) {
  parallel_for(n, kGrain, [x, y, drop, y16, bias, cols](int64_t b, int64_t e) {
    in_blocks(b, e, [&](int64_t s, int64_t t) {
      by_row_pieces(bias, cols, s, t,
                    [&](int64_t i, int64_t k, const float* bb) { relu_block(x + i, bb, y + i, 0, k - i); });
      if (drop.active()) dropout_row(y + s, y + s, t - s, drop.from(s));
      if (y16) bf16_row(y + s, y16 + s, t - s);
    });
  });
}

void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf, const DropoutMask& drop,
                  bf16* y16, const float* bias, int64_t cols) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    in_blocks(b, e, [&](int64_t s, int64_t t) {
      by_row_pieces(bias, cols, s, t,
                    [&](int64_t i, int64_t k, const float* bb) {
                      gelu_block(x + i, bb, y + i, 0, k - i, tanh_approx, cdf ? cdf + i : nullptr);
                    });
      if (drop.active()) dropout_row(y + s, y + s, t - s, drop.from(s));
      if (y16) bf16_row(y + s, y16 + s, t - s);
    });
  });
}

// A backward over the elements [b, e) in blocks: dx = act'(x̂) · drop(dy), and its bf16 copy.
// `grad(dy, i, k, bias)`: the activation's backward block over [i, k) reading dy (dy or, dropped,
// dx), writing dx, bias: element i's on (by_row_pieces). Without dbias the elements split over the threads; with it
// the rows go by strips (kernels/cpu/column_sums.h), each group of rows added into its strip's sums
// while its dx is in cache — the same dx (a block's result does not depend on where it starts),
// dbias sum_to(dx)'s bits.
template <class Grad>
void backward_pass(const float* dy, float* dx, int64_t n, const DropoutMask& drop, bf16* dx16, const float* bias,
                   int64_t cols, float* dbias, Grad grad) {
  auto range = [&](int64_t b, int64_t e) {
    in_blocks(b, e, [&](int64_t s, int64_t t) {
      if (drop.active()) dropout_row(dy + s, dx + s, t - s, drop.from(s));
      const float* g = drop.active() ? dx : dy;
      by_row_pieces(bias, cols, s, t, [&](int64_t i, int64_t k, const float* bb) { grad(g, i, k, bb); });
      if (dx16) bf16_row(dx + s, dx16 + s, t - s);
    });
  };
  if (!dbias || cols == 0) {
    parallel_for(n, kGrain, range);
    return;
  }
  column_sums_in_strips(n / cols, cols, dbias, [&](int64_t r0, int64_t r1) {
    range(r0 * cols, r1 * cols);
    return dx + r0 * cols;
  });
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n, const DropoutMask& drop, bf16* dx16,
                   const float* bias, int64_t cols, float* dbias) {
  backward_pass(dy, dx, n, drop, dx16, bias, cols, dbias, [x, dx](const float* g, int64_t i, int64_t k, const float* bb) {
    relu_backward_block(x + i, bb, g + i, dx + i, 0, k - i);
  });
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx, const float* cdf,
                   const DropoutMask& drop, bf16* dx16, const float* bias, int64_t cols, float* dbias) {
  backward_pass(dy, dx, n, drop, dx16, bias, cols, dbias,
                [x, dx, tanh_approx, cdf](const float* g, int64_t i, int64_t k, const float* bb) {
                  gelu_backward_block(x + i, bb, g + i, dx + i, 0, k - i, tanh_approx, cdf ? cdf + i : nullptr);
                });
}

// y = g·σ(g)·u, σ(g) = 1/(1 + e^−g) through vec.h's exp_n (four registers' chains at once)
static void silu_mul_block(const float* g, const float* u, float* y, int64_t b, int64_t e) {
  int64_t i = b;
#if QKV_SIMD
  i = simd::by_registers(b, e, [&]<int U>(std::integral_constant<int, U>, int64_t at) {
    simd::vf v[U], sig[U];
    for (int k = 0; k < U; ++k) v[k] = simd::load(g + at + k * kLanes);
    simd::sigmoid_n(v, sig);
    for (int k = 0; k < U; ++k)
      simd::store(y + at + k * kLanes, simd::mul(simd::mul(v[k], sig[k]), simd::load(u + at + k * kLanes)));
  });
#endif
  for (; i < e; ++i) {
    const float sig = 1.f / (1.f + std::exp(-g[i]));
    y[i] = (g[i] * sig) * u[i];
  }
}

// dg = dy·u·σ(1 + g(1 − σ)),  du = dy·g·σ
static void silu_mul_backward_block(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t b,
                                    int64_t e) {
  int64_t i = b;
#if QKV_SIMD
  i = simd::by_registers(b, e, [&]<int U>(std::integral_constant<int, U>, int64_t at) {
    simd::vf v[U], sig[U];
    for (int k = 0; k < U; ++k) v[k] = simd::load(g + at + k * kLanes);
    simd::sigmoid_n(v, sig);
    for (int k = 0; k < U; ++k) {
      const int64_t o = at + k * kLanes;
      const simd::vf one = simd::set1(1.f), d = simd::load(dy + o);
      const simd::vf dsilu = simd::mul(sig[k], simd::fmadd(v[k], simd::sub(one, sig[k]), one));
      simd::store(dg + o, simd::mul(simd::mul(d, simd::load(u + o)), dsilu));
      simd::store(du + o, simd::mul(d, simd::mul(v[k], sig[k])));
    }
  });
#endif
  for (; i < e; ++i) {
    const float sig = 1.f / (1.f + std::exp(-g[i])), d = dy[i];
    dg[i] = (d * u[i]) * (sig * (g[i] * (1.f - sig) + 1.f));
    du[i] = d * (g[i] * sig);
  }
}

void silu_mul_forward(const float* g, const float* u, float* y, int64_t n, bf16* y16) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    in_blocks(b, e, [&](int64_t s, int64_t t) {
      silu_mul_block(g, u, y, s, t);
      if (y16) bf16_row(y + s, y16 + s, t - s);
    });
  });
}

void silu_mul_backward(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t n, bf16* dg16,
                       bf16* du16) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    in_blocks(b, e, [&](int64_t s, int64_t t) {
      silu_mul_backward_block(g, u, dy, dg, du, s, t);
      if (dg16) bf16_row(dg + s, dg16 + s, t - s);
      if (du16) bf16_row(du + s, du16 + s, t - s);
    });
  });
}

// y = x·z/(1−p), z ~ Bernoulli(1−p) drawn by Generator::paired_uniform(seed, counter + i).
void dropout_apply(const float* x, float* y, int64_t n, const DropoutMask& mask) {
  const DropoutMask m = mask.resolved();
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { dropout_row(x + b, y + b, e - b, m.from(b)); });
}

}  // namespace qkv::kernels::cpu
