// The CPU's attention kernels: kernels/attention.inc (the formulas and contracts, one declaration for
// every device), and the precisions the flash pair dispatches to on p.compute.
#pragma once

#include <cstdint>

#include "kernels/attention_problem.h"

namespace qkv::kernels::cpu {
#include "kernels/attention.inc"

// f32 (attention_flash.cpp).
void attention_forward_flash_f32(const AttnProblem& p, float* out, float* lse);
void attention_backward_flash_f32(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv);
// bf16 (attention_bf16.cpp), the flash pair's layouts: q, k, v (and dout) rounded to bf16.
// Forward for inference (lse null) on the AVX512_BF16 kernel below where this build has it, P
// rounded too; otherwise — training (lse wanted), dropout, a soft cap, no AVX512_BF16 — and for the backward,
// the f32 flash kernels over bf16-rounded copies (the GPU's tensor-core kernels round P and dS too).
void attention_forward_flash_bf16(const AttnProblem& p, float* out, float* lse);
void attention_backward_flash_bf16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                   float* dq, float* dk, float* dv);
// f16 (attention_bf16.cpp): the f32 flash kernels over copies rounded to IEEE f16, both directions
// (the GPU runs its tensor-core kernels on __half).
void attention_forward_flash_f16(const AttnProblem& p, float* out, float* lse);
void attention_backward_flash_f16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv);

// The AVX512_BF16 forward (inference): both products on bf16 dot products with f32 accumulation,
// softmax in f32; no dropout. out: dense f32 [B, H, Lq, Dv].
void attention_forward_flash_bf16_avx512(const AttnProblem& p, float* out);
bool has_avx512_bf16();  // whether this build has it

}  // namespace qkv::kernels::cpu
