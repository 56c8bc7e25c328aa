// What the tensor-core attention kernels share (attention_mma_kernels.cuh, attention_tf32_kernels.cuh,
// sm90a/attention_wgmma.cu): the 16-bit element packing, cp.async copies into shared memory, and the
// pre-pass that writes dense T copies of the f32 operands. nvcc, or g++ under tests/kernels/cuda_emulation.h (QKV_CUDA_EMULATION:
// cp.async's copies landing at their wait). In an unnamed namespace, as every kernel header's: a test
// that runs these on the host defines its own, which must not stand in for the library's at link time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/divisor.cuh"
#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda::tiles {
namespace {

// e^x is computed as 2^(x·log2 e): ex2 is one instruction
constexpr float kLog2e = 1.4426950408889634f;

// Two floats → one 32-bit register of two T, `lo` in the low half (the lower-indexed element).
template <typename T>
__device__ inline uint32_t pack2(float lo, float hi);
template <>
__device__ inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ inline uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

#ifdef QKV_CUDA_EMULATION
// On the host (tests/kernels/cuda_emulation.h): a shared-memory address is the offset into the
// emulation's shared memory; a copy lands at the wait that retires its group (the latest a GPU may
// land it), so a tile read before its wait is read stale.
__device__ inline uint32_t smem_address(const void* p) { return ::qkv::emulation::shared_address(p); }
__device__ inline void cp_async16(void* dst, const void* src, bool valid) {
  ::qkv::emulation::cp_async16(dst, src, valid);
}
__device__ inline void cp_async_commit() { ::qkv::emulation::cp_async_commit(); }
template <int N>
__device__ inline void cp_async_wait() {
  ::qkv::emulation::cp_async_wait(N);
}
#else
__device__ inline uint32_t smem_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes global → shared without passing through registers; `valid` false writes 16 zero bytes.
__device__ inline void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() {  // until at most N of this thread's groups are in flight
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// ---- pre-pass: strided f32 rows → dense T rows --------------------------------------------------------

// dst[(b·heads + h)·L + i][c] = T(src[b·sb + h·sh + i·sl + c]) for c < D (D a multiple of 8): a thread
// per 8 elements, one 16-byte store; float4 loads when the source allows them (Vec). A piece's row and
// head through Divisors (divisor.cuh): no divide instruction per piece.
template <typename T, bool Vec>
__global__ void round_rows_kernel(const float* src, int64_t sb, int64_t sh, int64_t sl, Divisor heads, Divisor L,
                                  Divisor row_pieces, int64_t pieces, T* dst) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < pieces; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t c, i, h;
    const int64_t b = heads.divmod(L.divmod(row_pieces.divmod(e, c), i), h);  // e = ((b·heads + h)·L + i)·D/8 + c/8
    const float* s = src + b * sb + h * sh + i * sl + c * 8;
    float x[8];
    if constexpr (Vec) {
      const float4 lo = *reinterpret_cast<const float4*>(s), hi = *reinterpret_cast<const float4*>(s + 4);
      x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w, x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
    } else {
#pragma unroll
      for (int u = 0; u < 8; ++u) x[u] = s[u];
    }
    reinterpret_cast<uint4*>(dst)[e] =
        make_uint4(pack2<T>(x[0], x[1]), pack2<T>(x[2], x[3]), pack2<T>(x[4], x[5]), pack2<T>(x[6], x[7]));
  }
}

template <typename T>
void round_rows(const float* src, int64_t sb, int64_t sh, int64_t sl, int64_t B, int64_t heads, int64_t L, int64_t D,
                T* dst, cudaStream_t s) {
  const int64_t pieces = B * heads * L * D / 8;
  if (pieces == 0) return;
  const bool vec = reinterpret_cast<uintptr_t>(src) % 16 == 0 && sb % 4 == 0 && sh % 4 == 0 && sl % 4 == 0;
  const Divisor h(heads), l(L), row(D / 8);
  if (vec)
    QKV_LAUNCH(blocks_for(pieces), 256, 0, s, round_rows_kernel<T, true>)(src, sb, sh, sl, h, l, row, pieces, dst);
  else
    QKV_LAUNCH(blocks_for(pieces), 256, 0, s, round_rows_kernel<T, false>)(src, sb, sh, sl, h, l, row, pieces, dst);
  QKV_CUDA_LAUNCHED(round_rows_kernel);
}

}  // namespace
}  // namespace qkv::kernels::cuda::tiles
