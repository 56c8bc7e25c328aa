// Pointwise activations on dense buffers, forward and backward.
//   relu(x) = max(x, 0)                                   relu'(x) = [x > 0]
//   gelu(x) = x·Φ(x) = ½x(1 + erf(x/√2))                  gelu'(x) = Φ(x) + x·φ(x)
//   gelu_tanh(x) = ½x(1 + tanh(√(2/π)(x + 0.044715x³)))   (PyTorch's approximate='tanh')
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

void relu_forward(const float* x, float* y, int64_t n);
void relu_backward(const float* x, const float* dy, float* dx, int64_t n);
// The exact GELU's forward can also keep Φ(x) in `cdf` for the backward, which then computes only
// φ(x) (Φ is two thirds of the work); `cdf` is ignored with tanh_approx and may be null.
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf = nullptr);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx,
                   const float* cdf = nullptr);

// Inverted dropout: y = x · m / (1 − p), m ~ Bernoulli(1 − p) drawn from (seed, counter + i), so the
// backward regenerates the same mask instead of storing it.
void dropout_apply(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t counter);

}  // namespace qkv::kernels::cpu
