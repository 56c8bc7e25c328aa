// bf16 and f16 attention on the GPU (AttentionCompute::bf16 — what Autocast(bf16) trains with — and
// AttentionCompute::f16): which kernels serve a problem. Head dims 64 and 128 with D = Dv take the
// tensor-core tiles — on Hopper the wgmma forward (sm90a/attention_wgmma.cu), elsewhere, or where
// QKV_CUDA_ATTENTION names them, the mma.sync pair (attention_mma.cu), or the first, WMMA pair
// (attention_bf16.cu) where QKV_CUDA_ATTENTION=wmma; head dim 256 the wgmma kernels where they serve;
// decoding steps and every other shape the f32 kernels (attention.cu) reading q, k, v rounded to the
// 16-bit type (the backward over rounded copies of q, k, v and dO) — the same rounding of the inputs,
// f32 products. A file of its own, apart
// from the WMMA kernels, so that the host emulation runs this choice on an emulated H200 and A100
// (tests/kernels/attention_mma_emulation_test.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

bool on_tiles(const AttnProblem& p) { return p.D == p.Dv && (p.D == 64 || p.D == 128); }
bool on_d256(const AttnProblem& p) { return p.D == 256 && p.Dv == 256; }

// The backward off the tiles: dense copies of q, k, v and dout rounded to T, for the f32 kernels.
template <typename T>
struct Rounded {
  AttnProblem p;
  const float* dout = nullptr;
  Scratch buf;
  Rounded(const AttnProblem& src, const float* dout_src, cudaStream_t s)
      : p(src),
        buf(src.B * (src.H * src.Lq * src.D + src.Hkv * src.Lk * (src.D + src.Dv) +
                     (dout_src ? src.H * src.Lq * src.Dv : 0)),
            s) {
    float* at = buf.p;
    auto dense = [&](const float* from, int64_t heads, int64_t L, int64_t d, int64_t sb, int64_t sh, int64_t sl) {
      copy_strided_to({src.B, heads, L, d}, at, {heads * L * d, L * d, d, 1}, from, {sb, sh, sl, 1}, sizeof(float));
      if constexpr (std::is_same_v<T, __half>)
        round_to_f16(at, at, src.B * heads * L * d);
      else
        round_to_bf16(at, at, src.B * heads * L * d);
      float* made = at;
      at += src.B * heads * L * d;
      return made;
    };
    p.q = dense(src.q, src.H, src.Lq, src.D, src.q_sb, src.q_sh, src.q_sl);
    p.q_sb = src.H * src.Lq * src.D, p.q_sh = src.Lq * src.D, p.q_sl = src.D;
    p.k = dense(src.k, src.Hkv, src.Lk, src.D, src.k_sb, src.k_sh, src.k_sl);
    p.k_sb = src.Hkv * src.Lk * src.D, p.k_sh = src.Lk * src.D, p.k_sl = src.D;
    p.v = dense(src.v, src.Hkv, src.Lk, src.Dv, src.v_sb, src.v_sh, src.v_sl);
    p.v_sb = src.Hkv * src.Lk * src.Dv, p.v_sh = src.Lk * src.Dv, p.v_sl = src.Dv;
    if (dout_src) {
      const HeadLayout& g = src.dout_l;
      dout = dense(dout_src, src.H, src.Lq, src.Dv, g.sb, g.sh, g.sl);
      p.dout_l = HeadLayout::dense(src.H, src.Lq, src.Dv);
    }
  }
};

void check_grid(int64_t heads) {
  QKV_CHECK(heads <= 65535, "scaled_dot_product_attention (bf16/f16): ", heads,
            " heads × batch exceed the CUDA grid's 65535 (run in smaller batches)");
}

// A decoding step — a few query rows against the KV cache, no lse (inference) — is bound by reading
// the cache; a 64-row tile would hold 1–16 of them and one block per head would walk every key. The
// f32 kernels serve it as they serve the shapes off the tiles (against a long dense cache the paged
// decoding kernel, paged_attention.cu; else split-KV or a warp a row: attention.cu), rounding q, k and v
// as they read them (until 2026-12-04 over rounded copies: every step copied the whole cache, twice, for
// each layer's self- and cross-attention).
constexpr int64_t kDecodeRows = 16;

template <typename T>
void forward(const AttnProblem& p, float* out, float* lse) {
  if (p.B * p.H * p.Lq == 0) return;
  // head dim 256 on Hopper: the warp-specialized wgmma forward unless QKV_CUDA_ATTENTION names a kernel of
  // another GPU (sm90a/attention_wgmma.cu); elsewhere the f32 kernels below (the
  // backward likewise: its own wgmma kernel on Hopper)
  if (on_d256(p) && (lse || p.Lq > kDecodeRows)) {
    check_grid(p.B * p.H);
    if constexpr (std::is_same_v<T, __half>) {
      if (attention_forward_wgmma_f16(p, out, lse)) return;
    } else if (attention_forward_wgmma_bf16(p, out, lse)) {
      return;
    }
  }
  if (on_tiles(p) && (lse || p.Lq > kDecodeRows)) {
    check_grid(p.B * p.H);
    if (!attention_uses_wmma()) {  // the register-resident kernel (attention_mma.cu)
      if constexpr (std::is_same_v<T, __half>)
        return attention_forward_mma_f16(p, out, lse);
      else
        return attention_forward_mma_bf16(p, out, lse);
    }
    if (!attention_softcapped(p)) {  // (the WMMA pair takes no cap: the f32 kernels below)
      if constexpr (std::is_same_v<T, __half>)
        return attention_forward_wmma_f16(p, out, lse);
      else
        return attention_forward_wmma_bf16(p, out, lse);
    }
  }
  // the f32 CUDA-core kernels, rounding q, k and v as they read them (no tensor-core kernel would
  // serve here: the 3xTF32 pair takes head dims 64 and 128 with lse or more than 16 rows, the tiles' case)
  AttnProblem r = p;
  r.compute = std::is_same_v<T, __half> ? AttnCompute::f16 : AttnCompute::bf16;
  attention_forward_rounding(r, out, lse);
}

template <typename T>
void backward(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq, float* dk,
              float* dv) {
  cudaStream_t s = stream();
  // head dim 256: the wgmma backward where it serves (Hopper, a soft cap too), else below; a soft cap at
  // 64 and 128: mma.sync's backward, never WMMA's (attention_kernels.h)
  const bool d256 = on_d256(p) && attention_backward_wgmma_serves(p);
  const bool wmma = attention_uses_wmma();
  if ((on_tiles(p) || d256) && !(wmma && attention_softcapped(p)) && p.B * p.Hkv > 0 && p.Lq > 0 && p.Lk > 0) {
    check_grid(p.B * p.Hkv);
    // every tile kernel adds dQ into a zeroed dq with atomics and takes D_i = rowsum(dO ∘ O): the mma.sync
    // and wgmma launchers make both in their pre-pass; the WMMA pair takes them made
    if (d256) {
      if constexpr (std::is_same_v<T, __half>)
        attention_backward_wgmma_f16(p, out, lse, dout, dq, dk, dv);
      else
        attention_backward_wgmma_bf16(p, out, lse, dout, dq, dk, dv);
      return;
    }
    if (!wmma) {  // the register-resident kernels (attention_mma.cu)
      if constexpr (std::is_same_v<T, __half>)
        return attention_backward_mma_f16(p, out, lse, dout, dq, dk, dv);
      else
        return attention_backward_mma_bf16(p, out, lse, dout, dq, dk, dv);
    }
    attention_zero_rows(p.dq_l, p.B, p.H, p.Lq, p.D, dq);
    Scratch Dsum(p.B * p.H * p.Lq, s);
    attention_row_dot(p, out, dout, Dsum.p);
    if constexpr (std::is_same_v<T, __half>)
      return attention_backward_wmma_f16(p, lse, Dsum.p, dout, dq, dk, dv);
    else
      return attention_backward_wmma_bf16(p, lse, Dsum.p, dout, dq, dk, dv);
  }
  Rounded<T> r(p, dout, s);
  attention_backward_flash_f32(r.p, out, lse, r.dout, dq, dk, dv);
}

}  // namespace

void attention_forward_flash_bf16(const AttnProblem& p, float* out, float* lse) { forward<__nv_bfloat16>(p, out, lse); }
void attention_backward_flash_bf16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                   float* dq, float* dk, float* dv) {
  backward<__nv_bfloat16>(p, out, lse, dout, dq, dk, dv);
}
void attention_forward_flash_f16(const AttnProblem& p, float* out, float* lse) { forward<__half>(p, out, lse); }
void attention_backward_flash_f16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv) {
  backward<__half>(p, out, lse, dout, dq, dk, dv);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
