// The pointwise activations' and dropout's kernels (activation.cu launches them; tests/kernels/
// activation_emulation_test.cpp runs them on the host through tests/kernels/cuda_emulation.h).
// Formulas: kernels/activation.inc. An activation may add a linear layer's bias to its input (x̂ = x + b
// over rows: the bits of the addition), and its output may be dropped in its own pass
// (kernels/dropout_mask.h): y = drop(act(x̂)), dx = act'(x̂) · drop(dy) — the bits dropout_kernel and
// the activation's kernel give one after the other (a product of products: nothing to contract).
#pragma once

#include <cmath>
#include <cstdint>

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

// the activation's input x̂_i: x_i, or x_i + bias[i mod cols] (a linear layer's bias added in this pass;
// without one x_i itself, not x_i + 0, which would turn −0 into +0). The column by a 32-bit remainder
// where i and cols are below 2³² (a 64-bit one is a long software sequence: a memory-bound kernel's
// whole budget).
__device__ inline float input_of(const float* x, const float* bias, int64_t cols, int64_t i) {
  if (!bias) return x[i];
  const int64_t j = (i | cols) < (int64_t{1} << 32)
                      ? static_cast<int64_t>(static_cast<uint32_t>(i) % static_cast<uint32_t>(cols))
                      : i % cols;
  return x[i] + bias[j];
}

__global__ void relu_forward_kernel(const float* x, float* y, int64_t n, DropoutMask drop, bf16* y16,
                                    const float* bias, int64_t cols) {
  QKV_GRID_LOOP(i, n) {
    const float v = input_of(x, bias, cols, i);
    store_out(y, y16, i, dropped(drop, v > 0.f ? v : 0.f, i));
  }
}
// relu'(x̂) · drop(dy) at element i
__device__ inline float relu_grad(float v, const float* dy, const DropoutMask& drop, int64_t i) {
  return v > 0.f ? dropped(drop, dy[i], i) : 0.f;
}
__global__ void relu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n, DropoutMask drop,
                                     bf16* dx16, const float* bias, int64_t cols) {
  QKV_GRID_LOOP(i, n) store_out(dx, dx16, i, relu_grad(input_of(x, bias, cols, i), dy, drop, i));
}

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/√(2π)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // √(2/π)

// gelu(x) = x·Φ(x), Φ(x) = ½(1 + erf(x/√2)); tanh form ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf,
                                    DropoutMask drop, bf16* y16, const float* bias, int64_t cols) {
  QKV_GRID_LOOP(i, n) {
    const float v = input_of(x, bias, cols, i);
    float out;
    if (tanh_approx) {
      out = 0.5f * v * (1.f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
    } else {
      const float phi = 0.5f * (1.f + erff(v * kInvSqrt2));
      out = v * phi;
      if (cdf) cdf[i] = phi;
    }
    store_out(y, y16, i, dropped(drop, out, i));
  }
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
__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx,
                                     const float* cdf, DropoutMask drop, bf16* dx16, const float* bias, int64_t cols) {
  QKV_GRID_LOOP(i, n) {
    const float v = input_of(x, bias, cols, i);
    store_out(dx, dx16, i, dropped(drop, dy[i], i) * gelu_slope(v, tanh_approx, cdf, i));
  }
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
__global__ void silu_mul_forward_kernel(const float* g, const float* u, float* y, int64_t n, bf16* y16) {
  QKV_GRID_LOOP(i, n) {
    const float v = g[i], sig = 1.f / (1.f + expf(-v));
    store_out(y, y16, i, (v * sig) * u[i]);
  }
}
__global__ void silu_mul_backward_kernel(const float* g, const float* u, const float* dy, float* dg, float* du,
                                         int64_t n, bf16* dg16, bf16* du16) {
  QKV_GRID_LOOP(i, n) {
    const float v = g[i], sig = 1.f / (1.f + expf(-v)), d = dy[i];
    store_out(dg, dg16, i, (d * u[i]) * (sig * (v * (1.f - sig) + 1.f)));
    store_out(du, du16, i, d * (v * sig));
  }
}

// y = x · m / (1 − p), m = [paired_uniform(seed, counter + i) ≥ p]: the CPU's mask bit for bit.
__global__ void dropout_kernel(const float* x, float* y, int64_t n, DropoutMask drop) {
  QKV_GRID_LOOP(i, n) y[i] = drop(x[i], static_cast<uint64_t>(i));
}

#undef QKV_GRID_LOOP

}  // namespace
}  // namespace qkv::kernels::cuda
