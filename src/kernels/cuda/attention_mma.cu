// bf16 / f16 flash attention on the tensor cores, mma.sync with every product's accumulators in
// registers: the launches of attention_mma_kernels.cuh's forward and backward (the pre-pass's dense T
// copies, the kernel's form for the problem), and the choice between this pair and the others.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_mma_kernels.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

// attention_mma_kernels.cuh's names qualified (mma_pair::): a test compiles the wgmma pair's, alike, in one file
using tiles::round_backward_operands;
using tiles::round_forward_operands;

template <typename T, int D, int MT, int KN, bool General>
void launch_forward_tiles(const AttnProblem& p, const T* qh, const T* kh, const T* vh, float* out, float* lse,
                          cudaStream_t s) {
  constexpr size_t bytes = mma_pair::forward_smem_bytes<D, MT, KN>();
  QKV_CUDA_CHECK(cudaFuncSetAttribute(mma_pair::flash_mma_forward_kernel<T, D, MT, KN, General>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lq + mma_pair::kFwdRows<MT> - 1) / mma_pair::kFwdRows<MT>),
                  static_cast<unsigned>(p.B * p.H));
  QKV_LAUNCH(grid, mma_pair::kThreads, bytes, s, mma_pair::flash_mma_forward_kernel<T, D, MT, KN, General>)
  (p, qh, kh, vh, out, lse);
  QKV_CUDA_LAUNCHED(mma_pair::flash_mma_forward_kernel);
}

template <typename T, int D, int MT, int KN>
void launch_forward_tiles(const AttnProblem& p, const T* qh, const T* kh, const T* vh, float* out, float* lse,
                          cudaStream_t s) {
  if (attention_general_code(p)) return launch_forward_tiles<T, D, MT, KN, true>(p, qh, kh, vh, out, lse, s);
  launch_forward_tiles<T, D, MT, KN, false>(p, qh, kh, vh, out, lse, s);
}

template <typename T, int D>
void launch_forward(const AttnProblem& p, float* out, float* lse, cudaStream_t s) {
  // dense T copies of q, k, v in one scratch buffer (each a multiple of 16 bytes: D is 64 or 128)
  const int64_t nq = p.B * p.H * p.Lq * D, nk = p.B * p.Hkv * p.Lk * D;
  Scratch buf((nq + 2 * nk) / 2, s);
  T* qh = reinterpret_cast<T*>(buf.p);
  T* kh = qh + nq;
  T* vh = kh + nk;
  round_forward_operands<T>(p, D, qh, kh, vh, s);
  if (attention_forward_tiles(D) == 2) return launch_forward_tiles<T, D, 2, D == 128 ? 32 : 64>(p, qh, kh, vh, out, lse, s);
  launch_forward_tiles<T, D, 1, 64>(p, qh, kh, vh, out, lse, s);
}

// The backward: its pre-pass (q, dO, k, v rounded; D_i; dq zeroed: one launch), then the kernel
template <typename T, int D>
void launch_backward(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq, float* dk,
                     float* dv, cudaStream_t s) {
  const int64_t nq = p.B * p.H * p.Lq * D, nk = p.B * p.Hkv * p.Lk * D;
  Scratch buf(nq + nk + p.B * p.H * p.Lq, s);  // q, dO, k, v in T: (2·nq + 2·nk) · 2 bytes; then D_i in f32
  T* qh = reinterpret_cast<T*>(buf.p);
  T* gh = qh + nq;
  T* kh = gh + nq;
  T* vh = kh + nk;
  float* Dsum = buf.p + nq + nk;
  round_backward_operands<T>(p, out, dout, D, qh, gh, kh, vh, Dsum, dq, s);
  // the kernel: without the mask code, with it, or with it and a soft cap's (16 KB more shared memory)
  const bool capped = attention_softcapped(p), gen = attention_general_code(p);
  auto* kernel = capped ? mma_pair::flash_mma_backward_kernel<T, D, true, true>
                 : gen  ? mma_pair::flash_mma_backward_kernel<T, D, true>
                        : mma_pair::flash_mma_backward_kernel<T, D, false>;
  const size_t bytes = mma_pair::backward_smem_bytes<D>(capped);
  QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lk + mma_pair::kKeys - 1) / mma_pair::kKeys),
                  static_cast<unsigned>(p.B * p.Hkv));
  QKV_LAUNCH(grid, mma_pair::kThreads, bytes, s, kernel)(p, qh, kh, vh, gh, lse, Dsum, dq, dk, dv);
  QKV_CUDA_LAUNCHED(mma_pair::flash_mma_backward_kernel);
}

}  // namespace

bool attention_uses_wmma() {
  const char* e = std::getenv("QKV_CUDA_ATTENTION");
  return e && std::strcmp(e, "wmma") == 0;
}
// Measured on an H200 (docs/BENCHMARKS.md, bf16, L = 1k…16k): at head dim 128 two m-tiles a warp
// (keys in tiles of 32) run the forward 1.1–1.2× faster than one; at 64, one is as fast or faster.
int attention_forward_tiles(int64_t D) {
  const char* e = std::getenv("QKV_CUDA_ATTENTION");
  if (e && std::strcmp(e, "mma1") == 0) return 1;
  if (e && std::strcmp(e, "mma2") == 0) return 2;
  return D == 128 ? 2 : 1;
}

void attention_forward_mma_bf16(const AttnProblem& p, float* out, float* lse) {
  if (attention_forward_wgmma_bf16(p, out, lse)) return;  // Hopper
  if (p.D == 64) return launch_forward<__nv_bfloat16, 64>(p, out, lse, stream());
  launch_forward<__nv_bfloat16, 128>(p, out, lse, stream());
}
void attention_forward_mma_f16(const AttnProblem& p, float* out, float* lse) {
  if (attention_forward_wgmma_f16(p, out, lse)) return;  // Hopper
  if (p.D == 64) return launch_forward<__half, 64>(p, out, lse, stream());
  launch_forward<__half, 128>(p, out, lse, stream());
}
void attention_backward_mma_bf16(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq,
                                 float* dk, float* dv) {
  if (attention_backward_wgmma_bf16(p, out, lse, dout, dq, dk, dv)) return;  // Hopper, where the faster
  if (p.D == 64) return launch_backward<__nv_bfloat16, 64>(p, out, lse, dout, dq, dk, dv, stream());
  launch_backward<__nv_bfloat16, 128>(p, out, lse, dout, dq, dk, dv, stream());
}
void attention_backward_mma_f16(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq,
                                float* dk, float* dv) {
  if (attention_backward_wgmma_f16(p, out, lse, dout, dq, dk, dv)) return;  // Hopper, where the faster
  if (p.D == 64) return launch_backward<__half, 64>(p, out, lse, dout, dq, dk, dv, stream());
  launch_backward<__half, 128>(p, out, lse, dout, dq, dk, dv, stream());
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
