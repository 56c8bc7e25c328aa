// Pointwise activations and dropout on the GPU (formulas: kernels/cpu/activation.h).
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "qkv/core/rng.h"

namespace qkv::kernels::cuda {
namespace {

#define QKV_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  QKV_GRID_LOOP(i, n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
__global__ void relu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  QKV_GRID_LOOP(i, n) dx[i] = x[i] > 0.f ? dy[i] : 0.f;
}

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/√(2π)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // √(2/π)

// gelu(x) = x·Φ(x), Φ(x) = ½(1 + erf(x/√2)); tanh form ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf) {
  QKV_GRID_LOOP(i, n) {
    const float v = x[i];
    if (tanh_approx) {
      y[i] = 0.5f * v * (1.f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
    } else {
      const float phi = 0.5f * (1.f + erff(v * kInvSqrt2));
      y[i] = v * phi;
      if (cdf) cdf[i] = phi;
    }
  }
}
// gelu'(x) = Φ(x) + x·φ(x), φ(x) = e^(−x²/2)/√(2π); tanh form: ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²)
__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx,
                                     const float* cdf) {
  QKV_GRID_LOOP(i, n) {
    const float v = x[i];
    float g;
    if (tanh_approx) {
      const float t = tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v));
      g = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * 0.044715f * v * v);
    } else {
      const float phi = cdf ? cdf[i] : 0.5f * (1.f + erff(v * kInvSqrt2));
      g = phi + v * kInvSqrt2Pi * expf(-0.5f * v * v);
    }
    dx[i] = dy[i] * g;
  }
}

// y = x · m / (1 − p), m = [paired_uniform(seed, counter + i) ≥ p]: the CPU's mask bit for bit.
__global__ void dropout_kernel(const float* x, float* y, int64_t n, float p, float keep_scale, uint64_t seed,
                               uint64_t counter) {
  QKV_GRID_LOOP(i, n)
  y[i] = Generator::paired_uniform(seed, counter + static_cast<uint64_t>(i)) >= p ? x[i] * keep_scale : 0.f;
}

}  // namespace

void relu_forward(const float* x, float* y, int64_t n) {
  if (!n) return;
  relu_forward_kernel<<<blocks_for(n), 256, 0, stream()>>>(x, y, n);
  QKV_CUDA_LAUNCHED(relu_forward_kernel);
}
void relu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  if (!n) return;
  relu_backward_kernel<<<blocks_for(n), 256, 0, stream()>>>(x, dy, dx, n);
  QKV_CUDA_LAUNCHED(relu_backward_kernel);
}
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf) {
  if (!n) return;
  gelu_forward_kernel<<<blocks_for(n), 256, 0, stream()>>>(x, y, n, tanh_approx, cdf);
  QKV_CUDA_LAUNCHED(gelu_forward_kernel);
}
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx, const float* cdf) {
  if (!n) return;
  gelu_backward_kernel<<<blocks_for(n), 256, 0, stream()>>>(x, dy, dx, n, tanh_approx, cdf);
  QKV_CUDA_LAUNCHED(gelu_backward_kernel);
}
void dropout_apply(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t counter) {
  if (!n) return;
  const float keep_scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  dropout_kernel<<<blocks_for(n), 256, 0, stream()>>>(x, y, n, p, keep_scale, seed, counter);
  QKV_CUDA_LAUNCHED(dropout_kernel);
}

}  // namespace qkv::kernels::cuda
