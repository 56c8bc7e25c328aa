// Device functions both attention kernel files share (attention.cu, attention_bf16.cu): row offsets,
// the mask and causality of one score, dropout's keep factor. nvcc only.
#pragma once

#include <cstdint>

#include "kernels/attention_problem.h"
#include "kernels/cuda/launch.h"
#include "qkv/core/rng.h"

namespace qkv::kernels::cuda {

// Where row (b, h, i) of an output or gradient laid out as `l` starts (HeadLayout::offset, on the device).
__device__ inline int64_t at(const HeadLayout& l, int64_t b, int64_t h, int64_t i) {
  return b * l.sb + h * l.sh + i * l.sl;
}

// The soft cap of a score x = scale·q·k (p.softcap > 0: Gemma 2's attn_logit_softcapping, FlashAttention-2's
// softcap), before the mask, and its slope for the backward (dX = dS ∘ c'(x)):
//   c(x) = softcap · tanh(x / softcap),   c'(x) = 1 − (c(x) / softcap)²      (no cap: c(x) = x, c' = 1)
// The CUDA-core kernels (attention.cu), the paged decoding kernels, the 3xTF32 and mma.sync pairs
// (attention_rows.cuh) and wgmma's at head dim 256 apply it; the other tensor-core kernels decline a
// soft-capped problem (attention_softcapped).
// (tanhf, libdevice's: tried against 1 − 2 / (e^(2y) + 1) by one exp2f, which saved no registers —
// ptxas, sm_90: the tiled decoding kernel 178 with tanhf, 180 with it; split-KV's bf16 partial 54, 71.)
__device__ inline float soft_cap(float cap, float x) { return cap > 0.f ? cap * tanhf(x / cap) : x; }
__device__ inline float soft_cap_slope(float cap, float c) {
  if (cap <= 0.f) return 1.f;
  const float t = c / cap;
  return 1.f - t * t;
}

// scale·q·k + M for query i and key j of head (b, h): −∞ where a key past Lk, the boolean mask or
// causality (j ≤ i visible, top-left aligned as PyTorch) hides j.
__device__ inline float masked_score(const AttnProblem& p, int64_t b, int64_t h, int64_t i, int64_t j, float s) {
  if (j >= p.Lk || (p.causal && j > i)) return -INFINITY;
  const int64_t off = b * p.mask.sb + h * p.mask.sh + i * p.mask.sq + j * p.mask.sk;
  if (p.mask.kind == AttnMask::Kind::boolean) {
    if (!static_cast<const uint8_t*>(p.mask.data)[off]) return -INFINITY;
  } else if (p.mask.kind == AttnMask::Kind::additive) {
    s += static_cast<const float*>(p.mask.data)[off];
  }
  return s;
}

// The counter of dropout's draw for element (b, h, i, j): the op's first, plus the element's index
__device__ inline uint64_t dropout_counter(const AttnProblem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  return p.first_counter() + static_cast<uint64_t>(((b * p.H + h) * p.Lq + i) * p.Lk + j);
}

// Z / (1 − p) of one draw u: 1 / (1 − p) where u ≥ p (kept), 0 where dropped
__device__ inline float kept_scale(float u, float p) { return u >= p ? 1.f / (1.f - p) : 0.f; }

// Z_ij / (1 − p): the CPU's draw for element (b, h, i, j) (Generator::paired_uniform).
__device__ inline float keep(const AttnProblem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (p.dropout_p == 0.f) return 1.f;
  return kept_scale(Generator::paired_uniform(p.seed, dropout_counter(p, b, h, i, j)), p.dropout_p);
}

// keep() of keys j and j + 1 of row i (k0, k1): one hash where their counters are a pair 2k, 2k + 1 of
// paired_uniform's (where the head's first counter plus i·Lk + j is even), else one each.
__device__ inline void keep_pair(const AttnProblem& p, int64_t b, int64_t h, int64_t i, int64_t j, float& k0,
                                 float& k1) {
  const uint64_t c = dropout_counter(p, b, h, i, j);
  float u0, u1;
  if (c % 2 == 0) {
    Generator::paired_uniforms(p.seed, c / 2, u0, u1);
  } else {
    u0 = Generator::paired_uniform(p.seed, c);
    u1 = Generator::paired_uniform(p.seed, c + 1);
  }
  k0 = kept_scale(u0, p.dropout_p);
  k1 = kept_scale(u1, p.dropout_p);
}

}  // namespace qkv::kernels::cuda
