// The penalties a generation's history puts on its next token's logits, written once so that every
// device computes them alike (kernels/sample.inc's apply_penalties; vLLM's order and f32 arithmetic):
// a token seen in the prompt or the output gets the repetition penalty r (CTRL, Keskar et al. 2019;
// Hugging Face's RepetitionPenaltyLogitsProcessor) — a positive logit divided by it, a negative one
// multiplied —; a token the output holds c > 0 times gets OpenAI's frequency and presence penalties:
//
//   x ← x > 0 ? x / r : x · r     (seen: c > 0 or in the prompt)
//   x ← (x − f · c) − p            (c > 0)
#pragma once

#include <cstdint>

#include "qkv/core/host_device.h"

namespace qkv::kernels {

QKV_HOST_DEVICE inline float penalized(float x, int32_t count, bool in_prompt, float r, float f, float p) {
  if (count > 0 || in_prompt) x = x > 0.f ? x / r : x * r;
  if (count > 0) {
#ifdef __CUDA_ARCH__
    x = __fadd_rn(__fadd_rn(x, -__fmul_rn(f, static_cast<float>(count))), -p);  // (no fused multiply-add: the CPU's roundings)
#else
    x = (x - f * static_cast<float>(count)) - p;
#endif
  }
  return x;
}

}  // namespace qkv::kernels
