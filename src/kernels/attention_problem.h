// The attention problem every device's attention kernels solve (kernels/attention.inc declares them
// once, with the formulas): the operands' shapes, strides and pointers, the mask, causality, scale,
// dropout, the precision of the products, and the layouts the outputs and gradients are written in.
#pragma once

#include <cstdint>

#include "kernels/dropout_mask.h"

namespace qkv::kernels {

struct AttnMask {
  enum class Kind { none, boolean, additive };
  Kind kind = Kind::none;
  const void* data = nullptr;            // uint8_t (1 = may attend) or float (added to scores)
  int64_t sb = 0, sh = 0, sq = 0, sk = 0;  // strides in elements; 0 along broadcast dims
};

// Where the rows of a [B, H, L, d] output or output gradient live: row (b, h, i) starts at
// b·sb + h·sh + i·sl, unit stride along d. Dense [B, H, L, d] unless the caller asks for another
// layout, e.g. [B, L, H, d] (sh = d, sl = H·d), so heads are already merged for the output
// projection. Only the flash kernels read these (every precision); the reference kernels write dense.
struct HeadLayout {
  int64_t sb = 0, sh = 0, sl = 0;
  static HeadLayout dense(int64_t H, int64_t L, int64_t d) { return {H * L * d, L * d, d}; }
  int64_t offset(int64_t b, int64_t h, int64_t i) const { return b * sb + h * sh + i * sl; }  // of row (b, h, i)
};

// The precision of the flash pair's products: q, k, v (and dout) rounded to bf16 or IEEE f16 for
// them, sums and softmax in f32 (the reference pair computes in f32).
enum class AttnCompute : uint8_t { f32, bf16, f16 };

struct AttnProblem {
  int64_t B = 1, H = 1, Hkv = 1, Lq = 0, Lk = 0, D = 0, Dv = 0;
  const float* q = nullptr;
  int64_t q_sb = 0, q_sh = 0, q_sl = 0;
  const float* k = nullptr;
  int64_t k_sb = 0, k_sh = 0, k_sl = 0;
  const float* v = nullptr;
  int64_t v_sb = 0, v_sh = 0, v_sl = 0;
  AttnMask mask;
  bool causal = false;  // key j is visible to query i iff j ≤ i (top-left aligned, as PyTorch)
  float scale = 1.f;
  // > 0: the scores soft-capped before the mask, s ← softcap · tanh(s / softcap) (Gemma 2's
  // attn_logit_softcapping, FlashAttention-2's softcap); on a GPU the CUDA-core and paged kernels, the
  // 3xTF32 and mma.sync pairs and wgmma's at head dim 256 (cuda/attention_kernels.h: attention_softcapped)
  float softcap = 0.f;
  float dropout_p = 0.f;
  uint64_t seed = 0, counter = 0;  // dropout of element (b,h,i,j) uses first_counter() + ((b·H + h)·Lq + i)·Lk + j
  // a step graph's counter offset (kernels/dropout_mask.h), null: none
  const uint64_t* counter_offset = nullptr;
  // the op's first counter: counter + *counter_offset, read when the kernel runs
  QKV_HOST_DEVICE uint64_t first_counter() const { return counter + offset_word(counter_offset); }
  AttnCompute compute = AttnCompute::f32;
  // Flash kernels: layouts of out and dout ([B, H, Lq, Dv]), dq ([B, H, Lq, D]), dk ([B, Hkv, Lk, D])
  // and dv ([B, Hkv, Lk, Dv]). prepare() sets them dense.
  HeadLayout out_l, dout_l, dq_l, dk_l, dv_l;
};

}  // namespace qkv::kernels
