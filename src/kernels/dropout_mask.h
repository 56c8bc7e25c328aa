// The dropout an op applies to one of its inputs or its output (dropout itself, add_layer_norm's and
// add_rms_norm's residual, relu's and gelu's output), drawn as dropout_apply draws it (kernels/activation.inc): element i of the dense input
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

// A replayed step's counters (train/step_graph.h): a CUDA graph bakes every kernel's arguments in
// when it records a training step, so a mask's `counter` would draw the recorded step's bits at
// every replay. Where `offset` is set it points to one word in the memory of the device the kernel
// runs on, which the step graph sets before each replay to (the generator's counter as that step
// starts) − (its counter as the recorded step started): the kernel draws from counter + *offset,
// the counters the step would have reserved run eagerly, read when the kernel runs.
//   counter_at(i) = counter + *offset + i   (offset null: counter + i)
QKV_HOST_DEVICE inline uint64_t offset_word(const uint64_t* offset) {
  if (!offset) return 0;
#ifdef __CUDA_ARCH__
  return __ldg(reinterpret_cast<const unsigned long long*>(offset));
#else
  return *offset;
#endif
}

struct DropoutMask {
  float p = 0.f;
  float keep_scale = 1.f;  // 1/(1 − p), 0 at p = 1: made once on the host (dropout_mask), as dropout_apply makes it
  uint64_t seed = 0, counter = 0;
  const uint64_t* offset = nullptr;  // a step graph's counter offset (above); null: none

  QKV_HOST_DEVICE bool active() const { return p > 0.f; }
  // the mask with the offset read and added to counter (loops that read counter themselves take this)
  QKV_HOST_DEVICE DropoutMask resolved() const { return {p, keep_scale, seed, counter + offset_word(offset), nullptr}; }
  // element i of the input (its index in the dense tensor), whose value is v
  QKV_HOST_DEVICE float operator()(float v, uint64_t i) const {
    return Generator::paired_uniform(seed, counter + offset_word(offset) + i) >= p ? v * keep_scale : 0.f;
  }
  // the same mask from element `at` on (a row's), resolved
  QKV_HOST_DEVICE DropoutMask from(uint64_t at) const {
    return {p, keep_scale, seed, counter + offset_word(offset) + at, nullptr};
  }
};

// The mask dropout(·, p) draws from (seed, counter): kernels/activation.inc's dropout_apply.
inline DropoutMask dropout_mask(float p, uint64_t seed, uint64_t counter) {
  return {p, p < 1.f ? 1.f / (1.f - p) : 0.f, seed, counter};
}

// The mask of a dropout over `numel` elements, its counters reserved from `gen` (default_generator()
// when null) — the one place a dropout takes them, so a fused op draws the bits the dropout op would
// have drawn in its place. p = 0: no mask, nothing reserved.
inline DropoutMask reserve_dropout(float p, int64_t numel, Generator* gen) {
  if (p == 0.f) return {};
  Generator& g = gen ? *gen : default_generator();
  const uint64_t seed = g.seed(), counter = g.reserve(static_cast<uint64_t>(numel));
  DropoutMask m = dropout_mask(p, seed, counter);
  m.offset = g.counter_offset();  // (a step graph's, while it records one)
  return m;
}

}  // namespace qkv::kernels
