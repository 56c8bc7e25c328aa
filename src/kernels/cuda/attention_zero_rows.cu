// dq zeroed where it lies — the rows of a [B, H, L, d] tensor in its head layout (HeadLayout,
// kernels/attention_problem.h) — before a tensor-core backward adds into it with atomics
// (attention_bf16.cu, attention_tf32.cu). A file of its own, which the host emulation compiles with
// either backward's launchers (tests/kernels/attention_tf32_emulation_test.cpp).
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

// x[row (b, h, i) of layout l][0, d) = 0 for every row of a [B, H, L, d] tensor
__global__ void zero_rows_kernel(HeadLayout l, int64_t H, int64_t L, int64_t d, int64_t n, float* x) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = e % d, row = e / d, i = row % L, h = row / L % H, b = row / (L * H);
    x[at(l, b, h, i) + c] = 0.f;
  }
}

}  // namespace

void attention_zero_rows(const HeadLayout& l, int64_t B, int64_t H, int64_t L, int64_t d, float* x) {
  const int64_t n = B * H * L * d;
  if (n == 0) return;
  QKV_LAUNCH(blocks_for(n), 256, 0, stream(), zero_rows_kernel)(l, H, L, d, n, x);
  QKV_CUDA_LAUNCHED(zero_rows_kernel);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
