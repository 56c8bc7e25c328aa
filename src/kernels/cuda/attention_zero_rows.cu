// dq zeroed where it lies — the rows of a [B, H, L, d] tensor in its head layout (HeadLayout,
// kernels/attention_problem.h) — before a tensor-core backward adds into it with atomics
// (attention_bf16.cu, attention_tf32.cu). A file of its own, which the host emulation compiles with
// either backward's launchers (tests/kernels/attention_tf32_emulation_test.cpp).
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/divisor.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

// x[row (b, h, i) of layout l][0, d) = 0 for every row of a [B, H, L, d] tensor, Width floats a thread
// (4: one 16-byte store, where d and every row's start allow it); `pieces` = d / Width a row
template <int Width>
__global__ void zero_rows_kernel(HeadLayout l, Divisor H, Divisor L, Divisor pieces, int64_t n, float* x) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t c, i, h;
    const int64_t b = H.divmod(L.divmod(pieces.divmod(e, c), i), h);  // e = ((b·H + h)·L + i)·pieces + c
    float* at_c = x + at(l, b, h, i) + c * Width;
    if constexpr (Width == 4)
      *reinterpret_cast<float4*>(at_c) = make_float4(0.f, 0.f, 0.f, 0.f);
    else
      *at_c = 0.f;
  }
}

}  // namespace

void attention_zero_rows(const HeadLayout& l, int64_t B, int64_t H, int64_t L, int64_t d, float* x) {
  if (B * H * L * d == 0) return;
  const bool vec =
      d % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && l.sb % 4 == 0 && l.sh % 4 == 0 && l.sl % 4 == 0;
  const int64_t n = B * H * L * (vec ? d / 4 : d);
  if (vec)
    QKV_LAUNCH(blocks_for(n), 256, 0, stream(), zero_rows_kernel<4>)(l, Divisor(H), Divisor(L), Divisor(d / 4), n, x);
  else
    QKV_LAUNCH(blocks_for(n), 256, 0, stream(), zero_rows_kernel<1>)(l, Divisor(H), Divisor(L), Divisor(d), n, x);
  QKV_CUDA_LAUNCHED(zero_rows_kernel);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
