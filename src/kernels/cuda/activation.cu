// Pointwise activations and dropout on the GPU (formulas: kernels/activation.inc; the kernels:
// activation_kernels.cuh).
#include "kernels/cuda/activation_kernels.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN

void relu_forward(const float* x, float* y, int64_t n, const DropoutMask& drop, bf16* y16, const float* bias,
                  int64_t cols) {
  if (!n) return;
  QKV_LAUNCH(blocks_for(n), 256, 0, stream(), relu_forward_kernel)(x, y, n, drop, y16, bias, cols);
  QKV_CUDA_LAUNCHED(relu_forward_kernel);
}
// (with dbias: the column strips' kernels make dx and add it up — sum_kernels.cuh's launch_column_sums)
void relu_backward(const float* x, const float* dy, float* dx, int64_t n, const DropoutMask& drop, bf16* dx16,
                   const float* bias, int64_t cols, float* dbias) {
  if (dbias && cols)
    return launch_column_sums(BiasedBackward<ReluGrad>{x, bias, dx, dx16, {dy, drop}}, n / cols, cols, dbias);
  if (!n) return;
  QKV_LAUNCH(blocks_for(n), 256, 0, stream(), relu_backward_kernel)(x, dy, dx, n, drop, dx16, bias, cols);
  QKV_CUDA_LAUNCHED(relu_backward_kernel);
}
void gelu_forward(const float* x, float* y, int64_t n, bool tanh_approx, float* cdf, const DropoutMask& drop,
                  bf16* y16, const float* bias, int64_t cols) {
  if (!n) return;
  QKV_LAUNCH(blocks_for(n), 256, 0, stream(), gelu_forward_kernel)(x, y, n, tanh_approx, cdf, drop, y16, bias, cols);
  QKV_CUDA_LAUNCHED(gelu_forward_kernel);
}
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx, const float* cdf,
                   const DropoutMask& drop, bf16* dx16, const float* bias, int64_t cols, float* dbias) {
  if (dbias && cols)
    return launch_column_sums(BiasedBackward<GeluGrad>{x, bias, dx, dx16, {dy, drop, tanh_approx, cdf}}, n / cols,
                              cols, dbias);
  if (!n) return;
  QKV_LAUNCH(blocks_for(n), 256, 0, stream(), gelu_backward_kernel)(
      x, dy, dx, n, tanh_approx, cdf, drop, dx16, bias, cols);
  QKV_CUDA_LAUNCHED(gelu_backward_kernel);
}
void silu_mul_forward(const float* g, const float* u, float* y, int64_t n, bf16* y16) {
  if (!n) return;
  QKV_LAUNCH(blocks_for(n), 256, 0, stream(), silu_mul_forward_kernel)(g, u, y, n, y16);
  QKV_CUDA_LAUNCHED(silu_mul_forward_kernel);
}
void silu_mul_backward(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t n, bf16* dg16,
                       bf16* du16) {
  if (!n) return;
  QKV_LAUNCH(blocks_for(n), 256, 0, stream(), silu_mul_backward_kernel)(g, u, dy, dg, du, n, dg16, du16);
  QKV_CUDA_LAUNCHED(silu_mul_backward_kernel);
}
void dropout_apply(const float* x, float* y, int64_t n, const DropoutMask& mask) {
  if (!n) return;
  QKV_LAUNCH(blocks_for(n), 256, 0, stream(), dropout_kernel)(x, y, n, mask);
  QKV_CUDA_LAUNCHED(dropout_kernel);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
