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

// Each operation rounded on its own, on every device: nvcc would fuse a product into the next add,
// and so may the host's compiler (GCC contracts across statements in C++ unless told not to) —
// the GPU's intrinsics, and a stored product on the host.
QKV_HOST_DEVICE inline float penalty_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  volatile float r = a * b;
  return r;
#endif
}
QKV_HOST_DEVICE inline float penalty_sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, -b);
#else
  volatile float r = a - b;
  return r;
#endif
}

QKV_HOST_DEVICE inline float penalized(float x, int32_t count, bool in_prompt, float r, float f, float p) {
  if (count > 0 || in_prompt) x = x > 0.f ? x / r : penalty_mul(x, r);  // (a quotient is never fused)
  if (count > 0) x = penalty_sub(penalty_sub(x, penalty_mul(f, static_cast<float>(count))), p);
  return x;
}

}  // namespace qkv::kernels
