// The dropout a fused kernel applies to one of its inputs (add_layer_norm's and add_rms_norm's
// residual), drawn as dropout_apply draws it (kernels/activation.inc): element i of the dense input
// is kept iff Generator::paired_uniform(seed, counter + i) ≥ p and then scaled by 1/(1 − p), so a
// fused kernel's dropped input has the bits of dropout_apply's output, on every device.
//
//   mask(v, i) = v · keep_scale  if paired_uniform(seed, counter + i) ≥ p,  0 otherwise
//
// p = 0: no dropout (the input as it is).
#pragma once

#include <cstdint>

#include "qkv/core/host_device.h"
#include "qkv/core/rng.h"

namespace qkv::kernels {

struct DropoutMask {
  float p = 0.f;
  float keep_scale = 1.f;  // 1/(1 − p), 0 at p = 1: made once on the host (dropout_mask), as dropout_apply makes it
  uint64_t seed = 0, counter = 0;

  QKV_HOST_DEVICE bool active() const { return p > 0.f; }
  // element i of the input (its index in the dense tensor), whose value is v
  QKV_HOST_DEVICE float operator()(float v, uint64_t i) const {
    return Generator::paired_uniform(seed, counter + i) >= p ? v * keep_scale : 0.f;
  }
  // the same mask from element `offset` on (a row's)
  QKV_HOST_DEVICE DropoutMask from(uint64_t offset) const { return {p, keep_scale, seed, counter + offset}; }
};

// The mask dropout(·, p) draws from (seed, counter): kernels/activation.inc's dropout_apply.
inline DropoutMask dropout_mask(float p, uint64_t seed, uint64_t counter) {
  return {p, p < 1.f ? 1.f / (1.f - p) : 0.f, seed, counter};
}

}  // namespace qkv::kernels
