// The attention kernels of the CUDA backend: kernels/attention.inc (one declaration for every device:
// the flash pair honours p.out_l … p.dv_l; the reference pair writes dense, and keeps P and W as the
// CPU's does), and the kernels of its own the flash pair dispatches to (attention.cu,
// attention_bf16.cu, attention_mma.cu, attention_tf32.cu, sm90a/attention_wgmma.cu; the register-resident
// pairs' device code in attention_mma_kernels.cuh and attention_tf32_kernels.cuh).
#pragma once

#include <cstdint>

#include "kernels/attention_problem.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN

#include "kernels/attention.inc"

// The precisions the flash pair dispatches to on p.compute. f32 (attention.cu):
void attention_forward_flash_f32(const AttnProblem& p, float* out, float* lse);
// The f32 CUDA-core forward (never the tensor cores) reading q, k and v rounded to p.compute's 16-bit
// type as it loads them (f32: as they are): bf16 and f16 attention where no tensor-core kernel serves —
// decoding steps, head dims off the tiles — the numbers of the CUDA-core f32 kernels over rounded copies,
// bit for bit, without the copies (attention_16bit.cu; a decoding step over a dense cache, the paged
// decoding kernel's, rounding likewise: attention_decode_tiled below).
void attention_forward_rounding(const AttnProblem& p, float* out, float* lse);
void attention_backward_flash_f32(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv);
// bf16 (attention_16bit.cu chooses the kernels): q, k, v (and dout) rounded to bf16, tensor-core products with f32
// accumulation, forward (lse for the backward when not null) and backward; the flash pair's layouts.
// Head dims 64/128 on the tiles, other shapes on the f32 kernels over rounded copies.
void attention_forward_flash_bf16(const AttnProblem& p, float* out, float* lse);
void attention_backward_flash_bf16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                   float* dq, float* dk, float* dv);
// f16 (IEEE half, the same kernels on __half): AttentionCompute::f16.
void attention_forward_flash_f16(const AttnProblem& p, float* out, float* lse);
void attention_backward_flash_f16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv);
// The tiles' pair on mma.sync with S, P, O (forward) and S, dP, dK, dV (backward) in registers
// (attention_mma.cu; head dims 64 and 128, D = Dv), which the bf16/f16 pair above takes for those
// shapes unless QKV_CUDA_ATTENTION=wmma selects the first, WMMA pair (attention_uses_wmma: for
// side-by-side measurement and the tests). The backward makes D_i = dO_i · O_i from the forward's out and
// zeroes dq itself, in the pre-pass that rounds its operands (attention_tiles.cuh: one launch).
void attention_forward_mma_bf16(const AttnProblem& p, float* out, float* lse);
void attention_forward_mma_f16(const AttnProblem& p, float* out, float* lse);
void attention_backward_mma_bf16(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq,
                                 float* dk, float* dv);
void attention_backward_mma_f16(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq,
                                float* dk, float* dv);
bool attention_uses_wmma();
// A mask, dropout or a soft cap: the tile kernels in their form with the element-wise code (General); without, the
// form whose tiles check only keys past Lk and the causal diagonal — less code, which the fully unrolled
// loops would otherwise multiply (Nsight Compute: instruction-fetch stalls a third of the mma.sync forward's).
inline bool attention_general_code(const AttnProblem& p) {
  return p.mask.kind != AttnMask::Kind::none || p.dropout_p > 0.f || p.softcap > 0.f;
}
// Soft-capped scores (p.softcap > 0, Gemma 2's): the CUDA-core kernels (attention.cu: the pair, split-KV,
// the reference pair) and the paged decoding kernels take them in every precision, forward and backward;
// the 3xTF32 and mma.sync pairs in their General form, forward (rows::scale_and_mask) and backward
// (rows::probabilities keeps each score's slope c′ in shared memory for its dS': 3xTF32's in dS'ᵀ's own
// place, mma.sync's in 16 KB more) — on Hopper too, in place of wgmma's; head dim 256 on Hopper in the
// Capped forms of wgmma's warp-specialized forward and its backward256 (the slopes in registers). The
// WMMA kernels and wgmma's at head dims 64 and 128 take no cap (wgmma's one-tile mask form would spill
// more, ptxas), so the dispatchers hand those to the kernels that do (head dim 256 off Hopper: the CUDA
// cores).
inline bool attention_softcapped(const AttnProblem& p) { return p.softcap > 0.f; }
// The first, WMMA pair (attention_bf16.cu; head dims 64 and 128, D = Dv), S, P and O round-tripped
// through shared memory: where QKV_CUDA_ATTENTION=wmma asks. The backward takes D_i and a zeroed dq.
void attention_forward_wmma_bf16(const AttnProblem& p, float* out, float* lse);
void attention_forward_wmma_f16(const AttnProblem& p, float* out, float* lse);
void attention_backward_wmma_bf16(const AttnProblem& p, const float* lse, const float* Dsum, const float* dout,
                                  float* dq, float* dk, float* dv);
void attention_backward_wmma_f16(const AttnProblem& p, const float* lse, const float* Dsum, const float* dout,
                                 float* dq, float* dk, float* dv);
// The forward on Hopper's wgmma (sm90a/attention_wgmma.cu; head dims 64, 128 and 256, D = Dv): runs and
// returns true on a compute capability 9.0 GPU unless QKV_CUDA_ATTENTION names another kernel
// (mma, mma1, mma2, wmma); false — nothing done — where it does not serve the problem.
bool attention_forward_wgmma_bf16(const AttnProblem& p, float* out, float* lse);
bool attention_forward_wgmma_f16(const AttnProblem& p, float* out, float* lse);
// The backward on wgmma (head dims 64, 128 and 256, D = Dv, compute capability 9.0) — wgmma-ws (warp-
// specialized: a TMA producer and two consumers) or wgmma (two warpgroups) — where it is the faster on an
// H200 or QKV_CUDA_ATTENTION_BACKWARD names it (sm90a/attention_wgmma.cu's backward_kernel; "mma" names
// the mma.sync backward): runs and returns true, or false — nothing done. Makes D_i from out and zeroes
// dq in its pre-pass, as the mma.sync backward.
bool attention_backward_wgmma_bf16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                   float* dq, float* dk, float* dv);
// Whether those would serve the problem (head dim 256, which no other tile kernel serves)
bool attention_backward_wgmma_serves(const AttnProblem& p);
bool attention_backward_wgmma_f16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv);
// m16 tiles of query rows a warp in the mma.sync forward at head dim D: 2 at 128, 1 at 64 (the faster
// on an H200), or as QKV_CUDA_ATTENTION=mma1 / mma2 says (for measurement side by side and the tests).
int attention_forward_tiles(int64_t D);
// D_i = dout_i · out_i for every query row (the flash backward's first pass; the CUDA-core and WMMA pairs —
// the mma.sync, wgmma and 3xTF32 ones make it in their pre-pass)
void attention_row_dot(const AttnProblem& p, const float* out, const float* dout, float* Dsum);
// Zeros in the rows of a [B, H, L, d] tensor laid out as `l` (the WMMA backward adds dq with atomics)
void attention_zero_rows(const HeadLayout& l, int64_t B, int64_t H, int64_t L, int64_t d, float* x);
// The f32 flash pair on the tensor cores at f32's accuracy (attention_tf32.cu: 3xTF32 on mma.sync
// m16n8k8, head dims 64 and 128, D = Dv, q, k, v and dout rows on 16 bytes, the shared memory the GPU
// gives a block), which attention.cu's f32 pair hands the problem to unless QKV_CUDA_ATTENTION_F32=simt
// keeps it on the CUDA cores (attention_uses_tf32; tf32x3 or unset: the tensor cores). Each returns
// false, doing nothing, where it does not serve the problem (and the forward for a decoding step: ≤ 16
// query rows, no lse: the split-KV kernels).
// The backward makes D_i from the forward's out and zeroes dq itself (one launch: FlashAttention-2's
// preprocess, attention_tiles.cuh's backward_preprocess).
// A decoding step's attention over a dense f32 KV cache by the paged decoding kernel (paged_attention.cu:
// the cache as pages of one sequence each; bf16 and f16 steps reading q, k and v rounded), which
// attention.cu's split over the keys hands a problem with no lse to; false, doing nothing, where its
// layouts, mask or dropout do not fit.
bool attention_decode_tiled(const AttnProblem& p, float* out);
bool attention_uses_tf32();
bool attention_forward_tf32(const AttnProblem& p, float* out, float* lse);
bool attention_backward_tf32(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq,
                             float* dk, float* dv);

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
