// The pointwise activations' and dropout's kernels (activation.cu launches them; tests/kernels/
// activation_emulation_test.cpp runs them on the host through tests/kernels/cuda_emulation.h).
// Formulas: kernels/activation.inc. An activation may add a linear layer's bias to its input (x̂ = x + b
// over rows: the bits of the addition), and its output may be dropped in its own pass
// (kernels/dropout_mask.h): y = drop(act(x̂)), dx = act'(x̂) · drop(dy) — the bits dropout_kernel and
// the activation's kernel give one after the other (a product of products: nothing to contract).
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/bf16_bits.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/sum_kernels.cuh"
#include "kernels/dropout_mask.h"
#include "qkv/core/dtype.h"
#include "qkv/core/rng.h"

namespace qkv::kernels::cuda {
namespace {

#define QKV_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

// element i of a dropped tensor: v itself when drop is inactive
__device__ inline float dropped(const DropoutMask& drop, float v, int64_t i) {
  return drop.active() ? drop(v, static_cast<uint64_t>(i)) : v;
}

// out[i] = v, and out16[i] = bf16(v) when the copy is wanted (ops/autocast.h's activation copies)
__device__ inline void store_out(float* out, bf16* out16, int64_t i, float v) {
  out[i] = v;
  if (out16) reinterpret_cast<uint16_t*>(out16)[i] = to_bf16_bits(v);
}

// The pointwise kernels take W consecutive elements a thread: W = 4 where every pointer allows 16-byte
// accesses (the launcher's choice: vector_width), so that a thread has four times a scalar loop's bytes in
// flight — at one element a thread the H200's ~2,000 resident threads an SM hold ~8 KB of loads in
// flight, a third of what its bandwidth × latency asks —, as PyTorch's vectorized elementwise kernels;
// else W = 1. Each element's arithmetic is the same either way: the same bits.
//
// for_groups<W>(n, body): body(i, width) for the groups of W elements starting at i = g·W (grid-stride
// over g < n / W), then the n mod W last ones one a thread (width 1).
template <int W, class Body>
__device__ inline void for_groups(int64_t n, Body body) {
  const int64_t groups = n / W;
  QKV_GRID_LOOP(g, groups) body(g * W, std::integral_constant<int, W>{});
  if constexpr (W > 1) {
    const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    if (t < n - groups * W) body(groups * W + t, std::integral_constant<int, 1>{});
  }
}
// v[u] = p[u] for u < K (one 16-byte load at K = 4: p on 16 bytes)
template <int K>
__device__ inline void load(const float* p, float (&v)[K]) {
  if constexpr (K == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
#pragma unroll
    for (int u = 0; u < K; ++u) v[u] = p[u];
  }
}
// out[i + u] = v[u], and out16[i + u] = bf16(v[u]) when the copy is wanted (16 and 8 bytes at K = 4)
template <int K>
__device__ inline void store_out(float* out, bf16* out16, int64_t i, const float (&v)[K]) {
  if constexpr (K == 4) {
    *reinterpret_cast<float4*>(out + i) = make_float4(v[0], v[1], v[2], v[3]);
    if (out16)
      *reinterpret_cast<uint2*>(out16 + i) = make_uint2(to_bf16_bits(v[0]) | uint32_t{to_bf16_bits(v[1])} << 16,
                                                        to_bf16_bits(v[2]) | uint32_t{to_bf16_bits(v[3])} << 16);
  } else {
#pragma unroll
    for (int u = 0; u < K; ++u) store_out(out, out16, i + u, v[u]);
  }
}
// Whether every pointer (null ones aside) allows the kernels' 4-wide accesses: f32 on 16 bytes, bf16 on 8
inline bool four_wide(std::initializer_list<const float*> f32, std::initializer_list<const bf16*> b16 = {}) {
  for (const float* p : f32)
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  for (const bf16* p : b16)
    if (reinterpret_cast<uintptr_t>(p) % 8) return false;
  return true;
}

// the activation's inputs x̂_i … x̂_(i+K−1): x, or x + bias[column] (a linear layer's bias added in this
// pass; without one x itself, not x + 0, which would turn −0 into +0). The first column by a 32-bit
// remainder where i and cols are below 2³² (a 64-bit one is a long software sequence: a memory-bound
// kernel's whole budget), the next ones by counting.
template <int K>
__device__ inline void inputs_of(const float* x, const float* bias, int64_t cols, int64_t i, float (&v)[K]) {
  load<K>(x + i, v);
  if (!bias) return;
  int64_t j = (i | cols) < (int64_t{1} << 32)
                  ? static_cast<int64_t>(static_cast<uint32_t>(i) % static_cast<uint32_t>(cols))
                  : i % cols;
#pragma unroll
  for (int u = 0; u < K; ++u) {
    v[u] = v[u] + bias[j];
    if (++j == cols) j = 0;
  }
}
template <int W = 1>
__global__ void relu_forward_kernel(const float* x, float* y, int64_t n, DropoutMask drop, bf16* y16, const float* bias,
                                    int64_t cols) {
  for_groups<W>(n, [&](int64_t i, auto width) {
    constexpr int K = decltype(width)::value;
    float v[K];
    inputs_of<K>(x, bias, cols, i, v);
#pragma unroll
    for (int u = 0; u < K; ++u) v[u] = dropped(drop, v[u] > 0.f ? v[u] : 0.f, i + u);
    store_out<K>(y, y16, i, v);
  });
}
// relu'(x̂) · drop(dy) at element i
__device__ inline float relu_grad(float v, const float* dy, const DropoutMask& drop, int64_t i) {
  return v > 0.f ? dropped(drop, dy[i], i) : 0.f;
}
// An activation's backward over groups of W: dx_i = grad(x̂_i, dy_i, i) (x̂ with the bias added, dy read
// four at a time alike), and its bf16 copy
template <int W, class Grad>
__device__ inline void backward_groups(const float* x, const float* dy, float* dx, int64_t n, bf16* dx16,
                                       const float* bias, int64_t cols, Grad grad) {
  for_groups<W>(n, [&](int64_t i, auto width) {
    constexpr int K = decltype(width)::value;
    float v[K], g[K], d[K];
    inputs_of<K>(x, bias, cols, i, v);
    load<K>(dy + i, g);
#pragma unroll
    for (int u = 0; u < K; ++u) d[u] = grad(v[u], g[u], i + u);
    store_out<K>(dx, dx16, i, d);
  });
}

template <int W = 1>
__global__ void relu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n, DropoutMask drop,
                                     bf16* dx16, const float* bias, int64_t cols) {
  backward_groups<W>(x, dy, dx, n, dx16, bias, cols,
                     [&](float v, float g, int64_t i) { return v > 0.f ? dropped(drop, g, i) : 0.f; });
}

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/√(2π)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // √(2/π)

// gelu(x) = x·Φ(x), Φ(x) = ½(1 + erf(x/√2)); tanh form ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
template <int W = 1>
__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf, DropoutMask drop,
                                    bf16* y16, const float* bias, int64_t cols) {
  for_groups<W>(n, [&](int64_t i, auto width) {
    constexpr int K = decltype(width)::value;
    float v[K], out[K], phi[K] = {};
    inputs_of<K>(x, bias, cols, i, v);
#pragma unroll
    for (int u = 0; u < K; ++u) {
      if (tanh_approx) {
        out[u] = 0.5f * v[u] * (1.f + tanhf(kSqrt2OverPi * (v[u] + 0.044715f * v[u] * v[u] * v[u])));
      } else {
        phi[u] = 0.5f * (1.f + erff(v[u] * kInvSqrt2));
        out[u] = v[u] * phi[u];
      }
      out[u] = dropped(drop, out[u], i + u);
    }
    store_out<K>(y, y16, i, out);
    if (cdf && !tanh_approx) store_out<K>(cdf, nullptr, i, phi);
  });
}
// gelu'(x) = Φ(x) + x·φ(x), φ(x) = e^(−x²/2)/√(2π); tanh form: ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²)
// (Φ(x) read from cdf[i] when the forward kept it)
__device__ inline float gelu_slope(float v, bool tanh_approx, const float* cdf, int64_t i) {
  if (tanh_approx) {
    const float t = tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v));
    return 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * 0.044715f * v * v);
  }
  const float phi = cdf ? cdf[i] : 0.5f * (1.f + erff(v * kInvSqrt2));
  return phi + v * kInvSqrt2Pi * expf(-0.5f * v * v);
}
template <int W = 1>
__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx,
                                     const float* cdf, DropoutMask drop, bf16* dx16, const float* bias, int64_t cols) {
  backward_groups<W>(x, dy, dx, n, dx16, bias, cols, [&](float v, float g, int64_t i) {
    return dropped(drop, g, i) * gelu_slope(v, tanh_approx, cdf, i);
  });
}

// The backwards with the bias's gradient in their pass (kernels/activation.inc's dbias): sum_kernels.cuh's
// column_strip_sums makes each element i = r · cols + c through BiasedBackward — dx_i as the kernels
// above write it (x̂ = x_i + bias[c]: the column known, no remainder) — and adds it into its column's
// strip. `grad(x̂, i)`: act'(x̂) · drop(dy) at element i.
struct ReluGrad {
  const float* dy;
  DropoutMask drop;
  __device__ float operator()(float v, int64_t i) const { return relu_grad(v, dy, drop, i); }
};
struct GeluGrad {
  const float* dy;
  DropoutMask drop;
  bool tanh_approx;
  const float* cdf;
  __device__ float operator()(float v, int64_t i) const {
    return dropped(drop, dy[i], i) * gelu_slope(v, tanh_approx, cdf, i);
  }
};
template <class Grad>
struct BiasedBackward {
  const float* x;
  const float* bias;
  float* dx;
  bf16* dx16;
  Grad grad;
  __device__ float operator()(int64_t i, int64_t c) const {
    const float g = grad(x[i] + bias[c], i);
    store_out(dx, dx16, i, g);
    return g;
  }
};

// y = g·σ(g)·u;  dg = dy·u·σ(1 + g(1 − σ)),  du = dy·g·σ  (kernels/activation.inc's silu_mul)
template <int W = 1>
__global__ void silu_mul_forward_kernel(const float* g, const float* u, float* y, int64_t n, bf16* y16) {
  for_groups<W>(n, [&](int64_t i, auto width) {
    constexpr int K = decltype(width)::value;
    float a[K], b[K], out[K];
    load<K>(g + i, a);
    load<K>(u + i, b);
#pragma unroll
    for (int e = 0; e < K; ++e) {
      const float sig = 1.f / (1.f + expf(-a[e]));
      out[e] = (a[e] * sig) * b[e];
    }
    store_out<K>(y, y16, i, out);
  });
}
template <int W = 1>
__global__ void silu_mul_backward_kernel(const float* g, const float* u, const float* dy, float* dg, float* du,
                                         int64_t n, bf16* dg16, bf16* du16) {
  for_groups<W>(n, [&](int64_t i, auto width) {
    constexpr int K = decltype(width)::value;
    float a[K], b[K], d[K], ga[K], gb[K];
    load<K>(g + i, a);
    load<K>(u + i, b);
    load<K>(dy + i, d);
#pragma unroll
    for (int e = 0; e < K; ++e) {
      const float v = a[e], sig = 1.f / (1.f + expf(-v));
      ga[e] = (d[e] * b[e]) * (sig * (v * (1.f - sig) + 1.f));
      gb[e] = d[e] * (v * sig);
    }
    store_out<K>(dg, dg16, i, ga);
    store_out<K>(du, du16, i, gb);
  });
}

// y = x · m / (1 − p), m = [paired_uniform(seed, counter + i) ≥ p]: the CPU's mask bit for bit.
template <int W = 1>
__global__ void dropout_kernel(const float* x, float* y, int64_t n, DropoutMask drop) {
  for_groups<W>(n, [&](int64_t i, auto width) {
    constexpr int K = decltype(width)::value;
    float v[K];
    load<K>(x + i, v);
#pragma unroll
    for (int e = 0; e < K; ++e) v[e] = drop(v[e], static_cast<uint64_t>(i + e));
    store_out<K>(y, nullptr, i, v);
  });
}

#undef QKV_GRID_LOOP

}  // namespace
}  // namespace qkv::kernels::cuda
