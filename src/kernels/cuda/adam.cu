// The fused Adam / AdamW update on the GPU (formulas: kernels/cpu/adam.h): one pass over θ, g, m,
// v, each element read and written once.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda {
namespace {

__global__ void adam_kernel(float* p, const float* gp, float* m, float* v, int64_t n, AdamCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float gi = gp[i] + c.l2 * p[i];
    const float mi = c.beta1 * m[i] + (1.f - c.beta1) * gi;
    const float vi = c.beta2 * v[i] + (1.f - c.beta2) * gi * gi;
    m[i] = mi, v[i] = vi;
    p[i] = p[i] * c.decay - c.step_size * mi / (sqrtf(vi) * c.inv_sqrt_bc2 + c.eps);
  }
}

}  // namespace

void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const AdamCoefficients& c) {
  if (!n) return;
  adam_kernel<<<blocks_for(n, 256, 4), 256, 0, stream()>>>(param, grad, exp_avg, exp_avg_sq, n, c);
  QKV_CUDA_LAUNCHED(adam_kernel);
}

}  // namespace qkv::kernels::cuda
