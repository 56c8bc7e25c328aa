// Pointwise activations and dropout on the GPU (formulas: kernels/activation.inc; the kernels:
// activation_kernels.cuh, four elements a thread where every pointer allows 16-byte accesses).
#include <algorithm>

#include "kernels/cuda/activation_kernels.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN

// kernel<4> over n / 4 groups (and the tail) where `wide`, else kernel<1> over n elements: blocks_for(n / W)
#define QKV_POINTWISE(kernel, n, wide, ...)                                                            \
  do {                                                                                                 \
    if (wide)                                                                                          \
      QKV_LAUNCH(blocks_for(std::max<int64_t>((n) / 4, 1)), 256, 0, stream(), kernel<4>)(__VA_ARGS__); \
    else                                                                                               \
      QKV_LAUNCH(blocks_for(n), 256, 0, stream(), kernel<1>)(__VA_ARGS__);                             \
    QKV_CUDA_LAUNCHED(kernel);                                                                         \
  } while (0)

void relu_forward(const float* x, float* y, int64_t n, const DropoutMask& drop, bf16* y16, const float* bias,
                  int64_t cols) {
  if (!n) return;
  QKV_POINTWISE(relu_forward_kernel, n, four_wide({x, y}, {y16}), x, y, n, drop, y16, bias, cols);
}
// (with dbias: the column strips' kernels make dx and add it up — sum_kernels.cuh's launch_column_sums)
void relu_backward(const float* x, const float* dy, float* dx, int64_t n, const DropoutMask& drop, bf16* dx16,
                   const float* bias, int64_t cols, float* dbias) {
  if (dbias && cols)
    return launch_column_sums(BiasedBackward<ReluGrad>{x, bias, dx, dx16, {dy, drop}}, n / cols, cols, dbias);
  if (!n) return;
  QKV_POINTWISE(relu_backward_kernel, n, four_wide({x, dy, dx}, {dx16}), x, dy, dx, n, drop, dx16, bias, cols);
}
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf, const DropoutMask& drop,
                  bf16* y16, const float* bias, int64_t cols) {
  if (!n) return;
  QKV_POINTWISE(gelu_forward_kernel, n, four_wide({x, y, cdf}, {y16}), x, y, n, tanh_approx, cdf, drop, y16, bias,
                cols);
}
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx, const float* cdf,
                   const DropoutMask& drop, bf16* dx16, const float* bias, int64_t cols, float* dbias) {
  if (dbias && cols)
    return launch_column_sums(BiasedBackward<GeluGrad>{x, bias, dx, dx16, {dy, drop, tanh_approx, cdf}}, n / cols,
                              cols, dbias);
  if (!n) return;
  QKV_POINTWISE(gelu_backward_kernel, n, four_wide({x, dy, dx, cdf}, {dx16}), x, dy, dx, n, tanh_approx, cdf, drop,
                dx16, bias, cols);
}
void silu_mul_forward(const float* g, const float* u, float* y, int64_t n, bf16* y16) {
  if (!n) return;
  QKV_POINTWISE(silu_mul_forward_kernel, n, four_wide({g, u, y}, {y16}), g, u, y, n, y16);
}
void silu_mul_backward(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t n, bf16* dg16,
                       bf16* du16) {
  if (!n) return;
  QKV_POINTWISE(silu_mul_backward_kernel, n, four_wide({g, u, dy, dg, du}, {dg16, du16}), g, u, dy, dg, du, n, dg16,
                du16);
}
void dropout_apply(const float* x, float* y, int64_t n, const DropoutMask& mask) {
  if (!n) return;
  QKV_POINTWISE(dropout_kernel, n, four_wide({x, y}), x, y, n, mask);
}

#undef QKV_POINTWISE

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
